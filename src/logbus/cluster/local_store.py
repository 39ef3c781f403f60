"""The `local` metadata store: one SQLite file shared by the broker processes of one host.

Every store object has its own connection (WAL mode, a busy timeout, synchronous=FULL) and
keeps transactions short: reads in a deferred transaction (a consistent snapshot), writes in
`BEGIN IMMEDIATE` so that a read-modify-write (compare-and-set, a lease, an id block) holds the
write lock from its read to its commit. The file is the whole truth: any process that opens it
sees what the others wrote, and a restart loses nothing that was committed.

Liveness is a `last_seen` wall-clock time (time.time(), comparable across processes) written by
`register_broker` and `heartbeat`; a broker is live while `last_seen` is within the session
timeout. The controller lease is one row (holder, expires_at) of the same length, renewed by
`try_acquire_controller` and by `heartbeat`; it counts only while unexpired and its holder is live.
Wall clocks that jump (NTP steps) shorten or lengthen sessions and leases by the jump.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from logbus.broker.topics import PartitionState, TopicState
from logbus.cluster.store import BrokerRegistration, MetadataStore, TopicExistsError, UnknownTopicError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS brokers (
    broker_id INTEGER PRIMARY KEY, host TEXT NOT NULL, port INTEGER NOT NULL, rack TEXT,
    last_seen REAL NOT NULL);
CREATE TABLE IF NOT EXISTS controller (
    id INTEGER PRIMARY KEY CHECK (id = 0), holder INTEGER NOT NULL, expires_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS topics (name TEXT PRIMARY KEY, topic_id TEXT NOT NULL, configs TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS partitions (
    topic TEXT NOT NULL, idx INTEGER NOT NULL, partition_epoch INTEGER NOT NULL, state TEXT NOT NULL,
    PRIMARY KEY (topic, idx));
"""

BUSY_TIMEOUT_MS = 10_000


