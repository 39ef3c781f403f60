"""The broker's settings: defaults, then a TOML file, then LOGBUS_* environment variables, then flags."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from logbus.settings import coerce_scalar, load_layered, split_address
from logbus.storage.config import LogConfig

# name -> help text; the README's settings table is generated from the same words.
BROKER_SETTINGS_DOC = {
    "broker_id": "Id of this broker in the cluster (Kafka's broker.id).",
    "listen": "host:port the broker listens on for Kafka clients.",
    "advertised": "host:port given to clients in Metadata; defaults to `listen`.",
    "data_dir": "Directory holding the partition logs, checkpoints and topic metadata (Kafka's log.dirs).",
    "rack": "Rack or region of this broker (Kafka's broker.rack); used by rack-aware placement.",
    "auto_create_topics": "Create a topic when a client asks for one that does not exist (auto.create.topics.enable).",
    "num_partitions": "Partitions of an auto-created topic, and of a CreateTopics request asking for -1.",
    "default_replication_factor": "Replication factor of an auto-created topic, and of a request asking for -1.",
    "socket_request_max_bytes": "Largest request frame accepted; a larger frame closes the connection.",
    "retention_check_interval_ms": "How often retention deletes old segments (log.retention.check.interval.ms).",
    "checkpoint_interval_ms": "How often recovery points are written to disk (log.flush.offset.checkpoint.interval.ms).",
    "offsets_topic_num_partitions": "Partitions of the internal __consumer_offsets topic, created when groups are first used.",
    "offsets_topic_replication_factor": "Replication factor of __consumer_offsets (at most the live brokers when it is created).",
    "group_initial_rebalance_delay_ms": "How long the first rebalance of an empty group waits for more members (group.initial.rebalance.delay.ms).",
    "group_min_session_timeout_ms": "Smallest session timeout a group member may ask for (group.min.session.timeout.ms).",
    "group_max_session_timeout_ms": "Largest session timeout a group member may ask for (group.max.session.timeout.ms).",
    "metadata": "Metadata store: `local:///path/metadata.db` (SQLite shared by the brokers of one host) or `zk://host:port/chroot`; default `local://<data_dir>/metadata.db`.",
    "session_timeout_ms": "A broker that has not heartbeated to the metadata store for this long is dead to the cluster (broker.session.timeout.ms).",
    "replica_lag_time_max_ms": "A follower that has not caught up with the leader for this long leaves the ISR (replica.lag.time.max.ms).",
    "replica_fetch_wait_max_ms": "How long a follower's fetch waits at the leader for new data (replica.fetch.wait.max.ms).",
    "replica_fetch_max_bytes": "Bytes a follower asks for per partition and fetch (replica.fetch.max.bytes).",
    "log_placement_constraints": "Cluster default replica placement JSON for new topics (Confluent's log.placement.constraints).",
    "follower_fetching": "Send consumers that set client.rack to an in-sync replica (or caught-up observer) in their rack, KIP-392 (replica.selector.class=RackAwareReplicaSelector).",
    "auto_leader_rebalance_enable": "Move leadership back to preferred replicas when brokers are imbalanced (auto.leader.rebalance.enable).",
    "leader_imbalance_per_broker_percentage": "Allowed share of a broker's partitions led elsewhere before a rebalance (leader.imbalance.per.broker.percentage).",
    "leader_imbalance_check_interval_seconds": "How often the controller checks leader imbalance (leader.imbalance.check.interval.seconds).",
    "topic_defaults": "Table of topic configs (Kafka names, e.g. \"retention.ms\") used by topics without an override.",
}


@dataclass
class BrokerConfig:
    broker_id: int = 0
    listen: str = "127.0.0.1:9092"
    advertised: str | None = None
    data_dir: Path = Path("./logbus-data")
    rack: str | None = None
    auto_create_topics: bool = False
    num_partitions: int = 1
    default_replication_factor: int = 1
    socket_request_max_bytes: int = 104_857_600
    retention_check_interval_ms: int = 300_000
    checkpoint_interval_ms: int = 60_000
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    metadata: str | None = None
    session_timeout_ms: int = 3000
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_max_bytes: int = 1_048_576
    log_placement_constraints: str | None = None
    auto_leader_rebalance_enable: bool = True
    follower_fetching: bool = True
    leader_imbalance_per_broker_percentage: int = 10
    leader_imbalance_check_interval_seconds: int = 300
    topic_defaults: LogConfig = field(default_factory=LogConfig)

    @property
    def metadata_url(self) -> str:
        return self.metadata or f"local://{self.data_dir.resolve() / 'metadata.db'}"

    @property
    def listen_host(self) -> str:
        return split_address(self.listen)[0]

    @property
    def listen_port(self) -> int:
        return split_address(self.listen)[1]

    @property
    def advertised_host_port(self) -> tuple[str, int]:
        return split_address(self.advertised or self.listen)

    @classmethod
    def load(cls, toml_path: Path | None = None, env: dict[str, str] | None = None, **overrides: Any) -> "BrokerConfig":
        """Defaults < TOML file < LOGBUS_* environment < explicit overrides (flags); None overrides are ignored."""
        return load_layered(cls, "broker", "LOGBUS_", _coerce, toml_path, env, overrides, not_from_env={"topic_defaults"})

    def with_changes(self, **changes: Any) -> "BrokerConfig":
        return replace(self, **changes)


def _coerce(name: str, current: Any, value: Any) -> Any:
    if name == "topic_defaults":
        if isinstance(value, LogConfig):
            return value
        if not isinstance(value, dict):
            raise ValueError("topic_defaults must be a table of topic configs")
        return LogConfig.from_overrides(LogConfig(), {k: _toml_text(v) for k, v in value.items()})
    if name == "data_dir":
        return Path(value)
    if name in ("listen", "advertised"):
        split_address(str(value))
        return str(value)
    if name in ("rack", "metadata", "log_placement_constraints"):
        if isinstance(value, dict):  # placement constraints written as a TOML table
            import json

            return json.dumps(value)
        return None if value in (None, "") else str(value)
    return coerce_scalar(name, current, value)


def _toml_text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)

