"""The gateway's settings: defaults, then a TOML file, then LOGBUS_GATEWAY_* environment variables, then flags."""

from __future__ import annotations

import fcntl
import hashlib
import socket
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from logbus.settings import coerce_scalar, load_layered, split_address

# name -> help text; the README's settings table says the same.
GATEWAY_SETTINGS_DOC = {
    "listen": "host:port the HTTP API listens on.",
    "advertised_url": "URL other gateways use to reach this one (release calls, forwarded session requests); default http(s)://listen. A worker advertises its own port instead.",
    "gateway_id": "Name of this gateway in the store; default: host name and a hash of the data directory. One process per id (the data directory is locked).",
    "data_dir": "Directory of the gateway's durable files: batch-transaction chunks, the SQLite store by default.",
    "txn_dir": "Directory of batch-transaction chunks; default `<data_dir>/txn`. The workers of a gateway share it, so any of them can go on with a transaction another one started.",
    "workers": "Worker processes; each serves the listen address (SO_REUSEPORT), is a gateway of its own in the store (id `<gateway_id>-w<N>`, files in `<data_dir>/worker-<N>`) and uses one core; a supervisor restarts any that dies. 1: a single process.",
    "bootstrap_servers": "Kafka bootstrap servers of the cluster the gateway writes to (any Kafka-protocol cluster).",
    "dc": "Data centre of this gateway: the prefix of the physical topics it writes ({dc}.{tenant}.{namespace}.{topic}) and the lb.origin header.",
    "store": "Gateway state store: `sqlite:///path/gateway.db`, shared by the gateways of one host, or `zk://host:port[,host:port]/chroot` (ZooKeeper), shared by gateways on several hosts; default `sqlite://<data_dir>/gateway.db`.",
    "admin_token": "Bearer token of the administrator: creates tenants and may act for every tenant; also authenticates gateway-to-gateway calls. Empty: no administrator.",
    "tls_cert": "PEM certificate file; with tls_key the gateway serves HTTPS only.",
    "tls_key": "PEM private key file for tls_cert.",
    "max_chunk_bytes": "Largest chunk (data bytes) a write session or store call accepts; larger gets 413.",
    "max_request_bytes": "Largest HTTP request body; larger gets 413.",
    "delivery_timeout_ms": "How long the producer tries to deliver a record before it reports failure (message.timeout.ms); must be under lease_ms / 2.",
    "linger_ms": "How long the producer waits to fill a batch (linger.ms).",
    "compression": "Compression of produced batches (none, gzip, snappy, lz4, zstd).",
    "lease_ms": "A gateway whose heartbeat in the store is older than this is dead; a gateway that could not heartbeat for lease_ms / 2 refuses writes.",
    "release_timeout_ms": "How long a new session owner waits for the previous owner to release the source before it falls back to the lease.",
    "index_interval_ms": "How often the per-partition seqno index is brought up to the high watermark for partitions this gateway writes.",
    "metadata_interval_ms": "How often partition health (leader, ISR, min.insync.replicas) is checked for failover.",
    "txn_window_ms": "A batch transaction's records are delivered only if its commit marker is at most this much later (Logbroker's 60 s).",
    "read_max_bytes": "Largest byte limit a read may ask for.",
    "read_max_wait_ms": "Longest long poll a read may ask for.",
    "push_batch_records": "Most records in one push delivery.",
    "push_timeout_ms": "Timeout of one push delivery request.",
    "push_backoff_ms": "First retry delay of a failed push delivery; it doubles up to push_backoff_max_ms.",
    "push_backoff_max_ms": "Longest retry delay of push delivery.",
    "producer_config": "Table of extra librdkafka producer settings (TOML only).",
}


