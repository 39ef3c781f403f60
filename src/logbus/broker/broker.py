"""One broker process: its settings, logs, Kafka listener, and its part in the cluster.

The broker follows the metadata store: it polls it (cheaply, by version and live brokers) and
applies every new image to the partitions it hosts. The control plane object it is given does
every metadata change; the broker itself never decides cluster-wide state.
"""

from __future__ import annotations

import asyncio
import logging
import time

from logbus.broker.config import BrokerConfig
from logbus.broker.group.coordinator import GroupCoordinator
from logbus.broker.producer_ids import ProducerIdAllocator
from logbus.broker.replica_manager import ReplicaManager
from logbus.broker.server import KafkaServer
from logbus.broker.topics import BrokerInfo, MetadataImage
from logbus.storage.log_manager import LogManager

log = logging.getLogger(__name__)

FLUSH_SCHEDULER_INTERVAL_MS = 1000
METADATA_POLL_S = 0.1


class Broker:
    def __init__(self, config: BrokerConfig, control) -> None:
        self.config = config
        self.control = control
        config.data_dir.mkdir(parents=True, exist_ok=True)
        self.logs = LogManager(config.data_dir, config.topic_defaults)
        self.replicas = ReplicaManager(self)
        self.groups = GroupCoordinator(self)
        self.producer_ids = ProducerIdAllocator(control.allocate_producer_ids)
        self.server = KafkaServer(self)
        self.image: MetadataImage | None = None
        self._seen: tuple | None = None
        self._tasks: list[asyncio.Task] = []

    @property
    def cluster_id(self) -> str:
        return self.image.cluster_id if self.image else ""

    @property
    def live_broker_count(self) -> int:
        return len(self.image.brokers) if self.image else 1

    async def start(self) -> None:
        started = time.monotonic()
        cfg = self.config
        # Recover the logs before joining the cluster: a broker is live only once it can serve.
        topics = self.control.image().topics
        self.logs.load_all({name: self.control.log_config(t.configs) for name, t in topics.items()})
        host, port = cfg.advertised_host_port
        self.control.register(BrokerInfo(cfg.broker_id, host, port, cfg.rack))
        self._apply(self.control.image())
        log.info("loaded %d partitions of %d topics in %.2fs", len(self.replicas.partitions), len(self.image.topics), time.monotonic() - started)
        self.groups.start()
        await self.server.start()
        self._tasks = [
            asyncio.create_task(self._follow_metadata()),
            asyncio.create_task(self._every(cfg.session_timeout_ms // 3, lambda: self.control.store.heartbeat(cfg.broker_id))),
            asyncio.create_task(self._every(cfg.retention_check_interval_ms, self._retention)),
            asyncio.create_task(self._every(cfg.checkpoint_interval_ms, self.logs.checkpoint)),
            # flush.ms must hold for partitions that stop receiving appends too (log.flush.scheduler.interval.ms)
            asyncio.create_task(self._every(FLUSH_SCHEDULER_INTERVAL_MS, self.logs.flush_due)),
            asyncio.create_task(self._every(max(cfg.replica_lag_time_max_ms // 2, 50), lambda: self.replicas.shrink_lagging_isrs(cfg.replica_lag_time_max_ms))),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        self.groups.stop()
        await self.server.stop()
        self.replicas.stop()
        self.logs.close()
        log.info("broker %d stopped cleanly", self.config.broker_id)

    def _apply(self, image: MetadataImage) -> None:
        self.image = image
        self._seen = (image.version, frozenset(image.brokers), None if image.controller_id < 0 else image.controller_id)
        self.replicas.apply(image)
        self.groups.on_metadata(image)

    def refresh_metadata(self) -> None:
        """Take in the store's current state now (after a change this broker made itself)."""
        self._apply(self.control.image())

    async def _follow_metadata(self) -> None:
        store = self.control.store
        while True:
            await asyncio.sleep(METADATA_POLL_S)
            try:
                seen = (store.version(), frozenset(store.live_brokers()), store.controller_id())
                if seen != self._seen:
                    self._apply(self.control.image())
            except Exception:
                log.exception("could not refresh cluster metadata; retrying")

    def _retention(self) -> None:
        partitions = self.replicas.partitions
        deleted = self.logs.run_retention(int(time.time() * 1000), lambda key: p.high_watermark if (p := partitions.get(key)) else None)
        if deleted:
            log.info("retention deleted %d segments", deleted)

    @staticmethod
    async def _every(interval_ms: int, duty) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                duty()
            except Exception:
                log.exception("background duty %s failed", getattr(duty, "__name__", duty))
