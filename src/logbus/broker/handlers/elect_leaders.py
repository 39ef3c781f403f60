"""ElectLeaders (43): preferred (0) or unclean (1) leader election, for given partitions or all."""

from logbus.protocol.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 43, 0, 2

PREFERRED = 0


async def handle(ctx, request) -> dict:
    broker = ctx.broker
    election_type = getattr(request, "election_type", PREFERRED)
    wanted = None if request.topic_partitions is None else [(t.topic, p) for t in request.topic_partitions for p in t.partitions]
    results = broker.control.elect_leaders(election_type, wanted)
    broker.refresh_metadata()
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), (error, message) in results.items():
        if wanted is None and error == ErrorCode.election_not_needed:
            continue  # Kafka reports only partitions whose election was attempted when asked for all
        by_topic.setdefault(topic, []).append({"partition_id": partition, "error_code": error, "error_message": message})
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "replica_election_results": [{"topic": t, "partition_result": parts} for t, parts in by_topic.items()],
    }
