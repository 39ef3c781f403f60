"""The `zookeeper` metadata store, on kazoo.

Layout under the chroot (Kafka's paths where Kafka has one)::

    /cluster/id                                   {"version": "1", "id": "..."}
    /brokers/ids/{id}                             ephemeral: host, port, rack, endpoints
    /controller                                   ephemeral: {"version": 1, "brokerid": id, ...}
    /brokers/topics/{name}                        {"version": 1, "topic_id": ..., "configs": {...}}
    /brokers/topics/{name}/partitions/{p}/state   the PartitionState as JSON
    /metadata_version                             rewritten in the same transaction as every change
    /producer_id_block                            {"version": 1, "next": N}

Liveness is the ZooKeeper session: a broker is live while its ephemeral registration exists;
the controller lease is the ephemeral `/controller` node. `close()` ends the session, so the
registration and the lease vanish at once; a crashed process loses them when its session
expires (the session timeout).

Every change is one ZooKeeper transaction that also rewrites `/metadata_version`; a partition
update checks the state znode's version in that transaction after reading the stored
partition_epoch, so of two writers expecting the same epoch exactly one wins.

`version()` is local and costs no round trip: a counter in this store object that grows on
every change this object makes, and, through watches, whenever `/metadata_version`, the
children of `/brokers/ids` (liveness) or `/controller` change, and on every connection state
change. It moves within milliseconds of a change made elsewhere (when the watch fires), only
grows, and is comparable only with earlier values from the same store object.

Connection loss: kazoo reconnects by itself; every request waits at most `max(2 s, session
timeout)` for its answer, and each operation is retried on connection loss for up to
`max(10 s, 2 × session timeout)` and then raises `MetadataStoreUnavailableError`. If the
session expired meanwhile, the next `heartbeat` writes the registration again. A start that
cannot reach the ensemble within `connect_timeout` raises `MetadataStoreUnavailableError`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry, RetryFailedError

from logbus.broker.topics import PartitionState, TopicState
from logbus.cluster.local_store import new_cluster_id
from logbus.cluster.store import BrokerRegistration, MetadataStore, TopicExistsError, UnknownTopicError

T = TypeVar("T")


class MetadataStoreUnavailableError(ConnectionError):
    """The ZooKeeper ensemble could not be reached within the bound."""


# A commit that raised one of these may or may not have been applied.
_MAYBE_COMMITTED = (ConnectionLoss, OperationTimeoutError, SessionExpiredError)


def _dump(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def start_client(hosts: str, session_timeout: float, connect_timeout: float) -> KazooClient:
    """A started kazoo client that reconnects by itself; MetadataStoreUnavailableError when the ensemble does not
    answer within `connect_timeout` seconds."""
    zk = KazooClient(hosts=hosts, timeout=session_timeout,
                     connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0))
    try:
        zk.start(timeout=connect_timeout)
    except KazooTimeoutError:
        stop_client(zk)
        raise MetadataStoreUnavailableError(f"ZooKeeper ensemble {hosts} did not answer within {connect_timeout:g} s") from None
    return zk


def stop_client(zk: KazooClient) -> None:
    """End the session and release the client's resources."""
    try:
        zk.stop()
    finally:
        zk.close()


