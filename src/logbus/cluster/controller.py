"""The controller: whichever broker holds the controller lease in the metadata store.

It notices brokers that die (their registration lapses) and brokers that come back, elects new
leaders for partitions whose leader is gone (clean from the ISR; unclean only where the topic
allows it), drops dead brokers from ISRs so acks=all fails fast instead of hanging, and moves
leadership back to preferred replicas when brokers are imbalanced. Every change is a
compare-and-set on the partition epoch, so a deposed controller cannot overwrite a newer one.
"""

from __future__ import annotations

import asyncio
import logging
import time

from logbus.cluster import elections
from logbus.cluster.control import ControlPlane

log = logging.getLogger(__name__)

TICK_S = 0.2


class Controller:
    def __init__(self, broker_id: int, control: ControlPlane, config) -> None:
        self.broker_id = broker_id
        self.control = control
        self.store = control.store
        self.config = config
        self.active = False
        self._seen: tuple | None = None
        self._next_rebalance = time.monotonic() + config.leader_imbalance_check_interval_seconds
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    def stop(self) -> None:
        if self._task:
            self._task.cancel()
        if self.active:
            self.store.resign_controller(self.broker_id)

    async def _run(self) -> None:
        while True:
            try:
                held = self.store.try_acquire_controller(self.broker_id)
                if held and not self.active:
                    log.info("broker %d is now the controller", self.broker_id)
                    self._seen = None
                elif not held and self.active:
                    log.info("broker %d is no longer the controller", self.broker_id)
                self.active = held
                if held:
                    self._tick()
            except Exception:
                log.exception("controller duty failed; retrying")
            await asyncio.sleep(TICK_S)

    def _tick(self) -> None:
        live = set(self.store.live_brokers())
        seen = (self.store.version(), frozenset(live))
        rebalance_due = self.config.auto_leader_rebalance_enable and time.monotonic() >= self._next_rebalance
        if seen == self._seen and not rebalance_due:
            return
        self._seen = seen
        topics = self.store.topics()
        for topic in topics.values():
            unclean = self.control.log_config(topic.configs).unclean_leader_election_enable
            for state in topic.partitions:
                if state.leader not in live:
                    new = elections.offline_election(state, live, unclean)
                    why = f"leader {state.leader} is not live"
                else:
                    new = elections.without_dead_from_isr(state, live)
                    why = "dead brokers leave the ISR"
                if new is not None and self.store.update_partition(topic.name, new, state.partition_epoch):
                    self._seen = None  # look again next tick: our own change moved the version
                    log.info("%s-%d: leader %d -> %d, epoch %d, ISR %s (%s)", topic.name, state.partition, state.leader,
                             new.leader, new.leader_epoch, new.isr, why)
        if rebalance_due:
            self._next_rebalance = time.monotonic() + self.config.leader_imbalance_check_interval_seconds
            self._rebalance_leaders(topics, live)

    def _rebalance_leaders(self, topics, live: set[int]) -> None:
        """auto.leader.rebalance.enable: per broker, if more than leader.imbalance.per.broker.percentage
        of the partitions it should lead are led elsewhere, elect it where it is in the ISR."""
        preferred: dict[int, list[tuple[str, object]]] = {}
        for topic in topics.values():
            for state in topic.partitions:
                if state.replicas:
                    preferred.setdefault(state.replicas[0], []).append((topic.name, state))
        for broker_id, owned in preferred.items():
            if broker_id not in live:
                continue
            not_led = [(t, s) for t, s in owned if s.leader != broker_id]
            if not owned or 100 * len(not_led) / len(owned) <= self.config.leader_imbalance_per_broker_percentage:
                continue
            moved = 0
            for topic_name, state in not_led:
                new = elections.preferred_election(state, live)
                if new is not None and self.store.update_partition(topic_name, new, state.partition_epoch):
                    moved += 1
            if moved:
                log.info("leader rebalance: broker %d leads %d more of its preferred partitions", broker_id, moved)
