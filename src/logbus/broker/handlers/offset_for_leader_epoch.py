"""OffsetForLeaderEpoch (23): where a leader epoch ended in this leader's log.

Followers use it to truncate what never reached the ISR; librdkafka consumers use it (v2+) to
detect log truncation after a leader change.
"""

API_KEY, MIN_VERSION, MAX_VERSION = 23, 2, 4


async def handle(ctx, request) -> dict:
    replicas = ctx.broker.replicas
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            error, epoch, end = replicas.end_offset_for_epoch(t.topic, p.partition, p.current_leader_epoch, p.leader_epoch)
            parts.append({"error_code": error, "partition": p.partition, "leader_epoch": epoch, "end_offset": end})
        topics.append({"topic": t.topic, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}
