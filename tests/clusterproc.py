"""Start a cluster of real logbus broker processes sharing one metadata store, for the tests."""

from __future__ import annotations

import time
from pathlib import Path

from brokerproc import BrokerProcess, free_port, wait_until
from confluent_kafka.admin import AdminClient

# Short timeouts so failures are noticed in seconds; every other setting is the broker's default.
FAST_FAILOVER = {"session_timeout_ms": 2000, "replica_lag_time_max_ms": 3000, "group_initial_rebalance_delay_ms": 200}


class ClusterProcess:
    """N brokers (ids 0..N-1) on free loopback ports; `metadata` is a store URL (default: a SQLite file)."""

    def __init__(self, root: Path, brokers: int = 3, racks: list[str] | None = None, metadata: str | None = None,
                 settings: dict | None = None) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.metadata = metadata or f"local://{self.root / 'metadata.db'}"
        self.settings = {**FAST_FAILOVER, **(settings or {})}
        self.brokers: list[BrokerProcess] = []
        for i in range(brokers):
            rack = racks[i % len(racks)] if racks else None
            lines = [f"broker_id = {i}", f'metadata = "{self.metadata}"'] + ([f'rack = "{rack}"'] if rack else [])
            lines += [f"{k} = {_toml(v)}" for k, v in self.settings.items()]
            self.brokers.append(BrokerProcess(self.root / f"broker{i}", port=free_port(), config_toml="\n".join(lines) + "\n"))

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    def start(self) -> "ClusterProcess":
        for b in self.brokers:
            b.start()
        self.wait_for_brokers(len(self.brokers))
        return self

    def stop(self) -> None:
        for b in self.brokers:
            b.stop()

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def wait_for_brokers(self, count: int, timeout: float = 30.0) -> None:
        admin = self.admin()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if len(admin.list_topics(timeout=5).brokers) == count:
                    return
            except Exception:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"the cluster did not show {count} live brokers within {timeout}s")

    def partition(self, topic: str, partition: int, timeout: float = 5.0):
        """(leader, replicas, isr) as the cluster's Metadata says."""
        md = self.admin().list_topics(topic, timeout=timeout)
        p = md.topics[topic].partitions[partition]
        return p.leader, list(p.replicas), list(p.isrs)

    def wait_until(self, predicate, timeout: float = 30.0, what: str = "condition"):
        return wait_until(predicate, timeout, what)


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return '"' + str(value).replace('"', '\\"') + '"'
