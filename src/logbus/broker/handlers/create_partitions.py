"""CreatePartitions (37): grow a topic's partition count."""

from logbus.broker.topics import INTERNAL_TOPICS
from logbus.protocol.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 37, 0, 3


async def handle(ctx, request) -> dict:
    broker = ctx.broker
    results = []
    for t in request.topics:
        results.append({"name": t.name, **_one(broker, t, request.validate_only)})
    return {"throttle_time": 0, "results": results}


def _one(broker, t, validate_only: bool) -> dict:
    topic = broker.topics.get(t.name)
    if topic is None:
        return {"error_code": ErrorCode.unknown_topic_or_partition, "error_message": f"The topic '{t.name}' does not exist."}
    if t.name in INTERNAL_TOPICS:
        # groups are placed by hash modulo the partition count: growing it would lose their offsets
        return {"error_code": ErrorCode.invalid_partitions, "error_message": f"The number of partitions of internal topic {t.name} cannot be changed."}
    current = len(topic.partitions)
    if t.count <= current:
        word = "the same as" if t.count == current else "higher than"
        return {"error_code": ErrorCode.invalid_partitions, "error_message": f"Topic currently has {current} partitions, which is {word} the requested {t.count}."}
    if t.assignments is not None:
        if len(t.assignments) != t.count - current:
            return {"error_code": ErrorCode.invalid_replica_assignment, "error_message": f"Increasing the number of partitions by {t.count - current} but {len(t.assignments)} assignments provided."}
        for a in t.assignments:
            if any(b != broker.config.broker_id for b in a.broker_ids) or len(a.broker_ids) != topic.replication_factor:
                return {"error_code": ErrorCode.invalid_replica_assignment, "error_message": f"Replica assignment {list(a.broker_ids)} names unknown brokers or a wrong replication factor"}
    if not validate_only:
        added = broker.topics.add_partitions(t.name, t.count)
        broker.replicas.add_topic_partitions(topic, added)
    return {"error_code": ErrorCode.none, "error_message": None}
