"""CreateTopics (19): placed by the control plane (rack-aware, or by placement constraints)."""

import uuid
from collections import Counter

from logbus.broker.handlers.describe_configs import topic_config_entries
from logbus.protocol.errors import ErrorCode, KafkaProtocolError

API_KEY, MIN_VERSION, MAX_VERSION = 19, 2, 7


async def handle(ctx, request) -> dict:
    broker = ctx.broker
    seen = Counter(t.name for t in request.topics)
    results = []
    for t in request.topics:
        if seen[t.name] > 1:
            results.append(_error(t.name, ErrorCode.invalid_request, f"Create topics request from client contains a duplicate topic: {t.name}"))
            continue
        configs = {c.name: c.value for c in t.configs}
        try:
            assignments = _assignments(t) if t.assignments else None
            topic = broker.control.create_topic(t.name, t.num_partitions, t.replication_factor, configs, assignments, request.validate_only)
        except KafkaProtocolError as e:
            results.append(_error(t.name, e.code, e.message))
            continue
        results.append(
            {
                "name": t.name,
                "topic_id": uuid.UUID(int=0) if request.validate_only else uuid.UUID(topic.topic_id),
                "error_code": ErrorCode.none,
                "error_message": None,
                "num_partitions": len(topic.partitions),
                "replication_factor": topic.replication_factor,
                "configs": [
                    {k: e[k] for k in ("name", "value", "read_only", "config_source", "is_sensitive")}
                    for e in topic_config_entries(broker, configs)
                ],
            }
        )
    if not request.validate_only:
        broker.refresh_metadata()
    return {"throttle_time": 0, "topics": results}


def _assignments(t) -> list[list[int]]:
    if t.num_partitions != -1 or t.replication_factor != -1:
        raise KafkaProtocolError(ErrorCode.invalid_request, "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.")
    indexes = sorted(a.partition_index for a in t.assignments)
    if indexes != list(range(len(indexes))):
        raise KafkaProtocolError(ErrorCode.invalid_replica_assignment, "Partitions should be a consecutive 0-based integer sequence")
    return [list(a.broker_ids) for a in sorted(t.assignments, key=lambda a: a.partition_index)]


def _error(name: str, code: ErrorCode, message: str) -> dict:
    return {"name": name, "error_code": code, "error_message": message, "num_partitions": -1, "replication_factor": -1, "configs": None}
