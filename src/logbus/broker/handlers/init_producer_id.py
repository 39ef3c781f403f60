"""InitProducerId (22): producer ids for the idempotent producer (KIP-98), epoch bumps (KIP-360).

- `transactional_id` null, no producer id: a fresh id from the durable allocator, epoch 0.
- `transactional_id` null with the producer id and epoch it holds (v3+): the same id with the
  epoch bumped, when this broker issued that id; a new id (epoch 0) when the epoch is exhausted
  or the id is not one this broker handed out (Apache Kafka always answers an idempotent
  producer with a new id; keeping the id is what KIP-360 allows).
- A transactional id: transactions are not served. The answer is
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53), which librdkafka and kafka-python treat as fatal,
  so `init_transactions()` fails at once instead of retrying until its timeout (retriable codes
  such as COORDINATOR_NOT_AVAILABLE would retry forever). The response has no message field;
  the broker logs why.
"""

import logging

from logbus.protocol.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 22, 0, 5

#: Kafka's rule: an epoch at Short.MaxValue - 1 or above is exhausted (a bump would overflow)
MAX_USABLE_EPOCH = 32767 - 1

log = logging.getLogger(__name__)


async def handle(ctx, request) -> dict:
    if request.transactional_id is not None:
        log.warning(
            "InitProducerId from %s for transactional id %r refused: transactions are not supported by this broker",
            ctx.peer, request.transactional_id,
        )  # fmt: skip
        return {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed, "producer_id": -1, "producer_epoch": -1}
    allocator = ctx.broker.producer_ids
    pid = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    try:
        if pid >= 0 and epoch >= 0 and allocator.issued(pid) and epoch < MAX_USABLE_EPOCH:
            return {"throttle_time": 0, "error_code": ErrorCode.none, "producer_id": pid, "producer_epoch": epoch + 1}
        new_pid = allocator.allocate()
    except Exception as e:  # the metadata store is unreachable or refused
        log.error("cannot reserve producer ids: %s", e)
        return {"throttle_time": 0, "error_code": ErrorCode.kafka_storage_error, "producer_id": -1, "producer_epoch": -1}
    if pid >= 0:
        log.info("producer %d epoch %d given the new producer id %d", pid, epoch, new_pid)
    return {"throttle_time": 0, "error_code": ErrorCode.none, "producer_id": new_pid, "producer_epoch": 0}
