"""The partitions this broker hosts, as leader or follower, kept in line with the metadata store.

`apply(image)` makes each hosted partition leader or follower as the image says, starts and
stops replica fetchers, and deletes the logs of partitions this broker no longer hosts. The
leader side serves produce (acks 0/1/all), fetch for consumers (up to the high watermark) and
for followers (up to the log end, recording their progress), and keeps the ISR.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from logbus.broker.partition import Partition
from logbus.broker.topics import MetadataImage, PartitionState, TopicState
from logbus.protocol.errors import ErrorCode
from logbus.protocol.records import InvalidRecordError, parse_batches
from logbus.storage.log import OffsetOutOfRangeError
from logbus.storage.log_manager import LogManager

if TYPE_CHECKING:
    from logbus.broker.replica_fetcher import ReplicaFetcher

log = logging.getLogger(__name__)


@dataclass
class AppendOutcome:
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    replicated: asyncio.Future | None = None  # acks=all: resolves to an ErrorCode


@dataclass
class ReadOutcome:
    error: ErrorCode = ErrorCode.none
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes | None = None
    preferred_read_replica: int = -1


class ReplicaManager:
    def __init__(self, broker) -> None:
        self.broker = broker
        self.broker_id: int = broker.config.broker_id
        self.control = broker.control
        self.logs: LogManager = broker.logs
        self.image: MetadataImage | None = None
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.fetchers: dict[int, "ReplicaFetcher"] = {}
        self._waiters: dict[tuple[str, int], set[asyncio.Future]] = {}

    # --- following the metadata ------------------------------------------------------------

    def apply(self, image: MetadataImage) -> None:
        from logbus.broker.replica_fetcher import ReplicaFetcher

        first = self.image is None
        self.image = image
        me = self.broker_id
        wanted: dict[tuple[str, int], tuple[TopicState, PartitionState]] = {
            (t.name, st.partition): (t, st) for t in image.topics.values() for st in t.partitions if me in st.replicas
        }
        for key in [k for k in self.partitions if k not in wanted]:
            self._drop(key, delete_log=key[0] not in image.topics)
        if first:
            for key in [k for k in self.logs.all_logs() if k[0] not in image.topics]:
                log.warning("deleting the log of %s-%d: its topic is not in the cluster metadata", *key)
                self.logs.delete_topic(key[0])
        configs_seen: set[str] = set()
        for key, (topic, state) in wanted.items():
            p = self.partitions.get(key)
            config = self.control.log_config(topic.configs)
            if p is None:
                plog = self.logs.get(*key) or self.logs.create(key[0], key[1], config)
                if plog.config != config:
                    plog.update_config(config)
                p = self.partitions[key] = Partition(me, key[0], state.copy(), plog)
                p.state.leader_epoch = -1  # not yet acting in any epoch
            elif topic.name not in configs_seen and p.log.config != config:
                self.logs.update_topic_config(topic.name, config)
                configs_seen.add(topic.name)
            if state.partition_epoch < p.state.partition_epoch:
                continue  # an older image than what this broker already acted on
            if state.leader == me:
                self._stop_fetching(key)
                p.make_leader(state.copy())
                self._wake(key)
            else:
                new_epoch = state.leader_epoch != p.leader_epoch or p.is_leader
                if new_epoch:
                    p.make_follower(state.copy())
                    self._stop_fetching(key)
                    if state.leader >= 0:
                        fetcher = self.fetchers.get(state.leader)
                        if fetcher is None:
                            fetcher = self.fetchers[state.leader] = ReplicaFetcher(self, state.leader)
                        fetcher.add(p)
                else:
                    p.update_state(state.copy())
        for leader_id in [i for i, f in self.fetchers.items() if not f.partitions]:
            self.fetchers.pop(leader_id).stop()

    def _stop_fetching(self, key: tuple[str, int]) -> None:
        for fetcher in self.fetchers.values():
            fetcher.remove(key)

    def _drop(self, key: tuple[str, int], delete_log: bool) -> None:
        p = self.partitions.pop(key)
        p.make_follower(p.state)
        self._stop_fetching(key)
        self._wake(key)
        if delete_log and not any(k[0] == key[0] for k in self.partitions):
            self.logs.delete_topic(key[0])

    def broker_address(self, broker_id: int) -> tuple[str, int] | None:
        info = self.image.brokers.get(broker_id) if self.image else None
        return (info.host, info.port) if info else None

    def get(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def _not_here(self, topic: str, partition: int) -> ErrorCode:
        known = self.image is not None and self.image.partition(topic, partition) is not None
        return ErrorCode.not_leader_or_follower if known else ErrorCode.unknown_topic_or_partition

    def leader_partition(self, topic: str, partition: int, current_leader_epoch: int = -1) -> tuple[Partition | None, ErrorCode]:
        p = self.partitions.get((topic, partition))
        if p is None:
            return None, self._not_here(topic, partition)
        if current_leader_epoch >= 0:
            if current_leader_epoch < p.leader_epoch:
                return None, ErrorCode.fenced_leader_epoch
            if current_leader_epoch > p.leader_epoch:
                return None, ErrorCode.unknown_leader_epoch
        if not p.is_leader:
            return None, ErrorCode.not_leader_or_follower
        return p, ErrorCode.none

    # --- produce ---------------------------------------------------------------------------

    def append(self, topic: str, partition: int, records: bytes | None, acks: int) -> AppendOutcome:
        p, error = self.leader_partition(topic, partition)
        if p is None:
            return AppendOutcome(error, f"This broker is not the leader of {topic}-{partition}" if error == ErrorCode.not_leader_or_follower else f"Unknown partition {topic}-{partition}")
        config = p.log.config
        if acks == -1 and len(p.state.isr) < config.min_insync_replicas:
            return AppendOutcome(
                ErrorCode.not_enough_replicas,
                f"The size of the current ISR {p.state.isr} is insufficient to satisfy the min.isr requirement of "
                f"{config.min_insync_replicas} for partition {topic}-{partition}",
            )
        if not records:
            return AppendOutcome(ErrorCode.corrupt_message, "produce request carries no record batch")
        try:
            batches = parse_batches(records, max_batch_bytes=config.max_message_bytes)
            result = p.log.append(records, batches, leader_epoch=p.leader_epoch)
        except InvalidRecordError as e:
            log.warning("rejected produce to %s-%d: %s", topic, partition, e)
            return AppendOutcome(ErrorCode(e.error_code), str(e))
        except OSError as e:
            log.error("storage error appending to %s-%d: %s", topic, partition, e)
            return AppendOutcome(ErrorCode.kafka_storage_error, f"storage error: {e}")
        if not result.duplicate:
            self._wake((topic, partition))  # followers and consumers waiting in Fetch
        if p.maybe_advance_high_watermark():
            self._wake((topic, partition))
        return AppendOutcome(
            base_offset=result.base_offset, log_append_time=result.log_append_time, log_start_offset=p.log.log_start_offset,
            replicated=p.wait_for_replication(result.last_offset + 1) if acks == -1 else None,
        )

    # --- fetch -----------------------------------------------------------------------------

    def read(self, topic: str, partition: int, offset: int, max_bytes: int, min_one_batch: bool,
             replica_id: int = -1, current_leader_epoch: int = -1, client_rack: str | None = None,
             from_follower: bool = False) -> ReadOutcome:
        """A fetch by a follower (replica_id >= 0) or a consumer. Consumers read up to the high
        watermark; with `from_follower` (Fetch v11+, KIP-392) a follower or observer serves them
        too, and a leader sends a consumer with a `client_rack` to an in-sync replica in its rack."""
        follower = replica_id >= 0
        p = self.partitions.get((topic, partition))
        if p is not None and not p.is_leader and not follower and from_follower:
            if current_leader_epoch >= 0 and current_leader_epoch != p.leader_epoch:
                return ReadOutcome(ErrorCode.fenced_leader_epoch if current_leader_epoch < p.leader_epoch else ErrorCode.unknown_leader_epoch)
        else:
            p, error = self.leader_partition(topic, partition, current_leader_epoch)
            if p is None:
                return ReadOutcome(error)
        if follower:
            p.record_follower_fetch(replica_id, offset)
            self._maybe_expand_isr(p, replica_id)
            if p.maybe_advance_high_watermark():
                self._wake((topic, partition))
        hw = p.high_watermark
        start = p.log.log_start_offset
        if p.is_leader and client_rack and from_follower and self.broker.config.follower_fetching:
            preferred = self._replica_in_rack(p, client_rack)
            if preferred is not None and preferred != self.broker_id:
                return ReadOutcome(ErrorCode.none, hw, start, None, preferred)
        try:
            data = p.log.read(offset, max_bytes, max_offset=None if follower else hw, min_one_batch=min_one_batch)
        except OffsetOutOfRangeError:
            return ReadOutcome(ErrorCode.offset_out_of_range, hw, start)
        except OSError as e:
            log.error("storage error reading %s-%d: %s", topic, partition, e)
            return ReadOutcome(ErrorCode.kafka_storage_error, hw, start)
        return ReadOutcome(ErrorCode.none, hw, start, data)

    def _replica_in_rack(self, p: Partition, rack: str) -> int | None:
        """Kafka's RackAwareReplicaSelector: the leader if it is in the rack, else the most caught-up
        live replica there that is in the ISR or (an observer) has reached the high watermark."""
        brokers = self.image.brokers if self.image else {}
        if brokers.get(self.broker_id) and brokers[self.broker_id].rack == rack:
            return self.broker_id
        candidates = [
            (progress.log_end_offset, r)
            for r, progress in p.replicas.items()
            if r in brokers and brokers[r].rack == rack
            and (r in p.state.isr or progress.log_end_offset >= p.high_watermark)
        ]
        return max(candidates)[1] if candidates else None

    async def wait_for_append(self, keys: list[tuple[str, int]], timeout: float) -> None:
        """Return when any of the partitions gets new data or a new high watermark, or after `timeout` s."""
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

    def end_offset_for_epoch(self, topic: str, partition: int, current_leader_epoch: int, epoch: int) -> tuple[ErrorCode, int, int]:
        p, error = self.leader_partition(topic, partition, current_leader_epoch)
        if p is None:
            return error, -1, -1
        found_epoch, end = p.log.leader_epochs.end_offset_for(epoch, p.log.log_end_offset)
        return ErrorCode.none, found_epoch, end

    # --- ISR -------------------------------------------------------------------------------

    def _maybe_expand_isr(self, p: Partition, replica_id: int) -> None:
        # only the follower that is fetching now may join (Kafka's maybeExpandIsr(replica)): a dead
        # follower's last fetch position must not bring it back after the controller removed it
        joining = [r for r in p.isr_candidates_to_add() if r == replica_id]
        if joining:
            self._change_isr(p, p.state.isr + joining, f"{joining} caught up")

    def shrink_lagging_isrs(self, lag_max_ms: int) -> None:
        for p in list(self.partitions.values()):
            if not p.is_leader:
                continue
            lagging = p.isr_members_lagging(lag_max_ms)
            if lagging:
                self._change_isr(p, [r for r in p.state.isr if r not in lagging], f"{lagging} fell behind for over {lag_max_ms} ms")

    def _change_isr(self, p: Partition, isr: list[int], reason: str) -> None:
        new = p.state.copy(isr=isr)
        expected = p.state.partition_epoch
        if self.control.alter_partition(p.topic, new, expected):
            log.info("%s: ISR %s -> %s (%s)", p, p.state.isr, isr, reason)
            p.update_state(new)
            self._wake((p.topic, p.index))
        else:
            log.info("%s: ISR change to %s lost a race; the metadata will tell", p, isr)

    def stop(self) -> None:
        for fetcher in self.fetchers.values():
            fetcher.stop()
        self.fetchers.clear()
        for p in self.partitions.values():
            p.fail_waiting(ErrorCode.not_leader_or_follower)