def new_cluster_id() -> str:
    """A random id printed like Kafka's (URL-safe base64 of 16 random bytes, 22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class LocalMetadataStore(MetadataStore):
    """`MetadataStore` on a SQLite file; safe to share between processes and between threads.

    `version()` is the stored change counter (bumped in the same transaction as every change of
    brokers, controller, topics and partitions; not by heartbeats) plus the number of times this
    store object has seen the set of live brokers or the live controller change by expiry (a
    broker whose heartbeats stop, a lease that lapses). It only grows and moves on every change
    a caller can see through `live_brokers()`, `controller_id()` and `topics()`, but it is a
    per-object number: compare it only with earlier values from the same store object.
    """

    def __init__(self, path: str | Path, session_timeout_ms: int = 6000) -> None:
        self.path = str(path)
        self.session_timeout = session_timeout_ms / 1000.0
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
        self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        self._set_wal()
        self._conn.execute("PRAGMA synchronous = FULL")
        with self._write() as c:
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    c.execute(stmt)
        self._registered: dict[int, BrokerRegistration] = {}
        self._seen: tuple | None = None
        self._seen_changes = 0

    def _set_wal(self) -> None:
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                mode = self._conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if mode.lower() != "wal" and self.path != ":memory:":
                    raise sqlite3.OperationalError(f"cannot put {self.path} in WAL mode (got {mode})")
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    # --- transactions --------------------------------------------------------------------
    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                yield self._conn
            finally:
                self._conn.execute("COMMIT")

    @staticmethod
    def _bump(c: sqlite3.Connection) -> None:
        c.execute(
            "INSERT INTO counters(name, value) VALUES('metadata_version', 1) "
            "ON CONFLICT(name) DO UPDATE SET value = value + 1"
        )

    def _live_ids(self, c: sqlite3.Connection, now: float) -> list[int]:
        return [r[0] for r in c.execute("SELECT broker_id FROM brokers WHERE last_seen > ? ORDER BY broker_id", (now - self.session_timeout,))]

    def _controller(self, c: sqlite3.Connection, now: float) -> int | None:
        row = c.execute(
            "SELECT holder FROM controller JOIN brokers ON brokers.broker_id = controller.holder "
            "WHERE controller.expires_at > ? AND brokers.last_seen > ?",
            (now, now - self.session_timeout),
        ).fetchone()
        return row[0] if row else None

    # --- identity ------------------------------------------------------------------------
    def cluster_id(self) -> str:
        with self._write() as c:
            c.execute("INSERT OR IGNORE INTO meta(key, value) VALUES('cluster_id', ?)", (new_cluster_id(),))
            return c.execute("SELECT value FROM meta WHERE key = 'cluster_id'").fetchone()[0]

    # --- brokers and liveness -----------------------------------------------------------
    def register_broker(self, registration: BrokerRegistration) -> None:
        with self._write() as c:
            c.execute(
                "INSERT OR REPLACE INTO brokers(broker_id, host, port, rack, last_seen) VALUES(?, ?, ?, ?, ?)",
                (registration.broker_id, registration.host, registration.port, registration.rack, time.time()),
            )
            self._bump(c)
        self._registered[registration.broker_id] = registration

    def heartbeat(self, broker_id: int) -> None:
        """Refresh liveness and renew an unexpired controller lease held by `broker_id`. If the
        entry is gone but this store object registered it, the registration is written again."""
        now = time.time()
        with self._write() as c:
            updated = c.execute("UPDATE brokers SET last_seen = ? WHERE broker_id = ?", (now, broker_id)).rowcount
            if not updated and broker_id in self._registered:
                r = self._registered[broker_id]
                c.execute(
                    "INSERT INTO brokers(broker_id, host, port, rack, last_seen) VALUES(?, ?, ?, ?, ?)",
                    (r.broker_id, r.host, r.port, r.rack, now),
                )
                self._bump(c)
            c.execute(
                "UPDATE controller SET expires_at = ? WHERE holder = ? AND expires_at > ?",
                (now + self.session_timeout, broker_id, now),
            )

    def unregister_broker(self, broker_id: int) -> None:
        self._registered.pop(broker_id, None)
        with self._write() as c:
            c.execute("DELETE FROM brokers WHERE broker_id = ?", (broker_id,))
            c.execute("DELETE FROM controller WHERE holder = ?", (broker_id,))
            self._bump(c)

    def live_brokers(self) -> dict[int, BrokerRegistration]:
        now = time.time()
        with self._read() as c:
            rows = c.execute(
                "SELECT broker_id, host, port, rack FROM brokers WHERE last_seen > ? ORDER BY broker_id",
                (now - self.session_timeout,),
            ).fetchall()
        return {r[0]: BrokerRegistration(r[0], r[1], r[2], r[3]) for r in rows}

    # --- controller lease -------------------------------------------------------------
    def try_acquire_controller(self, broker_id: int) -> bool:
        """Take the lease if it is absent, expired or held by a broker that is no longer live;
        renew it if `broker_id` holds it. The caller must itself be live (registered, within its
        session): a broker that is not live never gets or keeps the lease."""
        now = time.time()
        with self._write() as c:
            if broker_id not in self._live_ids(c, now):
                return False
            row = c.execute("SELECT holder, expires_at FROM controller WHERE id = 0").fetchone()
            if row is not None and row[0] == broker_id and row[1] > now:
                c.execute("UPDATE controller SET expires_at = ? WHERE id = 0", (now + self.session_timeout,))
                return True
            if row is not None and self._controller(c, now) is not None:
                return False
            c.execute(
                "INSERT OR REPLACE INTO controller(id, holder, expires_at) VALUES(0, ?, ?)",
                (broker_id, now + self.session_timeout),
            )
            self._bump(c)
            return True

    def controller_id(self) -> int | None:
        with self._read() as c:
            return self._controller(c, time.time())

    def resign_controller(self, broker_id: int) -> None:
        with self._write() as c:
            if c.execute("DELETE FROM controller WHERE holder = ?", (broker_id,)).rowcount:
                self._bump(c)

    # --- topics and partitions --------------------------------------------------------
    def topics(self) -> dict[str, TopicState]:
        with self._read() as c:
            trows = c.execute("SELECT name, topic_id, configs FROM topics ORDER BY name").fetchall()
            prows = c.execute("SELECT topic, state FROM partitions ORDER BY topic, idx").fetchall()
        out = {name: TopicState(name, topic_id, [], json.loads(configs)) for name, topic_id, configs in trows}
        for topic, state in prows:
            if topic in out:
                out[topic].partitions.append(PartitionState(**json.loads(state)))
        return out

    @staticmethod
    def _insert_partitions(c: sqlite3.Connection, topic: str, partitions: list[PartitionState]) -> None:
        c.executemany(
            "INSERT INTO partitions(topic, idx, partition_epoch, state) VALUES(?, ?, ?, ?)",
            [(topic, p.partition, p.partition_epoch, json.dumps(asdict(p))) for p in partitions],
        )

    def create_topic(self, topic: TopicState) -> None:
        with self._write() as c:
            if c.execute("SELECT 1 FROM topics WHERE name = ?", (topic.name,)).fetchone():
                raise TopicExistsError(f"Topic '{topic.name}' already exists.")
            c.execute(
                "INSERT INTO topics(name, topic_id, configs) VALUES(?, ?, ?)",
                (topic.name, topic.topic_id, json.dumps(topic.configs)),
            )
            c.execute("DELETE FROM partitions WHERE topic = ?", (topic.name,))
            self._insert_partitions(c, topic.name, topic.partitions)
            self._bump(c)

    def delete_topic(self, name: str) -> None:
        with self._write() as c:
            if not c.execute("DELETE FROM topics WHERE name = ?", (name,)).rowcount:
                raise UnknownTopicError(name)
            c.execute("DELETE FROM partitions WHERE topic = ?", (name,))
            self._bump(c)

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        with self._write() as c:
            if not c.execute("UPDATE topics SET configs = ? WHERE name = ?", (json.dumps(configs), name)).rowcount:
                raise UnknownTopicError(name)
            self._bump(c)

    def add_partitions(self, name: str, partitions: list[PartitionState]) -> None:
        """ValueError if the new indexes do not follow the existing ones (nothing is written)."""
        with self._write() as c:
            if not c.execute("SELECT 1 FROM topics WHERE name = ?", (name,)).fetchone():
                raise UnknownTopicError(name)
            existing = c.execute("SELECT COUNT(*) FROM partitions WHERE topic = ?", (name,)).fetchone()[0]
            want = list(range(existing, existing + len(partitions)))
            if [p.partition for p in partitions] != want:
                raise ValueError(f"new partitions of {name} must be numbered {want}, not {[p.partition for p in partitions]}")
            self._insert_partitions(c, name, partitions)
            self._bump(c)

    def update_partition(self, topic: str, state: PartitionState, expected_partition_epoch: int) -> bool:
        """UnknownTopicError if the topic or the partition does not exist."""
        new_epoch = expected_partition_epoch + 1
        with self._write() as c:
            row = c.execute("SELECT partition_epoch FROM partitions WHERE topic = ? AND idx = ?", (topic, state.partition)).fetchone()
            if row is None:
                raise UnknownTopicError(f"{topic}-{state.partition}")
            if row[0] != expected_partition_epoch:
                return False
            data = asdict(state)
            data["partition_epoch"] = new_epoch
            c.execute(
                "UPDATE partitions SET partition_epoch = ?, state = ? WHERE topic = ? AND idx = ?",
                (new_epoch, json.dumps(data), topic, state.partition),
            )
            self._bump(c)
        state.partition_epoch = new_epoch
        return True

    # --- change detection and ids ------------------------------------------------------
    def version(self) -> int:
        now = time.time()
        with self._read() as c:
            row = c.execute("SELECT value FROM counters WHERE name = 'metadata_version'").fetchone()
            counter = row[0] if row else 0
            seen = (tuple(self._live_ids(c, now)), self._controller(c, now))
            if self._seen is not None and seen != self._seen:
                self._seen_changes += 1
            self._seen = seen
            return counter + self._seen_changes

    def allocate_producer_ids(self, count: int) -> int:
        if count < 1:
            raise ValueError(f"count must be at least 1, not {count}")
        with self._write() as c:
            row = c.execute("SELECT value FROM counters WHERE name = 'next_producer_id'").fetchone()
            first = row[0] if row else 0
            c.execute(
                "INSERT INTO counters(name, value) VALUES('next_producer_id', ?) "
                "ON CONFLICT(name) DO UPDATE SET value = excluded.value",
                (first + count,),
            )
            return first

    def close(self) -> None:
        """Closes the connection (idempotent). Liveness lapses after the session timeout."""
        with self._lock:
            self._conn.close()
