"""ListOffsets (2): earliest (-2), latest (-1), max timestamp (-3), or the first offset at a timestamp."""

from logbus.protocol.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 2, 1, 7

EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3


async def handle(ctx, request) -> dict:
    replicas = ctx.broker.replicas
    topics = []
    for t in request.topics:
        parts = []
        for rp in t.partitions:
            partition, error = replicas.leader_partition(t.name, rp.partition_index, getattr(rp, "current_leader_epoch", -1))
            if partition is None:
                parts.append({"partition_index": rp.partition_index, "error_code": error, "timestamp": -1, "offset": -1, "leader_epoch": -1})
                continue
            parts.append({"partition_index": rp.partition_index, **_one(partition, rp.timestamp)})
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}


def _one(partition, timestamp: int) -> dict:
    epoch = partition.state.leader_epoch
    plog = partition.log
    if timestamp == EARLIEST:
        return {"error_code": ErrorCode.none, "timestamp": -1, "offset": plog.log_start_offset, "leader_epoch": epoch}
    if timestamp == LATEST:
        return {"error_code": ErrorCode.none, "timestamp": -1, "offset": partition.high_watermark, "leader_epoch": epoch}
    if timestamp == MAX_TIMESTAMP:
        found = plog.max_timestamp()
    elif timestamp < 0:
        return {"error_code": ErrorCode.unsupported_version, "timestamp": -1, "offset": -1, "leader_epoch": -1}
    else:
        found = plog.offset_for_timestamp(timestamp)
    if found is None:
        return {"error_code": ErrorCode.none, "timestamp": -1, "offset": -1, "leader_epoch": epoch}
    if timestamp == MAX_TIMESTAMP:
        ts, offset = found
    else:
        offset, ts = found
    return {"error_code": ErrorCode.none, "timestamp": ts, "offset": offset, "leader_epoch": epoch}
