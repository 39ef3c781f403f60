"""OffsetFetch (9): one group (v1-v7) or several (v8+); -1 where nothing is committed."""

from logbus.protocol.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 9, 1, 9


def _group_topics(coordinator, group_id: str, topics) -> list[dict]:
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    found = coordinator.fetch_offsets(group_id, wanted)
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), committed in sorted(found.items()):
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": partition,
                "committed_offset": committed.offset if committed else -1,
                "committed_leader_epoch": committed.leader_epoch if committed else -1,
                "metadata": committed.metadata if committed else "",
                "error_code": ErrorCode.none,
            }
        )
    return [{"name": t, "partitions": parts} for t, parts in by_topic.items()]


async def handle(ctx, request) -> dict:
    coordinator = ctx.broker.groups
    if ctx.api_version >= 8:
        groups = [_one_group(coordinator, g.group_id, g.topics) for g in request.groups]
        return {"throttle_time": 0, "groups": groups}
    return {"throttle_time": 0, **_one_group(coordinator, request.group_id, request.topics)}


def _one_group(coordinator, group_id: str, topics) -> dict:
    if not coordinator.owns(group_id):
        return {"group_id": group_id, "topics": [], "error_code": ErrorCode.not_coordinator}
    return {"group_id": group_id, "topics": _group_topics(coordinator, group_id, topics), "error_code": ErrorCode.none}
