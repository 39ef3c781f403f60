"""One broker process: its settings, topics, logs, Kafka listener and background duties."""

from __future__ import annotations

import asyncio
import logging
import signal
import time

from logbus.broker.config import BrokerConfig
from logbus.broker.group.coordinator import GroupCoordinator
from logbus.broker.replica_manager import ReplicaManager
from logbus.broker.server import KafkaServer
from logbus.broker.topics import TopicRegistry, load_or_create_cluster_id
from logbus.storage.log_manager import LogManager

log = logging.getLogger(__name__)

FLUSH_SCHEDULER_INTERVAL_MS = 1000


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        config.data_dir.mkdir(parents=True, exist_ok=True)
        self.cluster_id = load_or_create_cluster_id(config.data_dir, config.broker_id)
        self.topics = TopicRegistry(config.data_dir, config.broker_id)
        self.logs = LogManager(config.data_dir, config.topic_defaults)
        self.replicas = ReplicaManager(self.topics, self.logs, config.topic_defaults)
        self.groups = GroupCoordinator(self)
        self.server = KafkaServer(self)
        self._tasks: list[asyncio.Task] = []

    @property
    def live_broker_count(self) -> int:
        return 1

    async def start(self) -> None:
        started = time.monotonic()
        self.replicas.open_all()
        log.info("loaded %d partitions of %d topics in %.2fs", len(self.replicas.partitions), len(self.topics.topics), time.monotonic() - started)
        self.groups.start()
        await self.server.start()
        self._tasks = [
            asyncio.create_task(self._every(self.config.retention_check_interval_ms, self._retention)),
            asyncio.create_task(self._every(self.config.checkpoint_interval_ms, self.logs.checkpoint)),
            # flush.ms must hold for partitions that stop receiving appends too (log.flush.scheduler.interval.ms)
            asyncio.create_task(self._every(FLUSH_SCHEDULER_INTERVAL_MS, self.logs.flush_due)),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        self.groups.stop()
        await self.server.stop()
        self.logs.close()
        log.info("broker %d stopped cleanly", self.config.broker_id)

    def _retention(self) -> None:
        deleted = self.logs.run_retention(int(time.time() * 1000))
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


async def run_broker(config: BrokerConfig) -> None:
    """Run until SIGTERM or SIGINT, then shut down cleanly (logs flushed, recovery points written)."""
    broker = Broker(config)
    await broker.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await broker.stop()
