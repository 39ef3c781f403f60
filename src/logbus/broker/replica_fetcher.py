"""A follower's (or observer's) fetching from one leader broker, Kafka's ReplicaFetcherThread.

Before fetching a partition at a new leader epoch, the follower asks the leader where its own
latest epoch ended (OffsetForLeaderEpoch) and truncates what the leader does not have: records
a former leader accepted that never reached the ISR disappear here, as in Kafka.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from logbus.broker.kafka_client import KafkaConnection
from logbus.protocol.errors import ErrorCode
from logbus.protocol.records import InvalidRecordError, parse_batches

if TYPE_CHECKING:
    from logbus.broker.partition import Partition
    from logbus.broker.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

FETCH_VERSION = 12
EPOCH_VERSION = 4
RETRY_BACKOFF_S = 0.2
RETRY_ERRORS = {ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch, ErrorCode.unknown_topic_or_partition}


class ReplicaFetcher:
    def __init__(self, manager: "ReplicaManager", leader_id: int) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.needs_truncation: set[tuple[str, int]] = set()
        self.paused_until: dict[tuple[str, int], float] = {}
        self._changed = asyncio.Event()
        self._stopped = False
        self._task = asyncio.create_task(self._run())
        cfg = manager.broker.config
        self.max_wait_ms = cfg.replica_fetch_wait_max_ms
        self.max_bytes = cfg.replica_fetch_max_bytes

    def add(self, p: "Partition") -> None:
        key = (p.topic, p.index)
        self.partitions[key] = p
        self.needs_truncation.add(key)
        self.paused_until.pop(key, None)
        self._changed.set()

    def remove(self, key: tuple[str, int]) -> None:
        self.partitions.pop(key, None)
        self.needs_truncation.discard(key)
        self.paused_until.pop(key, None)

    def stop(self) -> None:
        # the flag as well as the cancel: wait_for may swallow a cancellation that races its result
        self._stopped = True
        self._task.cancel()

    async def _run(self) -> None:
        conn: KafkaConnection | None = None
        me = self.manager.broker_id
        while not self._stopped:
            try:
                if not self.partitions:
                    self._changed.clear()
                    await self._changed.wait()
                    continue
                if conn is None:
                    address = self.manager.broker_address(self.leader_id)
                    if address is None:
                        await asyncio.sleep(RETRY_BACKOFF_S)
                        continue
                    conn = await KafkaConnection.open(*address, client_id=f"logbus-replica-{me}")
                if self.needs_truncation:
                    await self._truncate(conn)
                await self._fetch(conn)
            except asyncio.CancelledError:
                break
            except (OSError, ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError, EOFError) as e:
                log.info("fetching from broker %d: %s; retrying", self.leader_id, e or type(e).__name__)
                if conn:
                    conn.close()
                conn = None
                await asyncio.sleep(RETRY_BACKOFF_S)
            except Exception:
                log.exception("replica fetcher for broker %d failed; retrying", self.leader_id)
                if conn:
                    conn.close()
                conn = None
                await asyncio.sleep(RETRY_BACKOFF_S)
        if conn:
            conn.close()

    def _active(self) -> list["Partition"]:
        now = time.monotonic()
        return [p for key, p in self.partitions.items() if self.paused_until.get(key, 0) <= now and key not in self.needs_truncation]

    async def _truncate(self, conn: KafkaConnection) -> None:
        wanted = [self.partitions[k] for k in list(self.needs_truncation) if k in self.partitions]
        by_topic: dict[str, list[dict]] = {}
        for p in wanted:
            by_topic.setdefault(p.topic, []).append(
                {"partition": p.index, "current_leader_epoch": p.leader_epoch, "leader_epoch": p.log.leader_epochs.latest_epoch}
            )
        body = {"replica_id": self.manager.broker_id, "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}
        resp = await conn.request(23, EPOCH_VERSION, body, timeout=10)
        for t in resp.topics:
            for r in t.partitions:
                key = (t.topic, r.partition)
                p = self.partitions.get(key)
                if p is None:
                    continue
                if r.error_code != ErrorCode.none:
                    self.paused_until[key] = time.monotonic() + RETRY_BACKOFF_S
                    continue
                self._truncate_one(p, r.leader_epoch, r.end_offset)
                self.needs_truncation.discard(key)

    def _truncate_one(self, p: "Partition", leader_epoch: int, leader_end: int) -> None:
        """Kafka's rule (KIP-279): truncate to where the largest common epoch ends on both sides."""
        cache = p.log.leader_epochs
        own_end = p.log.log_end_offset
        if leader_epoch < 0 or leader_end < 0:
            target = min(p.high_watermark, own_end)  # the leader knows none of our epochs
        elif leader_epoch == cache.latest_epoch:
            target = min(leader_end, own_end)
        else:
            _, own_epoch_end = cache.end_offset_for(leader_epoch, own_end)
            target = min(leader_end, own_epoch_end if own_epoch_end >= 0 else own_end)
        if target < own_end:
            log.warning("%s: truncating %d records (%d..%d) the leader %d does not have (leader epoch %d ends at %d)",
                        p, own_end - target, target, own_end - 1, self.leader_id, leader_epoch, leader_end)
            p.log.truncate_to(target)
        p.high_watermark = min(p.high_watermark, p.log.log_end_offset)

    async def _fetch(self, conn: KafkaConnection) -> None:
        active = self._active()
        if not active:
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), RETRY_BACKOFF_S)
            except asyncio.TimeoutError:
                pass
            return
        by_topic: dict[str, list[dict]] = {}
        for p in active:
            by_topic.setdefault(p.topic, []).append(
                {"partition": p.index, "current_leader_epoch": p.leader_epoch, "fetch_offset": p.log.log_end_offset,
                 "last_fetched_epoch": -1, "log_start_offset": p.log.log_start_offset, "partition_max_bytes": self.max_bytes}
            )
        body = {
            "replica_id": self.manager.broker_id, "max_wait": self.max_wait_ms, "min_bytes": 1, "max_bytes": self.max_bytes * 4,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()], "forgotten_topics_data": [], "rack_id": "",
        }
        resp = await conn.request(1, FETCH_VERSION, body, timeout=self.max_wait_ms / 1000 + 10)
        for t in resp.responses:
            for r in t.partitions:
                key = (t.topic, r.partition_index)
                p = self.partitions.get(key)
                if p is None or key in self.needs_truncation:
                    continue
                self._apply_fetched(key, p, r)

    def _apply_fetched(self, key, p: "Partition", r) -> None:
        if r.error_code == ErrorCode.none:
            if r.records:
                try:
                    batches = parse_batches(r.records)
                except InvalidRecordError as e:
                    log.error("%s: corrupt data from leader %d: %s", p, self.leader_id, e)
                    self.paused_until[key] = time.monotonic() + RETRY_BACKOFF_S
                    return
                if batches[0].base_offset != p.log.log_end_offset:
                    self.needs_truncation.add(key)  # out of step with the leader: find the common point again
                    return
                p.log.append_as_follower(r.records, batches)
            if r.log_start_offset > p.log.log_start_offset and r.log_start_offset <= p.log.log_end_offset:
                p.log.maybe_increment_log_start_offset(r.log_start_offset)
            p.high_watermark = min(r.high_watermark, p.log.log_end_offset)
            self.manager._wake(key)  # consumers fetching from this follower (KIP-392)
        elif r.error_code == ErrorCode.offset_out_of_range:
            if p.log.log_end_offset < r.log_start_offset:
                log.warning("%s: behind the leader's log start %d: starting over there", p, r.log_start_offset)
                p.log.reset_to(r.log_start_offset)
            else:
                self.needs_truncation.add(key)
        elif r.error_code in RETRY_ERRORS:
            self.paused_until[key] = time.monotonic() + RETRY_BACKOFF_S
        else:
            log.warning("%s: fetch from leader %d failed with %s", p, self.leader_id, r.error_code.name)
            self.paused_until[key] = time.monotonic() + RETRY_BACKOFF_S
