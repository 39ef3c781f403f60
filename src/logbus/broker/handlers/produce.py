"""Produce (0): validate each partition's batches (header and CRC only) and append them."""

import logging

from logbus.broker.topics import INTERNAL_TOPICS
from logbus.protocol.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 0, 3, 9

log = logging.getLogger(__name__)


async def handle(ctx, request) -> dict | None:
    replicas = ctx.broker.replicas
    acks = request.acks
    responses = []
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
            partitions.append(
                {
                    "index": pd.index,
                    "error_code": outcome.error,
                    "error_message": outcome.message,
                    "base_offset": outcome.base_offset,
                    "log_append_time": outcome.log_append_time,
                    "log_start_offset": outcome.log_start_offset,
                }
            )
        responses.append({"name": topic.name, "partition_responses": partitions})
    if acks == 0:
        return None
    return {"responses": responses, "throttle_time": 0}
