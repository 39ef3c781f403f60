"""The ZooKeeper metadata store against a real ZooKeeper server (Debian's zookeeper package):
the shared store suite, plus what only sessions and ephemeral nodes give."""

from __future__ import annotations

import socket
import time
import uuid

import pytest
from store_suite import *  # noqa: F401,F403 - the shared behavioural suite
from store_suite import SHORT_SESSION_MS, make_topic, reg, wait_until
from zkserver import zookeeper  # noqa: F401 - the fixture

from logbus.cluster.store import open_store
from logbus.cluster.zk_store import MetadataStoreUnavailableError, ZooKeeperMetadataStore


@pytest.fixture
def chroot():
    return f"/logbus-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def make_store(zookeeper, chroot):  # noqa: F811 - the fixture imported above
    opened: list[ZooKeeperMetadataStore] = []

    def make(session_timeout_ms: int = 6000) -> ZooKeeperMetadataStore:
        s = ZooKeeperMetadataStore(zookeeper, chroot, session_timeout_ms=session_timeout_ms)
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


def test_open_store_url(zookeeper):  # noqa: F811
    s = open_store(f"zk://{zookeeper}/urltest", session_timeout_ms=2000)
    try:
        assert isinstance(s, ZooKeeperMetadataStore)
        assert s.root == "/urltest"
        s.create_topic(make_topic("t", 1))
        assert list(s.topics()) == ["t"]
    finally:
        s.close()


def test_chroots_are_separate_clusters(zookeeper):  # noqa: F811
    a = ZooKeeperMetadataStore(zookeeper, "/c1-" + uuid.uuid4().hex[:6])
    b = ZooKeeperMetadataStore(zookeeper, "/c2-" + uuid.uuid4().hex[:6])
    try:
        a.register_broker(reg(1))
        a.create_topic(make_topic("t", 1))
        assert b.live_brokers() == {} and b.topics() == {}
        assert a.cluster_id() != b.cluster_id()
    finally:
        a.close()
        b.close()


def test_close_ends_liveness_and_controller_at_once(make_store):
    """ZooKeeper ends a closed session's ephemeral nodes immediately, not after the timeout."""
    a = make_store(session_timeout_ms=6000)
    b = make_store(session_timeout_ms=6000)
    a.register_broker(reg(1))
    b.register_broker(reg(2))
    assert a.try_acquire_controller(1)
    t0 = time.monotonic()
    a.close()
    assert sorted(b.live_brokers()) == [2]
    assert b.controller_id() is None
    assert b.try_acquire_controller(2)
    assert time.monotonic() - t0 < 3


def test_restarted_broker_reregisters_over_its_old_session(make_store):
    """A broker killed and restarted before its old session expired registers again at once."""
    old = make_store(session_timeout_ms=6000)
    old.register_broker(reg(1, port=1111))
    new = make_store(session_timeout_ms=6000)
    new.register_broker(reg(1, port=2222))
    assert new.live_brokers() == {1: reg(1, port=2222)}
    # The old session closing must not remove the new registration.
    old.close()
    time.sleep(0.2)
    assert new.live_brokers() == {1: reg(1, port=2222)}


def test_lease_holder_is_tied_to_its_session(make_store):
    a = make_store()
    b = make_store()
    a.register_broker(reg(1))
    assert a.try_acquire_controller(1)
    # Another session claiming to be broker 1 does not hold the lease.
    assert not b.try_acquire_controller(1)
    assert b.controller_id() == 1


def test_unreachable_ensemble_fails_within_bound():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket is closed
    t0 = time.monotonic()
    with pytest.raises(MetadataStoreUnavailableError, match=f"127.0.0.1:{port}"):
        ZooKeeperMetadataStore(f"127.0.0.1:{port}", "/x", connect_timeout=2)
    assert time.monotonic() - t0 < 6


def test_session_timeout_is_honoured(make_store):
    a = make_store(session_timeout_ms=SHORT_SESSION_MS)
    b = make_store(session_timeout_ms=SHORT_SESSION_MS)
    a.register_broker(reg(1))
    b.register_broker(reg(2))
    wait_until(lambda: sorted(b.live_brokers()) == [1, 2], timeout=5)
    # Sessions stay alive without any call from the broker (kazoo pings).
    time.sleep(3 * SHORT_SESSION_MS / 1000)
    assert sorted(b.live_brokers()) == [1, 2]


def test_session_loss_is_repaired_by_heartbeat(make_store, zookeeper):  # noqa: F811
    """When ZooKeeper expires a broker's session (a long pause), its registration and lease are
    gone; kazoo opens a new session and the next heartbeat registers the broker again."""
    from kazoo.client import KazooClient

    a = make_store(session_timeout_ms=2000)
    b = make_store(session_timeout_ms=2000)
    a.register_broker(reg(1, "west"))
    assert a.try_acquire_controller(1)
    old_session = a._zk.client_id
    # Close the session from another connection that borrows its id: the server expires it.
    thief = KazooClient(hosts=zookeeper, client_id=old_session)
    thief.start(timeout=10)
    thief.stop()
    thief.close()
    wait_until(lambda: 1 not in b.live_brokers(), timeout=10, what="registration gone with the session")
    assert b.controller_id() is None
    wait_until(lambda: a._zk.connected and a._zk.client_id[0] != old_session[0], timeout=10, what="a new session")
    a.heartbeat(1)
    assert b.live_brokers() == {1: reg(1, "west")}
    assert a.try_acquire_controller(1)
    assert b.controller_id() == 1


def test_operations_ride_out_a_server_restart(tmp_path):
    """A call made while the server is down waits (bounded) and completes after it returns; the
    session survives a short outage, so the registration is still there."""
    import threading

    from zkserver import ZooKeeperServer

    server = ZooKeeperServer(tmp_path / "zk").start()
    store = ZooKeeperMetadataStore(server.hosts, "/restart", session_timeout_ms=8000)
    restarted = ZooKeeperServer(tmp_path / "zk", port=server.port)
    other = None
    try:
        store.register_broker(reg(1))
        store.create_topic(make_topic("t", 1))
        server.stop()
        result: dict = {}

        def during_outage():
            try:
                state = store.topics()["t"].partitions[0]
                result["won"] = store.update_partition("t", state, 0)
            except BaseException as e:  # noqa: BLE001 - reported below
                result["error"] = e

        t = threading.Thread(target=during_outage)
        t.start()
        time.sleep(1.5)
        assert t.is_alive()  # waiting for the ensemble, not failing at once
        restarted.start()
        t.join(timeout=30)
        assert not t.is_alive()
        assert result == {"won": True}
        other = ZooKeeperMetadataStore(server.hosts, "/restart")
        assert other.topics()["t"].partitions[0].partition_epoch == 1
        assert sorted(other.live_brokers()) == [1]
    finally:
        store.close()
        if other is not None:
            other.close()
        server.stop()
        restarted.stop()


def test_calls_fail_clearly_when_the_ensemble_stays_down(tmp_path):
    from zkserver import ZooKeeperServer

    server = ZooKeeperServer(tmp_path / "zk").start()
    store = ZooKeeperMetadataStore(server.hosts, "/down", session_timeout_ms=2000)
    try:
        server.stop()
        t0 = time.monotonic()
        with pytest.raises(MetadataStoreUnavailableError, match="unreachable"):
            store.topics()
        assert time.monotonic() - t0 < store.retry_deadline + 5
    finally:
        store.close()