class ZooKeeperMetadataStore(MetadataStore):
    def __init__(self, hosts: str, chroot: str = "/logbus", session_timeout_ms: int = 6000, *, connect_timeout: float = 15.0) -> None:
        self.hosts = hosts
        self.root = "/" + chroot.strip("/") if chroot.strip("/") else ""
        self.session_timeout = session_timeout_ms / 1000.0
        self.retry_deadline = max(10.0, 2 * self.session_timeout)
        self.op_timeout = max(2.0, self.session_timeout)
        self._zk = start_client(hosts, self.session_timeout, connect_timeout)
        self._z = _Bounded(self._zk, self.op_timeout)
        self._lock = threading.Lock()
        self._closed = False
        self._counter = 0
        self._registered: dict[int, BrokerRegistration] = {}
        self._zk.add_listener(self._on_state)
        for path in ("/brokers/ids", "/brokers/topics", "/cluster"):
            self._call(self._z.ensure_path, self._p(path))
        try:
            self._call(self._z.create, self._p("/metadata_version"), b"0")
        except NodeExistsError:
            pass
        self._zk.DataWatch(self._p("/metadata_version"), self._on_watch)
        self._zk.DataWatch(self._p("/controller"), self._on_watch)
        self._zk.ChildrenWatch(self._p("/brokers/ids"), self._on_watch)

    # --- plumbing -------------------------------------------------------------------------
    def _p(self, path: str) -> str:
        return self.root + path

    def _bump_local(self) -> None:
        with self._lock:
            self._counter += 1

    def _on_watch(self, *args: Any) -> None:
        self._bump_local()

    def _on_state(self, state: str) -> None:
        self._bump_local()

    def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        retry = KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0, deadline=self.retry_deadline, ignore_expire=True)
        try:
            return retry(fn, *args, **kwargs)
        except RetryFailedError:
            raise MetadataStoreUnavailableError(
                f"ZooKeeper ensemble {self.hosts} unreachable for {self.retry_deadline:g} s"
            ) from None

    def _commit(self, build: Callable[[Any], None]) -> None:
        """One transaction that also rewrites /metadata_version; raises the first real error."""
        t = self._zk.transaction()
        build(t)
        t.set_data(self._p("/metadata_version"), str(int(time.time() * 1000)).encode())
        results = self._z.wait(t.commit_async())
        errors = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if errors:
            raise errors[0]
        self._bump_local()

    def _session_id(self) -> int:
        cid = self._zk.client_id
        return cid[0] if cid else -1

    # --- identity ------------------------------------------------------------------------
    def cluster_id(self) -> str:
        path = self._p("/cluster/id")

        def op() -> str:
            try:
                data, _ = self._z.get(path)
            except NoNodeError:
                try:
                    self._z.create(path, _dump({"version": "1", "id": new_cluster_id()}))
                except NodeExistsError:
                    pass
                data, _ = self._z.get(path)
            return json.loads(data)["id"]

        return self._call(op)

    # --- brokers and liveness -----------------------------------------------------------
    @staticmethod
    def _registration_bytes(r: BrokerRegistration) -> bytes:
        return _dump(
            {
                "version": 5,
                "host": r.host,
                "port": r.port,
                "rack": r.rack,
                "endpoints": [f"PLAINTEXT://{r.host}:{r.port}"],
                "timestamp": str(int(time.time() * 1000)),
            }
        )

    def register_broker(self, registration: BrokerRegistration) -> None:
        """Creates the ephemeral registration; an existing one (this broker id restarted while its
        old session has not expired yet, or a re-registration) is replaced in the same transaction."""
        path = self._p(f"/brokers/ids/{registration.broker_id}")
        data = self._registration_bytes(registration)

        def op() -> None:
            stat = self._z.exists(path)

            def build(t: Any) -> None:
                if stat is not None:
                    t.delete(path, version=stat.version)
                t.create(path, data, ephemeral=True)

            try:
                self._commit(build)
            except (NodeExistsError, NoNodeError, BadVersionError):
                raise _Retry from None

        self._retry_on_race(op)
        self._registered[registration.broker_id] = registration

    def _retry_on_race(self, op: Callable[[], T], attempts: int = 50) -> T:
        for _ in range(attempts - 1):
            try:
                return self._call(op)
            except _Retry:
                time.sleep(0.01)
        return self._call(op)

    def heartbeat(self, broker_id: int) -> None:
        """Liveness is the session; this checks the registration is still there and writes it again
        if the session was lost and renewed since (only for a broker this object registered)."""
        reg = self._registered.get(broker_id)
        if reg is None:
            return
        path = self._p(f"/brokers/ids/{broker_id}")
        stat = self._call(self._z.exists, path)
        if stat is None or stat.ephemeralOwner != self._session_id():
            self.register_broker(reg)

    def unregister_broker(self, broker_id: int) -> None:
        self._registered.pop(broker_id, None)
        path = self._p(f"/brokers/ids/{broker_id}")

        def op() -> None:
            stat = self._z.exists(path)
            holder = self._controller_node()
            if stat is None and holder is None:
                return

            def build(t: Any) -> None:
                if stat is not None:
                    t.delete(path, version=stat.version)
                if holder is not None and holder[0] == broker_id:
                    t.delete(self._p("/controller"), version=holder[1])

            try:
                self._commit(build)
            except (NoNodeError, BadVersionError):
                raise _Retry from None

        self._retry_on_race(op)

    def live_brokers(self) -> dict[int, BrokerRegistration]:
        base = self._p("/brokers/ids")

        def op() -> dict[int, BrokerRegistration]:
            ids = sorted(int(c) for c in self._z.get_children(base))
            asyncs = [(i, self._zk.get_async(f"{base}/{i}")) for i in ids]
            out = {}
            for i, a in asyncs:
                try:
                    data, _ = self._z.wait(a)
                except NoNodeError:
                    continue
                d = json.loads(data)
                out[i] = BrokerRegistration(i, d["host"], d["port"], d.get("rack"))
            return out

        return self._call(op)

    # --- controller lease -------------------------------------------------------------
    def _controller_node(self) -> tuple[int, int, int] | None:
        """(broker id, znode version, session owner) of /controller, or None."""
        try:
            data, stat = self._z.get(self._p("/controller"))
        except NoNodeError:
            return None
        return json.loads(data)["brokerid"], stat.version, stat.ephemeralOwner

    def try_acquire_controller(self, broker_id: int) -> bool:
        """Creates the ephemeral /controller node, or checks that this session holds it for
        `broker_id`. The caller must be registered (live); otherwise False."""
        reg_path = self._p(f"/brokers/ids/{broker_id}")
        data = _dump({"version": 1, "brokerid": broker_id, "timestamp": str(int(time.time() * 1000))})

        def op() -> bool:
            holder = self._controller_node()
            if holder is not None:
                return holder[0] == broker_id and holder[2] == self._session_id()
            reg = self._z.exists(reg_path)
            if reg is None:
                return False

            def build(t: Any) -> None:
                t.check(reg_path, reg.version)
                t.create(self._p("/controller"), data, ephemeral=True)

            try:
                self._commit(build)
            except NodeExistsError:
                raise _Retry from None  # someone else (or our retried create) got there: look again
            except (NoNodeError, BadVersionError):
                return False
            return True

        return self._retry_on_race(op)

    def controller_id(self) -> int | None:
        def op() -> int | None:
            holder = self._controller_node()
            if holder is None or self._z.exists(self._p(f"/brokers/ids/{holder[0]}")) is None:
                return None
            return holder[0]

        return self._call(op)

    def resign_controller(self, broker_id: int) -> None:
        def op() -> None:
            holder = self._controller_node()
            if holder is None or holder[0] != broker_id:
                return
            try:
                self._commit(lambda t: t.delete(self._p("/controller"), version=holder[1]))
            except (NoNodeError, BadVersionError):
                raise _Retry from None

        self._retry_on_race(op)

    # --- topics and partitions --------------------------------------------------------
    def _topic_path(self, name: str) -> str:
        return self._p(f"/brokers/topics/{name}")

    def _state_path(self, name: str, p: int) -> str:
        return self._p(f"/brokers/topics/{name}/partitions/{p}/state")

    def _read_topics(self) -> dict[str, TopicState]:
        base = self._p("/brokers/topics")
        names = sorted(self._z.get_children(base))
        tops = {n: self._zk.get_async(f"{base}/{n}") for n in names}
        parts = {n: self._zk.get_children_async(f"{base}/{n}/partitions") for n in names}
        out: dict[str, TopicState] = {}
        states: dict[str, list] = {}
        for n in names:
            try:
                data, _ = self._z.wait(tops[n])
                children = self._z.wait(parts[n])
            except NoNodeError:
                continue
            d = json.loads(data)
            out[n] = TopicState(n, d["topic_id"], [], d.get("configs", {}))
            states[n] = [self._zk.get_async(self._state_path(n, int(p))) for p in sorted(children, key=int)]
        for n, asyncs in states.items():
            for a in asyncs:
                try:
                    data, _ = self._z.wait(a)
                except NoNodeError:
                    continue
                out[n].partitions.append(PartitionState(**json.loads(data)))
        return out

    def topics(self) -> dict[str, TopicState]:
        """A snapshot taken between two reads of /metadata_version that agree (every change
        rewrites it), so no change happened in between; up to 20 tries, then the last read."""
        mv = self._p("/metadata_version")

        def op() -> dict[str, TopicState]:
            result: dict[str, TopicState] = {}
            for _ in range(20):
                before = self._z.exists(mv)
                result = self._read_topics()
                after = self._z.exists(mv)
                if before is not None and after is not None and before.version == after.version:
                    return result
            return result

        return self._call(op)

    def _build_partitions(self, t: Any, name: str, partitions: list[PartitionState]) -> None:
        for p in partitions:
            t.create(self._p(f"/brokers/topics/{name}/partitions/{p.partition}"), b"")
            t.create(self._state_path(name, p.partition), _dump(asdict(p)))

    def create_topic(self, topic: TopicState) -> None:
        path = self._topic_path(topic.name)
        data = _dump({"version": 1, "topic_id": topic.topic_id, "configs": topic.configs})

        def op() -> None:
            def build(t: Any) -> None:
                t.create(path, data)
                t.create(path + "/partitions", b"")
                self._build_partitions(t, topic.name, topic.partitions)

            try:
                self._commit(build)
            except NodeExistsError:
                try:
                    stored, _ = self._z.get(path)
                except NoNodeError:
                    raise _Retry from None
                if json.loads(stored)["topic_id"] == topic.topic_id:
                    return  # our own commit, whose answer was lost on a connection loss
                raise TopicExistsError(f"Topic '{topic.name}' already exists.") from None

        self._retry_on_race(op)

    def delete_topic(self, name: str) -> None:
        path = self._topic_path(name)
        maybe_committed = False

        def op() -> None:
            nonlocal maybe_committed
            try:
                parts = self._z.get_children(path + "/partitions")
            except NoNodeError:
                if self._z.exists(path) is None:
                    if maybe_committed:
                        return  # our own commit, whose answer was lost
                    raise UnknownTopicError(name) from None
                parts = []

            def build(t: Any) -> None:
                for p in parts:
                    t.delete(self._state_path(name, int(p)))
                    t.delete(f"{path}/partitions/{p}")
                if self._z.exists(path + "/partitions") is not None:
                    t.delete(path + "/partitions")
                t.delete(path)

            try:
                self._commit(build)
            except _MAYBE_COMMITTED:
                maybe_committed = True
                raise
            except (NotEmptyError, NoNodeError):
                raise _Retry from None

        self._retry_on_race(op)

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        path = self._topic_path(name)

        def op() -> None:
            try:
                data, stat = self._z.get(path)
            except NoNodeError:
                raise UnknownTopicError(name) from None
            d = json.loads(data)
            d["configs"] = dict(configs)
            try:
                self._commit(lambda t: t.set_data(path, _dump(d), version=stat.version))
            except (BadVersionError, NoNodeError):
                raise _Retry from None

        self._retry_on_race(op)

    def add_partitions(self, name: str, partitions: list[PartitionState]) -> None:
        """ValueError if the new indexes do not follow the existing ones (nothing is written)."""
        path = self._topic_path(name)
        maybe_committed = False

        def op() -> None:
            nonlocal maybe_committed
            try:
                _, stat = self._z.get(path)
                existing = len(self._z.get_children(path + "/partitions"))
            except NoNodeError:
                raise UnknownTopicError(name) from None
            want = list(range(existing, existing + len(partitions)))
            if [p.partition for p in partitions] != want:
                if maybe_committed and partitions and existing == partitions[-1].partition + 1:
                    return  # our own commit, whose answer was lost
                raise ValueError(f"new partitions of {name} must be numbered {want}, not {[p.partition for p in partitions]}")

            def build(t: Any) -> None:
                t.check(path, stat.version)
                self._build_partitions(t, name, partitions)

            try:
                self._commit(build)
            except _MAYBE_COMMITTED:
                maybe_committed = True
                raise
            except (NodeExistsError, BadVersionError, NoNodeError):
                raise _Retry from None

        self._retry_on_race(op)

    def update_partition(self, topic: str, state: PartitionState, expected_partition_epoch: int) -> bool:
        """UnknownTopicError if the topic or the partition does not exist."""
        path = self._state_path(topic, state.partition)
        new = asdict(state)
        new["partition_epoch"] = expected_partition_epoch + 1
        maybe_committed = False

        def op() -> bool:
            nonlocal maybe_committed
            try:
                data, stat = self._z.get(path)
            except NoNodeError:
                raise UnknownTopicError(f"{topic}-{state.partition}") from None
            stored = json.loads(data)
            if stored["partition_epoch"] != expected_partition_epoch:
                # After a lost answer to our own commit, the stored state is exactly ours.
                return maybe_committed and stored == new
            try:
                self._commit(lambda t: t.set_data(path, _dump(new), version=stat.version))
            except _MAYBE_COMMITTED:
                maybe_committed = True
                raise
            except BadVersionError:
                raise _Retry from None  # changed since we read it: read the epoch again
            except NoNodeError:
                raise UnknownTopicError(f"{topic}-{state.partition}") from None
            return True

        won = self._retry_on_race(op)
        if won:
            state.partition_epoch = expected_partition_epoch + 1
        return won

    # --- change detection and ids ------------------------------------------------------
    def version(self) -> int:
        with self._lock:
            return self._counter

    def allocate_producer_ids(self, count: int) -> int:
        if count < 1:
            raise ValueError(f"count must be at least 1, not {count}")
        path = self._p("/producer_id_block")

        def op() -> int:
            try:
                data, stat = self._z.get(path)
            except NoNodeError:
                try:
                    self._z.create(path, _dump({"version": 1, "next": count}))
                    return 0
                except NodeExistsError:
                    raise _Retry from None
            first = json.loads(data)["next"]
            try:
                self._z.set(path, _dump({"version": 1, "next": first + count}), version=stat.version)
            except BadVersionError:
                raise _Retry from None
            return first

        return self._retry_on_race(op, attempts=1000)

    def close(self) -> None:
        """Ends the session (idempotent): the registration and a held lease vanish at once."""
        if self._closed:
            return
        self._closed = True
        stop_client(self._zk)


