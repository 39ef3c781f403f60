"""OffsetDelete (47): drop committed offsets of partitions the group does not consume."""

API_KEY, MIN_VERSION, MAX_VERSION = 47, 0, 0


async def handle(ctx, request) -> dict:
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    error, results = await ctx.broker.groups.delete_offsets(request.group_id, wanted)
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), code in results.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
    return {"error_code": error, "throttle_time": 0, "topics": [{"name": t, "partitions": parts} for t, parts in by_topic.items()]}
