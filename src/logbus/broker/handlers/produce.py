"""Produce (0): validate each partition's batches (header and CRC only), append as leader, and for
acks=all answer when the ISR has the records (or with the error Kafka gives)."""

import asyncio
import logging

from logbus.broker.topics import INTERNAL_TOPICS
from logbus.protocol.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 0, 3, 9

log = logging.getLogger(__name__)


async def handle(ctx, request) -> dict | None:
    replicas = ctx.broker.replicas
    acks = request.acks
    responses = []
    waiting: list[tuple[dict, asyncio.Future]] = []
    for topic in request.topic_data:
        partitions = []
        for pd in topic.partition_data:
            if topic.name in INTERNAL_TOPICS:
                partitions.append({"index": pd.index, "error_code": ErrorCode.invalid_topic_exception, "error_message": f"Cannot append to internal topic {topic.name}"})
                continue
            if acks not in (0, 1, -1):
                partitions.append({"index": pd.index, "error_code": ErrorCode.invalid_required_acks, "error_message": f"acks={acks} is not 0, 1 or -1"})
                continue
            outcome = replicas.append(topic.name, pd.index, pd.records, acks)
            result = {
                "index": pd.index,
                "error_code": outcome.error,
                "error_message": outcome.message,
                "base_offset": outcome.base_offset,
                "log_append_time": outcome.log_append_time,
                "log_start_offset": outcome.log_start_offset,
            }
            partitions.append(result)
            if outcome.replicated is not None:
                waiting.append((result, outcome.replicated))
        responses.append({"name": topic.name, "partition_responses": partitions})
    if acks == 0:
        return None
    if waiting:
        await asyncio.wait([f for _, f in waiting], timeout=request.timeout.total_seconds())
        for result, fut in waiting:
            error = fut.result() if fut.done() else ErrorCode.request_timed_out
            if not fut.done():
                fut.cancel()
            if error != ErrorCode.none:
                result["error_code"] = error
                result["error_message"] = {
                    ErrorCode.request_timed_out: "the in-sync replicas did not acknowledge the records in time",
                    ErrorCode.not_enough_replicas_after_append: "the records were written, but the ISR shrank below min.insync.replicas",
                }.get(error, "leadership moved before the records were replicated")
    return {"responses": responses, "throttle_time": 0}
