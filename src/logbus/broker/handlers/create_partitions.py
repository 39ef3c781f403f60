"""CreatePartitions (37): grow a topic's partition count."""

from logbus.broker.topics import INTERNAL_TOPICS
from logbus.protocol.errors import ErrorCode, KafkaProtocolError

API_KEY, MIN_VERSION, MAX_VERSION = 37, 0, 3


async def handle(ctx, request) -> dict:
    broker = ctx.broker
    results = []
    for t in request.topics:
        try:
            if t.name in INTERNAL_TOPICS:
                # groups are placed by hash modulo the partition count: growing it would lose their offsets
                raise KafkaProtocolError(ErrorCode.invalid_partitions, f"The number of partitions of internal topic {t.name} cannot be changed.")
            assignments = None if t.assignments is None else [list(a.broker_ids) for a in t.assignments]
            broker.control.create_partitions(t.name, t.count, assignments, request.validate_only)
        except KafkaProtocolError as e:
            results.append({"name": t.name, "error_code": e.code, "error_message": e.message})
            continue
        results.append({"name": t.name, "error_code": ErrorCode.none, "error_message": None})
    broker.refresh_metadata()
    return {"throttle_time": 0, "results": results}