@dataclass
class GatewayConfig:
    listen: str = "127.0.0.1:8080"
    advertised_url: str | None = None
    gateway_id: str | None = None
    data_dir: Path = Path("./logbus-gateway")
    workers: int = 1
    txn_dir: Path | None = None
    bootstrap_servers: str = "127.0.0.1:9092"
    dc: str = "dc1"
    store: str | None = None
    admin_token: str = ""
    tls_cert: str | None = None
    tls_key: str | None = None
    max_chunk_bytes: int = 900_000
    max_request_bytes: int = 8 * 1024 * 1024
    delivery_timeout_ms: int = 10_000
    linger_ms: int = 5
    compression: str = "lz4"
    lease_ms: int = 30_000
    release_timeout_ms: int = 15_000
    index_interval_ms: int = 5_000
    metadata_interval_ms: int = 1_000
    txn_window_ms: int = 60_000
    read_max_bytes: int = 16 * 1024 * 1024
    read_max_wait_ms: int = 30_000
    push_batch_records: int = 500
    push_timeout_ms: int = 10_000
    push_backoff_ms: int = 200
    push_backoff_max_ms: int = 30_000
    producer_config: dict = field(default_factory=dict)

    @property
    def listen_host(self) -> str:
        return split_address(self.listen)[0]

    @property
    def listen_port(self) -> int:
        return split_address(self.listen)[1]

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert and self.tls_key)

    @property
    def url(self) -> str:
        if self.advertised_url:
            return self.advertised_url.rstrip("/")
        return f"{'https' if self.tls else 'http'}://{self.listen}"

    def lock_data_dir(self):
        """Creates the data directory and takes its lock (one process per directory, so per gateway id); returns
        the open lock file, which holds the lock until it is closed or the process ends."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lock = open(self.data_dir / "gateway.lock", "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            raise RuntimeError(f"another gateway process uses {self.data_dir}") from None
        return lock

    @property
    def txn_root(self) -> Path:
        return self.txn_dir or self.data_dir / "txn"

    def for_worker(self, index: int) -> "GatewayConfig":
        """The settings of worker `index`: a gateway of its own in the store, which shares the whole gateway's
        store, listen address and batch-transaction directory."""
        return replace(self, gateway_id=f"{self.id}-w{index}", data_dir=self.data_dir / f"worker-{index}",
                       store=self.store_url, txn_dir=self.txn_root, workers=1)

    @property
    def store_url(self) -> str:
        return self.store or f"sqlite://{self.data_dir.resolve() / 'gateway.db'}"

    @property
    def id(self) -> str:
        if self.gateway_id:
            return self.gateway_id
        digest = hashlib.sha256(str(self.data_dir.resolve()).encode()).hexdigest()[:8]
        return f"{socket.gethostname()}-{digest}"

    @classmethod
    def load(cls, toml_path: Path | None = None, env: dict[str, str] | None = None, **overrides: Any) -> "GatewayConfig":
        """Defaults < TOML file < LOGBUS_GATEWAY_* environment < explicit overrides (flags); None is ignored."""
        config = load_layered(cls, "gateway", "LOGBUS_GATEWAY_", _coerce, toml_path, env, overrides, not_from_env={"producer_config"})
        config.validate()
        return config

    def validate(self) -> None:
        split_address(self.listen)
        if not self.dc or not all(c.isalnum() or c in "_-" for c in self.dc):
            raise ValueError(f"dc must be letters, digits, '_' or '-', not {self.dc!r}")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("tls_cert and tls_key go together")
        for name in ("workers", "max_chunk_bytes", "max_request_bytes", "delivery_timeout_ms", "lease_ms", "index_interval_ms",
                     "metadata_interval_ms", "txn_window_ms", "read_max_bytes", "push_batch_records", "push_timeout_ms",
                     "push_backoff_ms", "push_backoff_max_ms", "release_timeout_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.delivery_timeout_ms * 2 >= self.lease_ms:
            raise ValueError("delivery_timeout_ms must be under lease_ms / 2 (a gateway that lost the store must finish its writes before its lease ends)")
        if self.compression not in ("none", "gzip", "snappy", "lz4", "zstd"):
            raise ValueError(f"compression must be none, gzip, snappy, lz4 or zstd, not {self.compression!r}")
        if self.max_chunk_bytes > self.max_request_bytes:
            raise ValueError("max_chunk_bytes must not exceed max_request_bytes")


def _coerce(name: str, current: Any, value: Any) -> Any:
    if name == "producer_config":
        if not isinstance(value, dict):
            raise ValueError("producer_config must be a table of librdkafka settings")
        return {str(k): v for k, v in value.items()}
    if name == "data_dir":
        return Path(value)
    if name == "txn_dir":
        return None if value in (None, "") else Path(value)
    if name == "listen":
        split_address(str(value))
        return str(value)
    if name in ("advertised_url", "gateway_id", "store", "tls_cert", "tls_key"):
        return None if value in (None, "") else str(value)
    return coerce_scalar(name, current, value)

