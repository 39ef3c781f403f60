"""Fetch (1): long poll with max_wait/min_bytes, request and per-partition byte limits.

The bytes returned are the stored batches, untouched. As in Kafka (KIP-74), the first partition
with data gets at least one whole batch even if it is larger than the limits, so a consumer can
never get stuck behind a large batch.
"""

import time

from logbus.protocol.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 1, 4, 12


async def handle(ctx, request) -> dict:
    replicas = ctx.broker.replicas
    wanted = [(t.topic, p) for t in request.topics for p in t.partitions]
    deadline = time.monotonic() + request.max_wait.total_seconds()
    while True:
        responses, total = _read_all(replicas, request, wanted, ctx.api_version >= 11)
        remaining = deadline - time.monotonic()
        if total >= request.min_bytes or remaining <= 0 or not wanted:
            break
        await replicas.wait_for_append([(topic, p.partition) for topic, p in wanted], remaining)
    return {"throttle_time": 0, "error_code": ErrorCode.none, "session_id": 0, "responses": responses}


def _read_all(replicas, request, wanted, from_follower: bool) -> tuple[list[dict], int]:
    rack = getattr(request, "rack_id", None) or None
    budget = request.max_bytes
    total = 0
    by_topic: dict[str, list[dict]] = {}
    for topic, p in wanted:
        limit = min(p.partition_max_bytes, budget)
        outcome = replicas.read(topic, p.partition, p.fetch_offset, max(limit, 0), min_one_batch=total == 0,
                                replica_id=request.replica_id, current_leader_epoch=getattr(p, "current_leader_epoch", -1),
                                client_rack=rack, from_follower=from_follower)
        records = outcome.records or b""
        total += len(records)
        budget -= len(records)
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": p.partition,
                "error_code": outcome.error,
                "high_watermark": outcome.high_watermark,
                "last_stable_offset": outcome.high_watermark,
                "log_start_offset": outcome.log_start_offset,
                "aborted_transactions": [] if request.isolation_level == 1 else None,
                "preferred_read_replica": outcome.preferred_read_replica,
                "records": records,
            }
        )
    return [{"topic": t, "partitions": parts} for t, parts in by_topic.items()], total
