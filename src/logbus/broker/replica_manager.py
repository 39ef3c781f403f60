"""The partitions this broker hosts: appends, reads, high watermarks and waiting fetches.

On a single broker the ISR is the broker itself, so the high watermark is the log end offset.
The replication issue replaces `high_watermark` and acks=-1 waiting with the ISR's view.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from logbus.broker.topics import PartitionState, TopicRegistry, TopicState
from logbus.protocol.errors import ErrorCode
from logbus.protocol.records import InvalidRecordError, parse_batches
from logbus.storage.config import LogConfig
from logbus.storage.log import OffsetOutOfRangeError, PartitionLog
from logbus.storage.log_manager import LogManager

log = logging.getLogger(__name__)


@dataclass
class Partition:
    topic: str
    index: int
    state: PartitionState
    log: PartitionLog

    @property
    def high_watermark(self) -> int:
        return self.log.log_end_offset


@dataclass
class AppendOutcome:
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1


@dataclass
class ReadOutcome:
    error: ErrorCode = ErrorCode.none
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes | None = None


class ReplicaManager:
    def __init__(self, registry: TopicRegistry, logs: LogManager, topic_defaults: LogConfig) -> None:
        self.registry = registry
        self.logs = logs
        self.topic_defaults = topic_defaults
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._waiters: dict[tuple[str, int], set[asyncio.Future]] = {}

    # --- lifecycle -------------------------------------------------------------------------

    def open_all(self) -> None:
        self.logs.load_all({name: self.log_config(t) for name, t in self.registry.topics.items()})
        for topic in self.registry.topics.values():
            self._open_partitions(topic, topic.partitions)

    def log_config(self, topic: TopicState) -> LogConfig:
        return LogConfig.from_overrides(self.topic_defaults, topic.configs)

    def add_topic_partitions(self, topic: TopicState, states: list[PartitionState]) -> None:
        self._open_partitions(topic, states)

    def _open_partitions(self, topic: TopicState, states: list[PartitionState]) -> None:
        config = self.log_config(topic)
        for state in states:
            plog = self.logs.get(topic.name, state.partition) or self.logs.create(topic.name, state.partition, config)
            self.partitions[(topic.name, state.partition)] = Partition(topic.name, state.partition, state, plog)

    def delete_topic(self, name: str) -> None:
        for key in [k for k in self.partitions if k[0] == name]:
            del self.partitions[key]
            self._wake(key)
        self.logs.delete_topic(name)

    def update_topic_config(self, topic: TopicState) -> None:
        self.logs.update_topic_config(topic.name, self.log_config(topic))

    def get(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    # --- produce ---------------------------------------------------------------------------

    def append(self, topic: str, partition: int, records: bytes | None, acks: int) -> AppendOutcome:
        p = self.partitions.get((topic, partition))
        if p is None:
            return AppendOutcome(ErrorCode.unknown_topic_or_partition, f"This server does not host this topic-partition: {topic}-{partition}")
        config = p.log.config
        if acks == -1 and len(p.state.isr) < config.min_insync_replicas:
            return AppendOutcome(
                ErrorCode.not_enough_replicas,
                f"The size of the current ISR {len(p.state.isr)} is insufficient to satisfy the min.isr requirement of "
                f"{config.min_insync_replicas} for partition {topic}-{partition}",
            )
        if not records:
            return AppendOutcome(ErrorCode.corrupt_message, "produce request carries no record batch")
        try:
            batches = parse_batches(records, max_batch_bytes=config.max_message_bytes)
            result = p.log.append(records, batches)
        except InvalidRecordError as e:  # also the idempotent producer's errors (45, 47, 59), Kafka's messages
            log.warning("rejected produce to %s-%d: %s", topic, partition, e)
            return AppendOutcome(ErrorCode(e.error_code), str(e))
        except OSError as e:
            log.error("storage error appending to %s-%d: %s", topic, partition, e)
            return AppendOutcome(ErrorCode.kafka_storage_error, f"storage error: {e}")
        if result.duplicate:  # a retry of batches already in the log: the original's base offset
            log.debug("duplicate produce to %s-%d answered with base offset %d", topic, partition, result.base_offset)
        else:
            self._wake((topic, partition))
        return AppendOutcome(
            base_offset=result.base_offset, log_append_time=result.log_append_time, log_start_offset=p.log.log_start_offset
        )

    # --- fetch -----------------------------------------------------------------------------

    def read(self, topic: str, partition: int, offset: int, max_bytes: int, min_one_batch: bool) -> ReadOutcome:
        p = self.partitions.get((topic, partition))
        if p is None:
            return ReadOutcome(ErrorCode.unknown_topic_or_partition)
        hw = p.high_watermark
        start = p.log.log_start_offset
        try:
            data = p.log.read(offset, max_bytes, max_offset=hw, min_one_batch=min_one_batch)
        except OffsetOutOfRangeError:
            return ReadOutcome(ErrorCode.offset_out_of_range, hw, start)
        except OSError as e:
            log.error("storage error reading %s-%d: %s", topic, partition, e)
            return ReadOutcome(ErrorCode.kafka_storage_error, hw, start)
        return ReadOutcome(ErrorCode.none, hw, start, data)

    async def wait_for_append(self, keys: list[tuple[str, int]], timeout: float) -> None:
        """Return when any of the partitions gets new data, or after `timeout` seconds."""
        if timeout <= 0:
            return
        fut = asyncio.get_running_loop().create_future()
        for key in keys:
            self._waiters.setdefault(key, set()).add(fut)
        try:
            await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            pass
        finally:
            for key in keys:
                waiting = self._waiters.get(key)
                if waiting is not None:
                    waiting.discard(fut)
                    if not waiting:
                        del self._waiters[key]

    def _wake(self, key: tuple[str, int]) -> None:
        for fut in self._waiters.pop(key, ()):
            if not fut.done():
                fut.set_result(None)
