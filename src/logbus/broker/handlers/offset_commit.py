"""OffsetCommit (8): durable once answered (written to __consumer_offsets first)."""

import time

from logbus.broker.group.model import CommittedOffset

API_KEY, MIN_VERSION, MAX_VERSION = 8, 2, 9


async def handle(ctx, request) -> dict:
    generation = getattr(request, "generation_id_or_member_epoch", None)
    if generation is None:
        generation = request.generation_id
    now = int(time.time() * 1000)
    offsets = {
        (t.name, p.partition_index): CommittedOffset(p.committed_offset, getattr(p, "committed_leader_epoch", -1), p.committed_metadata, now)
        for t in request.topics
        for p in t.partitions
    }
    results = await ctx.broker.groups.commit(request.group_id, generation, request.member_id, getattr(request, "group_instance_id", None), offsets)
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), error in results.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": error})
    return {"throttle_time": 0, "topics": [{"name": t, "partitions": parts} for t, parts in by_topic.items()]}
