"""The gateway store in ZooKeeper (kazoo): `zk://host:port[,host:port]/chroot`, shared by gateways on several hosts.

Layout under the chroot (next to the cluster's nodes when brokers and gateways share a chroot)::

    /gateway/tenants/{tenant}                    {"created_ms"}
    /gateway/tokens/{sha256 of the token}        {"tenant", "created_ms"}
    /gateway/namespaces/{tenant}/{namespace}     {"created_ms"}
    /gateway/topics/{tenant}/{namespace}/{name}  the TopicRecord
    /gateway/gateways/{gateway id}               {"incarnation", "url", "heartbeat_ms"}
    /gateway/owners/{physical topic}/{source}    {"generation", "gateway_id", "incarnation"}
    /gateway/pins/{physical topic}/{source}      {"partition", "pin_generation", "base_seqno"}
    /gateway/index/{physical topic}/{partition}      {"position": P}
    /gateway/index/{physical topic}/{partition}/{k}  zlib of {source: [seqno, offset]}, k = crc32(source) % 32
    /gateway/pushes/{push id}                    the PushRecord

Values are JSON. Every name in a path is percent-encoded UTF-8 (`/`, `%`, spaces, anything outside
[A-Za-z0-9_.~-] becomes %XX; "." and ".." are escaped too), so source ids like `host-1/var/log/app.log` are
one znode name; listings decode them.

Every decision is a compare-and-set on znode versions: `take_ownership` rewrites the owner node with the
version it read (or creates it), so of two gateways taking a source at once each gets its own generation
and the later write is the owner; `repin` is one transaction that checks the owner node's version and
rewrites the pin node with the version it read; `save_index` merges into each index bucket the same way,
then raises the position. A lost race reads again and retries.

A partition's index is a position node and 32 bucket nodes: a lookup reads the position, then the source's
bucket, and a save writes the buckets before the position, so the bucket read holds every entry below the
position read. Each bucket is bounded by ZooKeeper's znode limit (jute.maxbuffer, 1 MB by default): about 30
bytes per source compressed with 32-hex-digit source ids, 14 with ids like `host-17/var/log/app.log`, so some
30,000 sources per bucket, about a million per partition. A save that would make a bucket pass
INDEX_MAX_BYTES raises IndexTooLargeError instead of sending a request the server would answer by closing the
connection.

Connection loss: as the cluster store (logbus.cluster.zk_store): kazoo reconnects by itself, a request
waits at most `max(2 s, session timeout)` for its answer, an operation is retried for up to `max(10 s,
2 × session timeout)` and then raises MetadataStoreUnavailableError, as does a start that cannot reach the
ensemble within `connect_timeout`. A write retried after its answer was lost recognises its own result.
"""

from __future__ import annotations

import json
import random
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, TypeVar
from urllib.parse import quote, unquote

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError
from kazoo.retry import KazooRetry, RetryFailedError

from logbus.cluster.zk_store import _MAYBE_COMMITTED, MetadataStoreUnavailableError, _Bounded, _Retry, start_client, stop_client
from logbus.gateway.store import GatewayRecord, GatewayStore, Owner, Pin, PushRecord, TopicRecord, dumps

T = TypeVar("T")

# ZooKeeper refuses requests over jute.maxbuffer (1 MB by default); leave room for the path and the header.
INDEX_MAX_BYTES = 1_000_000
# A partition's seqno index is spread over this many nodes by a hash of the source id.
INDEX_BUCKETS = 32


class IndexTooLargeError(ValueError):
    """A node of a partition's seqno index would not fit in one znode."""


def _seg(name: str) -> str:
    """One znode name for any non-empty name, reversible with unquote."""
    if not name:
        raise ValueError("names in the gateway store must not be empty")
    seg = quote(name, safe="")
    return seg.replace(".", "%2E") if seg in (".", "..") else seg


def _json(obj: Any) -> bytes:
    return dumps(obj).encode()


def _now_ms() -> int:
    return int(time.time() * 1000)


