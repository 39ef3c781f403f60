"""The gateway's durable state, kept apart from any broker: it must work against any Kafka cluster.

What lives here:

- the registry: tenants, their bearer tokens (SHA-256 of the token only), namespaces, logical topics;
- gateways: id, incarnation (a random id per process start), internal URL and heartbeat time;
- owners: per (physical topic, source) the session generation and the gateway incarnation holding it;
- pins: per (physical topic, source) the partition, its pin generation and the base seqno (the highest seqno
  known written before the source was re-pinned; a floor for recovery, since the old partition may be offline);
- the seqno index: per (topic, partition) a position P and, per source, the highest seqno and its offset among
  the records below P — every entry is a record known to be in the partition (read from it, or acknowledged to a
  gateway at that offset when that gateway's acknowledgements filled the range), so it never claims too much;
- push subscriptions.

Backends: `sqlite:///path/gateway.db` (WAL; shared by the gateway processes of one host) and
`zk://host:port[,host:port]/chroot` (ZooKeeper, shared by gateways on several hosts; see logbus.gateway.zk_store).
Every change that decides ownership is atomic (SQLite: one BEGIN IMMEDIATE transaction; ZooKeeper: a compare-and-set
on znode versions), so two gateways opening a session for one source at once get two different generations, and the
later one is the owner.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TopicRecord:
    tenant: str
    namespace: str
    name: str
    physical: str
    partitions: int
    replication_factor: int
    placement: str | None
    created_ms: int

    @property
    def logical(self) -> str:
        return f"{self.tenant}/{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Owner:
    generation: int
    gateway_id: str
    incarnation: str


@dataclass(frozen=True)
class GatewayRecord:
    gateway_id: str
    incarnation: str
    url: str
    heartbeat_ms: int


@dataclass(frozen=True)
class Pin:
    partition: int
    pin_generation: int
    base_seqno: int


@dataclass(frozen=True)
class PushRecord:
    push_id: str
    tenant: str
    topic: str          # logical
    consumer: str
    url: str
    created_ms: int


class GatewayStore:
    """Interface of the gateway state store; all methods are blocking (call them off the event loop)."""

    # registry
    def create_tenant(self, name: str) -> bool: raise NotImplementedError
    def tenant_exists(self, name: str) -> bool: raise NotImplementedError
    def add_token(self, tenant: str, token_hash: str) -> None: raise NotImplementedError
    def token_tenant(self, token_hash: str) -> str | None: raise NotImplementedError
    def create_namespace(self, tenant: str, name: str) -> bool: raise NotImplementedError
    def namespaces(self, tenant: str) -> list[str]: raise NotImplementedError
    def create_topic(self, rec: TopicRecord) -> bool: raise NotImplementedError
    def topic(self, tenant: str, namespace: str, name: str) -> TopicRecord | None: raise NotImplementedError
    def topics(self, tenant: str) -> list[TopicRecord]: raise NotImplementedError
    # gateways and ownership
    def register_gateway(self, rec: GatewayRecord) -> None: raise NotImplementedError
    def heartbeat(self, gateway_id: str, incarnation: str, now_ms: int) -> bool: raise NotImplementedError
    def gateway(self, gateway_id: str) -> GatewayRecord | None: raise NotImplementedError
    def gateways(self) -> list[GatewayRecord]: raise NotImplementedError
    def take_ownership(self, topic: str, source: str, gateway_id: str, incarnation: str) -> tuple[int, Owner | None]: raise NotImplementedError
    def owner(self, topic: str, source: str) -> Owner | None: raise NotImplementedError
    # pins
    def pin(self, topic: str, source: str) -> Pin | None: raise NotImplementedError
    def create_pin(self, topic: str, source: str, partition: int) -> Pin: raise NotImplementedError
    def repin(self, topic: str, source: str, expected_pin_generation: int, partition: int, base_seqno: int,
              generation: int) -> Pin | None: raise NotImplementedError
    def pin_counts(self, topic: str) -> dict[int, int]: raise NotImplementedError
    # seqno index
    def index_position(self, topic: str, partition: int) -> int | None: raise NotImplementedError
    def index_entry(self, topic: str, partition: int, source: str) -> tuple[int, int] | None: raise NotImplementedError
    def index_lookup(self, topic: str, partition: int, source: str) -> tuple[int, tuple[int, int] | None]:
        """(position, entry) read together: the entry covers every record of the source below the position."""
        raise NotImplementedError
    def save_index(self, topic: str, partition: int, position: int, entries: dict[str, tuple[int, int]]) -> None: raise NotImplementedError
    # push subscriptions
    def create_push(self, rec: PushRecord) -> bool: raise NotImplementedError
    def delete_push(self, push_id: str) -> bool: raise NotImplementedError
    def pushes(self) -> list[PushRecord]: raise NotImplementedError

    def close(self) -> None:
        pass


_SCHEMA = """
CREATE TABLE IF NOT EXISTS tenants (name TEXT PRIMARY KEY, created_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS tokens (token_hash TEXT PRIMARY KEY, tenant TEXT NOT NULL, created_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS namespaces (tenant TEXT NOT NULL, name TEXT NOT NULL, PRIMARY KEY (tenant, name));
CREATE TABLE IF NOT EXISTS topics (tenant TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
    physical TEXT NOT NULL, partitions INTEGER NOT NULL, replication_factor INTEGER NOT NULL, placement TEXT,
    created_ms INTEGER NOT NULL, PRIMARY KEY (tenant, namespace, name));
CREATE TABLE IF NOT EXISTS gateways (gateway_id TEXT PRIMARY KEY, incarnation TEXT NOT NULL, url TEXT NOT NULL,
    heartbeat_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS owners (topic TEXT NOT NULL, source TEXT NOT NULL, generation INTEGER NOT NULL,
    gateway_id TEXT NOT NULL, incarnation TEXT NOT NULL, PRIMARY KEY (topic, source));
CREATE TABLE IF NOT EXISTS pins (topic TEXT NOT NULL, source TEXT NOT NULL, partition INTEGER NOT NULL,
    pin_generation INTEGER NOT NULL, base_seqno INTEGER NOT NULL, PRIMARY KEY (topic, source));
CREATE TABLE IF NOT EXISTS index_positions (topic TEXT NOT NULL, partition INTEGER NOT NULL, position INTEGER NOT NULL,
    PRIMARY KEY (topic, partition));
CREATE TABLE IF NOT EXISTS index_entries (topic TEXT NOT NULL, partition INTEGER NOT NULL, source TEXT NOT NULL,
    seqno INTEGER NOT NULL, offset INTEGER NOT NULL, PRIMARY KEY (topic, partition, source));
CREATE TABLE IF NOT EXISTS pushes (push_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, topic TEXT NOT NULL,
    consumer TEXT NOT NULL, url TEXT NOT NULL, created_ms INTEGER NOT NULL);
"""


def _now_ms() -> int:
    return int(time.time() * 1000)


class SqliteGatewayStore(GatewayStore):
    """SQLite in WAL mode with synchronous=NORMAL: a committed change survives a crash of any process (SIGKILL); a
    power loss may lose the last changes. Then the gateways of the host died too, so no old session lives on; a lost
    index save only means a longer scan; a lost pin may put a source's next records into another partition, and
    recovery, reading only that partition, can then answer a lower last seqno: records may repeat (the pipeline
    drops them), none is lost."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None, check_same_thread=False)
        # Switching a new database to WAL can answer "locked" without waiting, when another process (a worker of
        # the same gateway) opens it at the same moment: try again for a while.
        for attempt in range(100):
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError:
                if attempt == 99:
                    raise
                time.sleep(0.05)
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=30000")
        with self._lock:
            self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # helpers
    def _one(self, sql: str, args: tuple = ()):
        with self._lock:
            return self._db.execute(sql, args).fetchone()

    def _all(self, sql: str, args: tuple = ()):
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def _write(self, sql: str, args: tuple = ()) -> int:
        with self._lock:
            return self._db.execute(sql, args).rowcount

    def _txn(self, fn):
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                result = fn(self._db)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            return result

    # registry
    def create_tenant(self, name: str) -> bool:
        return self._write("INSERT OR IGNORE INTO tenants VALUES (?, ?)", (name, _now_ms())) == 1

    def tenant_exists(self, name: str) -> bool:
        return self._one("SELECT 1 FROM tenants WHERE name=?", (name,)) is not None

    def add_token(self, tenant: str, token_hash: str) -> None:
        self._write("INSERT INTO tokens VALUES (?, ?, ?)", (token_hash, tenant, _now_ms()))

    def token_tenant(self, token_hash: str) -> str | None:
        row = self._one("SELECT tenant FROM tokens WHERE token_hash=?", (token_hash,))
        return row[0] if row else None

    def create_namespace(self, tenant: str, name: str) -> bool:
        return self._write("INSERT OR IGNORE INTO namespaces VALUES (?, ?)", (tenant, name)) == 1

    def namespaces(self, tenant: str) -> list[str]:
        return [r[0] for r in self._all("SELECT name FROM namespaces WHERE tenant=? ORDER BY name", (tenant,))]

    def create_topic(self, rec: TopicRecord) -> bool:
        return self._write("INSERT OR IGNORE INTO topics VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                           (rec.tenant, rec.namespace, rec.name, rec.physical, rec.partitions, rec.replication_factor,
                            rec.placement, rec.created_ms)) == 1

    def topic(self, tenant: str, namespace: str, name: str) -> TopicRecord | None:
        row = self._one("SELECT * FROM topics WHERE tenant=? AND namespace=? AND name=?", (tenant, namespace, name))
        return TopicRecord(*row) if row else None

    def topics(self, tenant: str) -> list[TopicRecord]:
        return [TopicRecord(*r) for r in self._all("SELECT * FROM topics WHERE tenant=? ORDER BY namespace, name", (tenant,))]

    # gateways and ownership
    def register_gateway(self, rec: GatewayRecord) -> None:
        self._write("INSERT OR REPLACE INTO gateways VALUES (?, ?, ?, ?)", (rec.gateway_id, rec.incarnation, rec.url, rec.heartbeat_ms))

    def heartbeat(self, gateway_id: str, incarnation: str, now_ms: int) -> bool:
        return self._write("UPDATE gateways SET heartbeat_ms=? WHERE gateway_id=? AND incarnation=?",
                           (now_ms, gateway_id, incarnation)) == 1

    def gateway(self, gateway_id: str) -> GatewayRecord | None:
        row = self._one("SELECT * FROM gateways WHERE gateway_id=?", (gateway_id,))
        return GatewayRecord(*row) if row else None

    def gateways(self) -> list[GatewayRecord]:
        return [GatewayRecord(*row) for row in self._all("SELECT * FROM gateways ORDER BY gateway_id")]

    def take_ownership(self, topic: str, source: str, gateway_id: str, incarnation: str) -> tuple[int, Owner | None]:
        def fn(db):
            row = db.execute("SELECT generation, gateway_id, incarnation FROM owners WHERE topic=? AND source=?", (topic, source)).fetchone()
            prev = Owner(*row) if row else None
            generation = (prev.generation if prev else 0) + 1
            db.execute("INSERT OR REPLACE INTO owners VALUES (?, ?, ?, ?, ?)", (topic, source, generation, gateway_id, incarnation))
            return generation, prev
        return self._txn(fn)

    def owner(self, topic: str, source: str) -> Owner | None:
        row = self._one("SELECT generation, gateway_id, incarnation FROM owners WHERE topic=? AND source=?", (topic, source))
        return Owner(*row) if row else None

    # pins
    def pin(self, topic: str, source: str) -> Pin | None:
        row = self._one("SELECT partition, pin_generation, base_seqno FROM pins WHERE topic=? AND source=?", (topic, source))
        return Pin(*row) if row else None

    def create_pin(self, topic: str, source: str, partition: int) -> Pin:
        def fn(db):
            db.execute("INSERT OR IGNORE INTO pins VALUES (?, ?, ?, 1, -1)", (topic, source, partition))
            return Pin(*db.execute("SELECT partition, pin_generation, base_seqno FROM pins WHERE topic=? AND source=?", (topic, source)).fetchone())
        return self._txn(fn)

    def repin(self, topic: str, source: str, expected_pin_generation: int, partition: int, base_seqno: int,
              generation: int) -> Pin | None:
        def fn(db):
            row = db.execute("SELECT generation FROM owners WHERE topic=? AND source=?", (topic, source)).fetchone()
            if row is None or row[0] != generation:
                return None  # fenced: a newer session owns the source
            n = db.execute("UPDATE pins SET partition=?, pin_generation=pin_generation+1, base_seqno=MAX(base_seqno, ?) "
                           "WHERE topic=? AND source=? AND pin_generation=?",
                           (partition, base_seqno, topic, source, expected_pin_generation)).rowcount
            if n != 1:
                return None
            return Pin(*db.execute("SELECT partition, pin_generation, base_seqno FROM pins WHERE topic=? AND source=?", (topic, source)).fetchone())
        return self._txn(fn)

    def pin_counts(self, topic: str) -> dict[int, int]:
        return {p: n for p, n in self._all("SELECT partition, COUNT(*) FROM pins WHERE topic=? GROUP BY partition", (topic,))}

    # seqno index
    def index_position(self, topic: str, partition: int) -> int | None:
        row = self._one("SELECT position FROM index_positions WHERE topic=? AND partition=?", (topic, partition))
        return row[0] if row else None

    def index_entry(self, topic: str, partition: int, source: str) -> tuple[int, int] | None:
        row = self._one("SELECT seqno, offset FROM index_entries WHERE topic=? AND partition=? AND source=?", (topic, partition, source))
        return (row[0], row[1]) if row else None

    def index_lookup(self, topic: str, partition: int, source: str) -> tuple[int, tuple[int, int] | None]:
        with self._lock:
            self._db.execute("BEGIN")  # one read snapshot for both rows
            try:
                pos = self._db.execute("SELECT position FROM index_positions WHERE topic=? AND partition=?", (topic, partition)).fetchone()
                row = self._db.execute("SELECT seqno, offset FROM index_entries WHERE topic=? AND partition=? AND source=?",
                                       (topic, partition, source)).fetchone()
            finally:
                self._db.execute("COMMIT")
        return (pos[0] if pos else 0), ((row[0], row[1]) if row else None)

    def save_index(self, topic: str, partition: int, position: int, entries: dict[str, tuple[int, int]]) -> None:
        def fn(db):
            db.executemany(
                "INSERT INTO index_entries VALUES (?, ?, ?, ?, ?) ON CONFLICT (topic, partition, source) DO UPDATE SET "
                "seqno=excluded.seqno, offset=excluded.offset WHERE excluded.seqno > index_entries.seqno",
                [(topic, partition, s, q, o) for s, (q, o) in entries.items()])
            db.execute("INSERT INTO index_positions VALUES (?, ?, ?) ON CONFLICT (topic, partition) DO UPDATE SET "
                       "position=MAX(position, excluded.position)", (topic, partition, position))
        self._txn(fn)

    # push subscriptions
    def create_push(self, rec: PushRecord) -> bool:
        return self._write("INSERT OR IGNORE INTO pushes VALUES (?, ?, ?, ?, ?, ?)",
                           (rec.push_id, rec.tenant, rec.topic, rec.consumer, rec.url, rec.created_ms)) == 1

    def delete_push(self, push_id: str) -> bool:
        return self._write("DELETE FROM pushes WHERE push_id=?", (push_id,)) == 1

    def pushes(self) -> list[PushRecord]:
        return [PushRecord(*r) for r in self._all("SELECT * FROM pushes ORDER BY push_id")]


def open_store(url: str) -> GatewayStore:
    """`sqlite:///abs/path.db`, `sqlite://relative.db` or `zk://host:port[,host:port]/chroot` (chroot /logbus if none)."""
    if url.startswith("sqlite://"):
        return SqliteGatewayStore(url[len("sqlite://"):])
    if url.startswith("zk://"):
        from logbus.gateway.zk_store import ZooKeeperGatewayStore

        hosts, _, chroot = url[len("zk://"):].partition("/")
        if not hosts:
            raise ValueError(f"gateway store {url!r} names no ZooKeeper server: zk://host:port[,host:port]/chroot")
        return ZooKeeperGatewayStore(hosts, "/" + chroot if chroot else "/logbus")
    raise ValueError(f"gateway store must be sqlite:///path or zk://host:port/chroot, not {url!r}")


def dumps(obj) -> str:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True)