class _Bounded:
    """kazoo's calls with a bound: a request queued while the connection is down would otherwise
    wait for the ensemble forever. No answer within `timeout` counts as a connection loss (the
    request may still run later, like any request whose answer was lost)."""

    def __init__(self, zk: KazooClient, timeout: float) -> None:
        self.zk = zk
        self.timeout = timeout

    def wait(self, result: Any) -> Any:
        try:
            return result.get(timeout=self.timeout)
        except KazooTimeoutError:
            raise ConnectionLoss(f"no answer from ZooKeeper within {self.timeout:g} s") from None

    def get(self, path: str) -> Any:
        return self.wait(self.zk.get_async(path))

    def exists(self, path: str) -> Any:
        return self.wait(self.zk.exists_async(path))

    def get_children(self, path: str) -> list[str]:
        return self.wait(self.zk.get_children_async(path))

    def create(self, path: str, value: bytes = b"", ephemeral: bool = False) -> str:
        return self.wait(self.zk.create_async(path, value, ephemeral=ephemeral))

    def set(self, path: str, value: bytes, version: int = -1) -> Any:
        return self.wait(self.zk.set_async(path, value, version=version))

    def ensure_path(self, path: str) -> Any:
        return self.wait(self.zk.ensure_path_async(path))


class _Retry(Exception):
    """A compare-and-set lost a race with another writer: read again and retry."""
