"""One partition hosted by this broker, as leader or follower (Kafka's Partition).

The leader tracks every follower's log end offset from its fetches, keeps the ISR
(`replica.lag.time.max.ms`), and moves the high watermark to the smallest log end offset of the
ISR. Producers with acks=all wait until the high watermark passes their records. Observers
replicate like followers but never join the ISR, so acks=all never waits for them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from logbus.broker.topics import PartitionState
from logbus.protocol.errors import ErrorCode
from logbus.storage.log import PartitionLog

log = logging.getLogger(__name__)


def now_ms() -> int:
    return int(time.monotonic() * 1000)


@dataclass
class ReplicaProgress:
    """What the leader knows of a follower or observer, from its fetches."""

    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    leader_end_at_last_fetch: int = -1


class Partition:
    def __init__(self, broker_id: int, topic: str, state: PartitionState, plog: PartitionLog) -> None:
        self.broker_id = broker_id
        self.topic = topic
        self.index = state.partition
        self.state = state
        self.log = plog
        self.is_leader = False
        self.high_watermark = plog.log_start_offset
        self.replicas: dict[int, ReplicaProgress] = {}
        self._acks_waiting: list[tuple[int, asyncio.Future]] = []

    def __repr__(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    # --- role changes ------------------------------------------------------------------

    def make_leader(self, state: PartitionState) -> None:
        became = not self.is_leader or state.leader_epoch != self.state.leader_epoch
        if not became:
            # Still the leader, in the same epoch: the ISR may have changed (the controller fences a broker whose
            # session ended). acks=all requests waiting for a removed follower complete now, not at their timeout.
            self.update_state(state)
            return
        self.state = state
        self.is_leader = True
        self.log.leader_epochs.assign(state.leader_epoch, self.log.log_end_offset)
        start = now_ms()
        self.replicas = {r: ReplicaProgress(last_caught_up_ms=start) for r in state.replicas if r != self.broker_id}
        self.high_watermark = min(max(self.high_watermark, self.log.log_start_offset), self.log.log_end_offset)
        log.info("%s: leader at epoch %d, ISR %s, log end %d", self, state.leader_epoch, state.isr, self.log.log_end_offset)
        self.maybe_advance_high_watermark()

    def make_follower(self, state: PartitionState) -> None:
        was_leader = self.is_leader
        self.state = state
        self.is_leader = False
        self.replicas = {}
        if was_leader:
            log.info("%s: follower of %d at epoch %d", self, state.leader, state.leader_epoch)
        self.fail_waiting(ErrorCode.not_leader_or_follower)

    def update_state(self, state: PartitionState) -> None:
        """Same role, new ISR or epoch from the metadata store."""
        self.state = state
        if self.is_leader:
            for r in state.replicas:
                if r != self.broker_id and r not in self.replicas:
                    self.replicas[r] = ReplicaProgress(last_caught_up_ms=now_ms())
            self.maybe_advance_high_watermark()

    # --- the leader's bookkeeping --------------------------------------------------------

    def record_follower_fetch(self, replica_id: int, fetch_offset: int) -> None:
        """Kafka's rule: a follower is caught up at the time it asks for the leader's log end
        (or for the log end the leader had at its previous fetch)."""
        progress = self.replicas.get(replica_id)
        if progress is None:
            return
        t = now_ms()
        leader_end = self.log.log_end_offset
        if fetch_offset >= leader_end:
            progress.last_caught_up_ms = t
        elif fetch_offset >= progress.leader_end_at_last_fetch >= 0:
            progress.last_caught_up_ms = progress.last_fetch_ms
        progress.log_end_offset = fetch_offset
        progress.last_fetch_ms = t
        progress.leader_end_at_last_fetch = leader_end

    def isr_candidates_to_add(self) -> list[int]:
        """Followers (never observers) out of the ISR that have caught up with the high watermark
        and with the start of the current leader epoch."""
        epoch_start = self.log.leader_epochs.start_offset_of(self.state.leader_epoch) or 0
        return [
            r
            for r, p in self.replicas.items()
            if r not in self.state.isr and r not in self.state.observers
            and p.log_end_offset >= self.high_watermark and p.log_end_offset >= epoch_start
        ]

    def isr_members_lagging(self, lag_max_ms: int) -> list[int]:
        t = now_ms()
        return [r for r in self.state.isr if r != self.broker_id and t - self.replicas.get(r, ReplicaProgress()).last_caught_up_ms > lag_max_ms]

    def maybe_advance_high_watermark(self) -> bool:
        if not self.is_leader:
            return False
        ends = [self.log.log_end_offset]
        for r in self.state.isr:
            if r != self.broker_id:
                ends.append(self.replicas.get(r, ReplicaProgress()).log_end_offset)
        new_hw = min(ends)
        if new_hw <= self.high_watermark:
            return False
        self.high_watermark = new_hw
        self._complete_acks()
        return True

    # --- acks=all ----------------------------------------------------------------------

    def wait_for_replication(self, required_offset: int) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self._acks_waiting.append((required_offset, fut))
        self._complete_acks()
        return fut

    def _complete_acks(self) -> None:
        # Kafka's rule: records that reached the high watermark while the ISR was below
        # min.insync.replicas are "maybe written": NOT_ENOUGH_REPLICAS_AFTER_APPEND
        enough = len(self.state.isr) >= self.log.config.min_insync_replicas
        outcome = ErrorCode.none if enough else ErrorCode.not_enough_replicas_after_append
        still = []
        for required, fut in self._acks_waiting:
            if fut.done():
                continue
            if self.high_watermark >= required:
                fut.set_result(outcome)
            else:
                still.append((required, fut))
        self._acks_waiting = still

    def fail_waiting(self, error: ErrorCode) -> None:
        for _, fut in self._acks_waiting:
            if not fut.done():
                fut.set_result(error)
        self._acks_waiting = []
