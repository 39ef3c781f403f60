"""CreateTopics (19)."""

import uuid
from collections import Counter

from logbus.broker.handlers.describe_configs import topic_config_entries
from logbus.broker.handlers.topic_admin import check_topic, create_topic
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
            num_partitions, replication_factor = t.num_partitions, t.replication_factor
            if t.assignments:
                num_partitions, replication_factor = _check_assignments(broker, t)
            if request.validate_only:
                num_partitions, replication_factor = check_topic(broker, t.name, num_partitions, replication_factor, configs)
                topic = None
            else:
                topic = create_topic(broker, t.name, num_partitions, replication_factor, configs)
        except KafkaProtocolError as e:
            results.append(_error(t.name, e.code, e.message))
            continue
        results.append(
            {
                "name": t.name,
                "topic_id": uuid.UUID(topic.topic_id) if topic else uuid.UUID(int=0),
                "error_code": ErrorCode.none,
                "error_message": None,
                "num_partitions": num_partitions,
                "replication_factor": replication_factor,
                "configs": [
                    {k: e[k] for k in ("name", "value", "read_only", "config_source", "is_sensitive")}
                    for e in topic_config_entries(broker, configs)
                ],
            }
        )
    return {"throttle_time": 0, "topics": results}


def _check_assignments(broker, t) -> tuple[int, int]:
    if t.num_partitions != -1 or t.replication_factor != -1:
        raise KafkaProtocolError(ErrorCode.invalid_request, "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.")
    indexes = sorted(a.partition_index for a in t.assignments)
    if indexes != list(range(len(indexes))):
        raise KafkaProtocolError(ErrorCode.invalid_replica_assignment, "Partitions should be a consecutive 0-based integer sequence")
    factors = {len(a.broker_ids) for a in t.assignments}
    if len(factors) != 1:
        raise KafkaProtocolError(ErrorCode.invalid_replica_assignment, "All partitions should have the same number of replicas")
    for a in t.assignments:
        unknown = [b for b in a.broker_ids if b != broker.config.broker_id]
        if unknown or len(set(a.broker_ids)) != len(a.broker_ids):
            raise KafkaProtocolError(ErrorCode.invalid_replica_assignment, f"Replica assignment {list(a.broker_ids)} names unknown or repeated brokers")
    return len(indexes), factors.pop()


def _error(name: str, code: ErrorCode, message: str) -> dict:
    return {"name": name, "error_code": code, "error_message": message, "num_partitions": -1, "replication_factor": -1, "configs": None}