class ZooKeeperGatewayStore(GatewayStore):
    def __init__(self, hosts: str, chroot: str = "/logbus", session_timeout_ms: int = 6000, *,
                 connect_timeout: float = 15.0) -> None:
        self.hosts = hosts
        self.root = ("/" + chroot.strip("/") if chroot.strip("/") else "") + "/gateway"
        session_timeout = session_timeout_ms / 1000.0
        self.retry_deadline = max(10.0, 2 * session_timeout)
        self._zk = start_client(hosts, session_timeout, connect_timeout)
        self._z = _Bounded(self._zk, max(2.0, session_timeout))
        self._closed = False

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        stop_client(self._zk)

    # --- plumbing -------------------------------------------------------------------------------------------
    def _p(self, *names: str) -> str:
        return self.root + "".join("/" + _seg(n) for n in names)

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        retry = KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0, deadline=self.retry_deadline, ignore_expire=True)
        try:
            return retry(fn, *args)
        except RetryFailedError:
            raise MetadataStoreUnavailableError(
                f"ZooKeeper ensemble {self.hosts} unreachable for {self.retry_deadline:g} s") from None

    def _cas(self, op: Callable[[], T]) -> T:
        """Runs `op` until it does not lose a race (_Retry); some writer wins every round, so this ends."""
        while True:
            try:
                return self._call(op)
            except _Retry:
                time.sleep(random.uniform(0.001, 0.01))  # jitter: losers of one round do not collide again

    def _create(self, path: str, data: bytes) -> None:
        self._z.wait(self._zk.create_async(path, data, makepath=True))

    def _create_once(self, path: str, data: bytes) -> bool:
        """Creates the node; False if it existed. After a lost answer, a node holding exactly `data` is ours."""
        maybe_committed = False

        def op() -> bool:
            nonlocal maybe_committed
            try:
                self._create(path, data)
            except _MAYBE_COMMITTED:
                maybe_committed = True
                raise
            except NodeExistsError:
                return maybe_committed and self._get(path) == data
            return True

        return self._call(op)

    def _get(self, path: str) -> bytes | None:
        try:
            return self._z.get(path)[0]
        except NoNodeError:
            return None

    def _read(self, path: str) -> dict | None:
        data = self._get(path)
        return json.loads(data) if data is not None else None

    def _children(self, path: str) -> list[str]:
        """Decoded child names, sorted; none if the node does not exist."""
        try:
            return sorted(unquote(c) for c in self._z.get_children(path))
        except NoNodeError:
            return []

    def _read_all(self, paths: list[str]) -> list[dict]:
        """The nodes' values, read in parallel; nodes deleted meanwhile are left out."""
        pending = [self._zk.get_async(p) for p in paths]
        out = []
        for a in pending:
            try:
                out.append(json.loads(self._z.wait(a)[0]))
            except NoNodeError:
                continue
        return out

    # --- registry ---------------------------------------------------------------------------------------------
    def create_tenant(self, name: str) -> bool:
        return self._create_once(self._p("tenants", name), _json({"created_ms": _now_ms()}))

    def tenant_exists(self, name: str) -> bool:
        return self._call(self._z.exists, self._p("tenants", name)) is not None

    def add_token(self, tenant: str, token_hash: str) -> None:
        if not self._create_once(self._p("tokens", token_hash), _json({"tenant": tenant, "created_ms": _now_ms()})):
            raise ValueError("this token is registered already")

    def token_tenant(self, token_hash: str) -> str | None:
        d = self._call(self._read, self._p("tokens", token_hash))
        return d["tenant"] if d else None

    def create_namespace(self, tenant: str, name: str) -> bool:
        return self._create_once(self._p("namespaces", tenant, name), _json({"created_ms": _now_ms()}))

    def namespaces(self, tenant: str) -> list[str]:
        return self._call(self._children, self._p("namespaces", tenant))

    def create_topic(self, rec: TopicRecord) -> bool:
        return self._create_once(self._p("topics", rec.tenant, rec.namespace, rec.name), _json(asdict(rec)))

    def topic(self, tenant: str, namespace: str, name: str) -> TopicRecord | None:
        d = self._call(self._read, self._p("topics", tenant, namespace, name))
        return TopicRecord(**d) if d else None

    def topics(self, tenant: str) -> list[TopicRecord]:
        def op() -> list[TopicRecord]:
            paths = [self._p("topics", tenant, ns, name) for ns in self._children(self._p("topics", tenant))
                     for name in self._children(self._p("topics", tenant, ns))]
            return sorted((TopicRecord(**d) for d in self._read_all(paths)), key=lambda r: (r.namespace, r.name))

        return self._call(op)

    # --- gateways and ownership ----------------------------------------------------------------------------
    def register_gateway(self, rec: GatewayRecord) -> None:
        path = self._p("gateways", rec.gateway_id)
        data = _json({"incarnation": rec.incarnation, "url": rec.url, "heartbeat_ms": rec.heartbeat_ms})

        def op() -> None:
            try:
                self._z.set(path, data)
            except NoNodeError:
                try:
                    self._create(path, data)
                except NodeExistsError:
                    raise _Retry from None

        self._cas(op)

    def heartbeat(self, gateway_id: str, incarnation: str, now_ms: int) -> bool:
        path = self._p("gateways", gateway_id)

        def op() -> bool:
            try:
                data, stat = self._z.get(path)
            except NoNodeError:
                return False
            d = json.loads(data)
            if d["incarnation"] != incarnation:
                return False  # another process registered under this id
            d["heartbeat_ms"] = now_ms
            try:
                self._z.set(path, _json(d), version=stat.version)
            except BadVersionError:
                raise _Retry from None
            return True

        return self._cas(op)

    def gateway(self, gateway_id: str) -> GatewayRecord | None:
        d = self._call(self._read, self._p("gateways", gateway_id))
        return GatewayRecord(gateway_id, d["incarnation"], d["url"], d["heartbeat_ms"]) if d else None

    def gateways(self) -> list[GatewayRecord]:
        def op() -> list[GatewayRecord]:
            out = []
            for g in self._children(self._p("gateways")):
                d = self._read(self._p("gateways", g))
                if d:
                    out.append(GatewayRecord(g, d["incarnation"], d["url"], d["heartbeat_ms"]))
            return out

        return self._call(op)

    def take_ownership(self, topic: str, source: str, gateway_id: str, incarnation: str) -> tuple[int, Owner | None]:
        path = self._p("owners", topic, source)
        attempt: tuple[int, Owner | None] | None = None  # a write whose answer was lost

        def op() -> tuple[int, Owner | None]:
            nonlocal attempt
            try:
                data, stat = self._z.get(path)
                prev, version = Owner(**json.loads(data)), stat.version
            except NoNodeError:
                prev, version = None, None
            if attempt is not None and prev == Owner(attempt[0], gateway_id, incarnation):
                return attempt
            generation = (prev.generation if prev else 0) + 1
            new = _json(asdict(Owner(generation, gateway_id, incarnation)))
            try:
                if version is None:
                    self._create(path, new)
                else:
                    self._z.set(path, new, version=version)
            except _MAYBE_COMMITTED:
                attempt = (generation, prev)
                raise
            except (NodeExistsError, BadVersionError):
                raise _Retry from None
            return generation, prev

        return self._cas(op)

    def owner(self, topic: str, source: str) -> Owner | None:
        d = self._call(self._read, self._p("owners", topic, source))
        return Owner(**d) if d else None

    # --- pins -------------------------------------------------------------------------------------------------
    def pin(self, topic: str, source: str) -> Pin | None:
        d = self._call(self._read, self._p("pins", topic, source))
        return Pin(**d) if d else None

    def create_pin(self, topic: str, source: str, partition: int) -> Pin:
        """The source's pin: a new one on `partition`, or the one that exists (pins are never deleted)."""
        path = self._p("pins", topic, source)

        def op() -> Pin:
            try:
                self._create(path, _json(asdict(Pin(partition, 1, -1))))
            except NodeExistsError:
                pass
            return Pin(**json.loads(self._z.get(path)[0]))

        return self._call(op)

    def repin(self, topic: str, source: str, expected_pin_generation: int, partition: int, base_seqno: int,
              generation: int) -> Pin | None:
        owner_path, pin_path = self._p("owners", topic, source), self._p("pins", topic, source)
        attempt: Pin | None = None  # a commit whose answer was lost

        def op() -> Pin | None:
            nonlocal attempt
            try:
                odata, ostat = self._z.get(owner_path)
                pdata, pstat = self._z.get(pin_path)
            except NoNodeError:
                return None
            # Generations only grow, so a mismatch read here stays one.
            if json.loads(odata)["generation"] != generation:
                return None  # fenced: a newer session owns the source
            cur = Pin(**json.loads(pdata))
            if cur.pin_generation != expected_pin_generation:
                return cur if cur == attempt else None
            new = Pin(partition, cur.pin_generation + 1, max(cur.base_seqno, base_seqno))
            t = self._zk.transaction()
            t.check(owner_path, ostat.version)
            t.set_data(pin_path, _json(asdict(new)), version=pstat.version)
            try:
                results = self._z.wait(t.commit_async())
            except _MAYBE_COMMITTED:
                attempt = new
                raise
            if any(isinstance(r, BadVersionError) for r in results):
                raise _Retry  # owner or pin changed since read: decide again
            errors = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
            if errors:
                raise errors[0]
            return new

        return self._cas(op)

    def pin_counts(self, topic: str) -> dict[int, int]:
        def op() -> dict[int, int]:
            counts: dict[int, int] = {}
            base = self._p("pins", topic)
            for d in self._read_all([f"{base}/{_seg(s)}" for s in self._children(base)]):
                counts[d["partition"]] = counts.get(d["partition"], 0) + 1
            return counts

        return self._call(op)

    # --- seqno index ------------------------------------------------------------------------------------------
    def _index_paths(self, topic: str, partition: int, source: str) -> tuple[str, str]:
        head = self._p("index", topic, str(partition))
        return head, f"{head}/{zlib.crc32(source.encode()) % INDEX_BUCKETS}"

    def _position(self, head: str) -> int | None:
        data = self._call(self._get, head)
        return json.loads(data)["position"] if data else None   # empty: made as a bucket's parent, no save yet

    def _bucket(self, path: str) -> dict[str, list[int]]:
        data = self._call(self._get, path)
        return json.loads(zlib.decompress(data)) if data else {}

    def index_position(self, topic: str, partition: int) -> int | None:
        return self._position(self._p("index", topic, str(partition)))

    def index_entry(self, topic: str, partition: int, source: str) -> tuple[int, int] | None:
        entry = self._bucket(self._index_paths(topic, partition, source)[1]).get(source)
        return (entry[0], entry[1]) if entry else None

    def index_lookup(self, topic: str, partition: int, source: str) -> tuple[int, tuple[int, int] | None]:
        head, bucket = self._index_paths(topic, partition, source)
        # The position first: a save writes its buckets before it raises the position, so the bucket read after
        # it holds every entry below that position.
        position = self._position(head)
        entry = self._bucket(bucket).get(source)
        return position or 0, ((entry[0], entry[1]) if entry else None)

    def save_index(self, topic: str, partition: int, position: int, entries: dict[str, tuple[int, int]]) -> None:
        """Merges into the stored index: per source the higher seqno wins (bucket by bucket, each a compare-and-set),
        then the position grows to `position`. Applying it twice gives the same index, so a retry after a lost
        answer is harmless; a save cut short leaves entries above the position, which are true and so harmless."""
        by_bucket: dict[str, dict[str, tuple[int, int]]] = {}
        head = self._p("index", topic, str(partition))
        for source, entry in entries.items():
            by_bucket.setdefault(self._index_paths(topic, partition, source)[1], {})[source] = entry
        for path, part in sorted(by_bucket.items()):
            self._cas(lambda path=path, part=part: self._merge_bucket(path, part, f"{topic}[{partition}]"))

        def raise_position() -> None:
            try:
                data, stat = self._z.get(head)
                version = stat.version
                if data and json.loads(data)["position"] >= position:
                    return
            except NoNodeError:
                version = None
            try:
                if version is None:
                    self._create(head, _json({"position": position}))
                else:
                    self._z.set(head, _json({"position": position}), version=version)
            except (NodeExistsError, BadVersionError):
                raise _Retry from None

        self._cas(raise_position)

    def _merge_bucket(self, path: str, entries: dict[str, tuple[int, int]], name: str) -> None:
        try:
            data, stat = self._z.get(path)
            merged, version = json.loads(zlib.decompress(data)), stat.version
        except NoNodeError:
            merged, version = {}, None
        changed = False
        for source, (seqno, offset) in entries.items():
            if source not in merged or seqno > merged[source][0]:
                merged[source] = [seqno, offset]
                changed = True
        if not changed:
            return
        blob = zlib.compress(_json(merged))
        if len(blob) > INDEX_MAX_BYTES:
            raise IndexTooLargeError(f"one of the {INDEX_BUCKETS} seqno index nodes of {name} would be {len(blob)} bytes "
                                     f"({len(merged)} sources), over ZooKeeper's limit of {INDEX_MAX_BYTES}")
        try:
            if version is None:
                self._create(path, blob)
            else:
                self._z.set(path, blob, version=version)
        except (NodeExistsError, BadVersionError):
            raise _Retry from None

    # --- push subscriptions ----------------------------------------------------------------------------------
    def create_push(self, rec: PushRecord) -> bool:
        return self._create_once(self._p("pushes", rec.push_id), _json(asdict(rec)))

    def delete_push(self, push_id: str) -> bool:
        path = self._p("pushes", push_id)
        maybe_committed = False

        def op() -> bool:
            nonlocal maybe_committed
            try:
                self._z.wait(self._zk.delete_async(path))
            except _MAYBE_COMMITTED:
                maybe_committed = True
                raise
            except NoNodeError:
                return maybe_committed  # gone: by our own delete whose answer was lost, or never there
            return True

        return self._call(op)

    def pushes(self) -> list[PushRecord]:
        def op() -> list[PushRecord]:
            base = self._p("pushes")
            return [PushRecord(**d) for d in self._read_all([f"{base}/{_seg(p)}" for p in self._children(base)])]

        return self._call(op)
