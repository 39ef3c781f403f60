"""The local (SQLite) metadata store: the shared store suite, expiry by missing heartbeats, and a
real two-process compare-and-set race on one file."""

from __future__ import annotations

import multiprocessing
import time

import pytest
from store_suite import *  # noqa: F401,F403 - the shared behavioural suite
from store_suite import SHORT_SESSION_MS, cas_increment, make_topic, reg, wait_until

from logbus.cluster.local_store import LocalMetadataStore
from logbus.cluster.store import open_store


@pytest.fixture
def make_store(tmp_path):
    opened: list[LocalMetadataStore] = []
    path = tmp_path / "metadata.db"

    def make(session_timeout_ms: int = 6000) -> LocalMetadataStore:
        s = LocalMetadataStore(path, session_timeout_ms=session_timeout_ms)
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


def test_open_store_url(tmp_path):
    s = open_store(f"local://{tmp_path}/sub/m.db", session_timeout_ms=1234)
    try:
        assert isinstance(s, LocalMetadataStore)
        assert s.session_timeout == 1.234
        assert (tmp_path / "sub" / "m.db").exists()
    finally:
        s.close()


def test_liveness_lapses_without_heartbeats(make_store):
    a = make_store(session_timeout_ms=SHORT_SESSION_MS)
    b = make_store(session_timeout_ms=SHORT_SESSION_MS)
    a.register_broker(reg(1))
    b.register_broker(reg(2))
    # Heartbeats keep broker 1 live well past one session timeout.
    end = time.monotonic() + 2.5 * SHORT_SESSION_MS / 1000
    while time.monotonic() < end:
        a.heartbeat(1)
        b.heartbeat(2)
        assert sorted(b.live_brokers()) == [1, 2]
        time.sleep(0.1)
    # Broker 1 stops; broker 2 goes on.
    t0 = time.monotonic()
    wait_until(lambda: b.heartbeat(2) or sorted(b.live_brokers()) == [2], timeout=5, what="broker 1 lapses")
    assert time.monotonic() - t0 >= SHORT_SESSION_MS / 1000 - 0.3
    # A heartbeat brings a lapsed (not unregistered) broker back.
    a.heartbeat(1)
    assert sorted(b.live_brokers()) == [1, 2]


def test_controller_lease_taken_over_after_expiry(make_store):
    a = make_store(session_timeout_ms=SHORT_SESSION_MS)
    b = make_store(session_timeout_ms=SHORT_SESSION_MS)
    a.register_broker(reg(1))
    b.register_broker(reg(2))
    assert a.try_acquire_controller(1)
    # Heartbeats renew the lease beyond its first term.
    end = time.monotonic() + 2 * SHORT_SESSION_MS / 1000
    while time.monotonic() < end:
        a.heartbeat(1)
        b.heartbeat(2)
        assert not b.try_acquire_controller(2)
        time.sleep(0.1)
    assert b.controller_id() == 1
    # Broker 1 hangs (no heartbeats): after the session timeout broker 2 takes over.
    t0 = time.monotonic()
    wait_until(lambda: b.heartbeat(2) or b.try_acquire_controller(2), timeout=5, what="takeover")
    assert time.monotonic() - t0 >= SHORT_SESSION_MS / 1000 - 0.3
    assert a.controller_id() == 2
    # The old holder comes back: it is live again but the lease stays with broker 2.
    a.heartbeat(1)
    assert not a.try_acquire_controller(1)
    assert a.controller_id() == 2


def test_heartbeat_rewrites_a_registration_lost_by_this_object(make_store):
    a, b = make_store(), make_store()
    a.register_broker(reg(1, "west"))
    # Somebody removed the row (e.g. an operator, or a wiped file): a's next heartbeat restores it.
    b.unregister_broker(1)
    assert b.live_brokers() == {}
    a.heartbeat(1)
    assert b.live_brokers() == {1: reg(1, "west")}


def test_state_survives_reopening(tmp_path):
    path = tmp_path / "m.db"
    s = LocalMetadataStore(path)
    cid = s.cluster_id()
    t = make_topic("t", 2)
    s.create_topic(t)
    first = s.allocate_producer_ids(5)
    s.close()
    s = LocalMetadataStore(path)
    try:
        assert s.cluster_id() == cid
        assert s.topics() == {"t": t}
        assert s.allocate_producer_ids(5) == first + 5
    finally:
        s.close()


def _cas_worker(path: str, times: int, out) -> None:
    store = LocalMetadataStore(path)
    try:
        out.put(("ok", cas_increment(store, "counter", 0, times)))
    except BaseException as e:  # noqa: BLE001 - sent to the parent
        out.put(("error", repr(e)))
    finally:
        store.close()


def test_two_processes_cas_increment_without_lost_updates(tmp_path):
    path = str(tmp_path / "m.db")
    s = LocalMetadataStore(path)
    s.create_topic(make_topic("counter", 1))
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_cas_worker, args=(path, 200, out)) for _ in range(2)]
    for p in procs:
        p.start()
    try:
        results = [out.get(timeout=120) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert [r[0] for r in results] == ["ok", "ok"], results
    state = s.topics()["counter"].partitions[0]
    s.close()
    assert state.leader_epoch == 400
    assert state.partition_epoch == 400
