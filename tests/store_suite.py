"""Behaviour every MetadataStore backend must have, run against each backend.

A test module imports these tests with `from store_suite import *` and defines the fixture
`make_store`: `make_store(session_timeout_ms=6000)` opens a new store object on the same metadata
(as another broker process would); the fixture closes them all at the end. Every wait is bounded.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from logbus.broker.topics import PartitionState, TopicState
from logbus.cluster.store import BrokerRegistration, TopicExistsError, UnknownTopicError

SHORT_SESSION_MS = 1000

__all__ = [
    "wait_until",
    "make_topic",
    "cas_increment",
    "test_cluster_id_is_created_once",
    "test_registration_is_seen_by_another_store",
    "test_reregistering_replaces_the_entry",
    "test_unregister_ends_liveness_at_once",
    "test_closed_store_loses_liveness_and_controller",
    "test_controller_lease_is_exclusive_and_renewable",
    "test_controller_needs_a_live_caller",
    "test_resign_lets_another_take_over",
    "test_unregister_gives_up_the_controller_lease",
    "test_topics_crud",
    "test_add_partitions_must_follow_existing",
    "test_cas_only_one_of_two_updaters_wins",
    "test_cas_unknown_partition",
    "test_concurrent_cas_increments_lose_nothing",
    "test_version_moves_on_every_change",
    "test_producer_id_blocks_are_unique",
]


def wait_until(cond, timeout: float = 10.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout} s")
        time.sleep(interval)


def make_topic(name: str = "t1", partitions: int = 2, replicas=(1, 2, 3), configs=None) -> TopicState:
    r = list(replicas)
    return TopicState(
        name=name,
        topic_id=str(uuid.uuid4()),
        partitions=[PartitionState(p, r[p % len(r)], 0, r, r) for p in range(partitions)],
        configs=dict(configs or {}),
    )


def reg(broker_id: int, rack: str | None = None, port: int | None = None) -> BrokerRegistration:
    return BrokerRegistration(broker_id, "127.0.0.1", port or 9090 + broker_id, rack)


def cas_increment(store, topic: str, partition: int, times: int) -> int:
    """Increment the partition's leader_epoch `times` times by compare-and-set; returns lost races."""
    lost = 0
    for _ in range(times):
        while True:
            state = store.topics()[topic].partitions[partition]
            expected = state.partition_epoch
            state.leader_epoch += 1
            if store.update_partition(topic, state, expected):
                break
            lost += 1
    return lost


# --- identity, registration, liveness --------------------------------------------------------


def test_cluster_id_is_created_once(make_store):
    a, b = make_store(), make_store()
    cid = a.cluster_id()
    assert len(cid) == 22
    assert b.cluster_id() == cid
    assert a.cluster_id() == cid


def test_registration_is_seen_by_another_store(make_store):
    a, b = make_store(), make_store()
    a.register_broker(reg(1, "west"))
    b.register_broker(reg(2, None))
    for s in (a, b):
        live = s.live_brokers()
        assert live == {1: reg(1, "west"), 2: reg(2, None)}


def test_reregistering_replaces_the_entry(make_store):
    a, b = make_store(), make_store()
    a.register_broker(reg(1, "west"))
    a.register_broker(reg(1, "east", port=7777))
    assert b.live_brokers() == {1: reg(1, "east", port=7777)}
    # The same broker id restarting elsewhere (a new process) takes the entry over.
    b.register_broker(reg(1, "north", port=8888))
    assert a.live_brokers() == {1: reg(1, "north", port=8888)}


def test_unregister_ends_liveness_at_once(make_store):
    a, b = make_store(), make_store()
    a.register_broker(reg(1))
    b.register_broker(reg(2))
    a.unregister_broker(1)
    assert sorted(b.live_brokers()) == [2]
    a.heartbeat(1)  # a heartbeat after a clean shutdown does not bring it back
    assert sorted(b.live_brokers()) == [2]


def test_closed_store_loses_liveness_and_controller(make_store):
    """A broker whose store is closed (its process is gone) stops being live within the session
    timeout, its controller lease goes with it, and another broker takes the lease over."""
    a = make_store(session_timeout_ms=SHORT_SESSION_MS)
    b = make_store(session_timeout_ms=SHORT_SESSION_MS)
    a.register_broker(reg(1))
    b.register_broker(reg(2))
    assert a.try_acquire_controller(1)
    assert not b.try_acquire_controller(2)
    assert b.controller_id() == 1
    a.close()
    t0 = time.monotonic()

    def b_alive_alone():
        b.heartbeat(2)
        return sorted(b.live_brokers()) == [2]

    wait_until(b_alive_alone, timeout=SHORT_SESSION_MS / 1000 + 5, what="broker 1 no longer live")
    wait_until(lambda: b.heartbeat(2) or b.controller_id() is None, timeout=5, what="lease of broker 1 gone")
    assert b.try_acquire_controller(2)
    assert b.controller_id() == 2
    assert time.monotonic() - t0 < SHORT_SESSION_MS / 1000 + 5


# --- controller lease ----------------------------------------------------------------------


def test_controller_lease_is_exclusive_and_renewable(make_store):
    a, b = make_store(), make_store()
    assert a.controller_id() is None
    a.register_broker(reg(1))
    b.register_broker(reg(2))
    assert a.try_acquire_controller(1)
    assert not b.try_acquire_controller(2)
    assert a.try_acquire_controller(1)  # renew
    assert a.controller_id() == b.controller_id() == 1
    b.resign_controller(2)  # not the holder: nothing happens
    assert b.controller_id() == 1


def test_controller_needs_a_live_caller(make_store):
    a = make_store()
    assert not a.try_acquire_controller(5)
    assert a.controller_id() is None


def test_resign_lets_another_take_over(make_store):
    a, b = make_store(), make_store()
    a.register_broker(reg(1))
    b.register_broker(reg(2))
    assert a.try_acquire_controller(1)
    a.resign_controller(1)
    assert b.controller_id() is None
    assert b.try_acquire_controller(2)
    assert not a.try_acquire_controller(1)
    assert a.controller_id() == 2


def test_unregister_gives_up_the_controller_lease(make_store):
    a, b = make_store(), make_store()
    a.register_broker(reg(1))
    b.register_broker(reg(2))
    assert a.try_acquire_controller(1)
    a.unregister_broker(1)
    assert b.controller_id() is None
    assert b.try_acquire_controller(2)


# --- topics and partitions ---------------------------------------------------------------


def test_topics_crud(make_store):
    a, b = make_store(), make_store()
    assert a.topics() == {}
    t1 = make_topic("t1", 3, configs={"retention.ms": "1000"})
    t2 = make_topic("t2", 1, replicas=(2,))
    a.create_topic(t1)
    a.create_topic(t2)
    assert b.topics() == {"t1": t1, "t2": t2}
    with pytest.raises(TopicExistsError):
        b.create_topic(make_topic("t1", 1))
    assert b.topics()["t1"] == t1

    b.set_topic_configs("t1", {"cleanup.policy": "compact"})
    assert a.topics()["t1"].configs == {"cleanup.policy": "compact"}
    with pytest.raises(UnknownTopicError):
        b.set_topic_configs("nope", {})

    new = [PartitionState(3, 2, 0, [2, 3, 1], [2, 3, 1]), PartitionState(4, 3, 0, [3, 1, 2], [3, 1, 2], observers=[])]
    a.add_partitions("t1", new)
    parts = b.topics()["t1"].partitions
    assert [p.partition for p in parts] == [0, 1, 2, 3, 4]
    assert parts[3:] == new
    with pytest.raises(UnknownTopicError):
        a.add_partitions("nope", [PartitionState(0, 1, 0, [1], [1])])

    a.delete_topic("t1")
    assert list(b.topics()) == ["t2"]
    with pytest.raises(UnknownTopicError):
        b.delete_topic("t1")
    # The name can be used again, with fresh partitions.
    t1b = make_topic("t1", 1)
    b.create_topic(t1b)
    assert a.topics()["t1"] == t1b


def test_add_partitions_must_follow_existing(make_store):
    a = make_store()
    a.create_topic(make_topic("t", 2))
    with pytest.raises(ValueError):
        a.add_partitions("t", [PartitionState(3, 1, 0, [1], [1])])
    assert len(a.topics()["t"].partitions) == 2


def test_cas_only_one_of_two_updaters_wins(make_store):
    a, b = make_store(), make_store()
    a.create_topic(make_topic("t", 2, replicas=(1, 2, 3)))
    sa = a.topics()["t"].partitions[1]
    sb = b.topics()["t"].partitions[1]
    assert sa.partition_epoch == sb.partition_epoch == 0
    # The leader shrinks the ISR while the controller elects a new leader, both from epoch 0.
    sa.isr = [2, 3]
    sb.leader, sb.leader_epoch = 3, 1
    assert a.update_partition("t", sa, 0)
    assert sa.partition_epoch == 1
    assert not b.update_partition("t", sb, 0)
    assert sb.partition_epoch == 0
    stored = b.topics()["t"].partitions[1]
    assert stored == sa and stored.isr == [2, 3] and stored.leader == 2
    # The loser reads again and retries on the new epoch.
    fresh = b.topics()["t"].partitions[1]
    fresh.leader, fresh.leader_epoch = 3, 1
    assert b.update_partition("t", fresh, 1)
    assert a.topics()["t"].partitions[1] == PartitionState(1, 3, 1, [1, 2, 3], [2, 3], [], 2)
    assert a.topics()["t"].partitions[0].partition_epoch == 0  # untouched


def test_cas_unknown_partition(make_store):
    a = make_store()
    with pytest.raises(UnknownTopicError):
        a.update_partition("nope", PartitionState(0, 1, 0, [1], [1]), 0)
    a.create_topic(make_topic("t", 1))
    with pytest.raises(UnknownTopicError):
        a.update_partition("t", PartitionState(5, 1, 0, [1], [1]), 0)


def test_concurrent_cas_increments_lose_nothing(make_store):
    a = make_store()
    a.create_topic(make_topic("counter", 1))
    stores = [make_store(), make_store()]
    errors: list[BaseException] = []
    lost = []

    def run(s):
        try:
            lost.append(cas_increment(s, "counter", 0, 50))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    state = a.topics()["counter"].partitions[0]
    assert state.leader_epoch == 100
    assert state.partition_epoch == 100


# --- change detection and ids ----------------------------------------------------------------


def test_version_moves_on_every_change(make_store):
    a = make_store(session_timeout_ms=SHORT_SESSION_MS)
    b = make_store(session_timeout_ms=SHORT_SESSION_MS)
    watcher = make_store(session_timeout_ms=SHORT_SESSION_MS)

    def moves(change, what, by=a):
        before = watcher.version()
        mine = by.version() if by is not None else 0
        change()
        if by is not None:
            assert by.version() > mine, f"{what}: the writer's own version did not move at once"
        wait_until(lambda: watcher.version() > before, timeout=5, what=f"version to move after {what}")

    moves(lambda: a.register_broker(reg(1)), "register")
    moves(lambda: b.register_broker(reg(2)), "register of another", by=b)
    moves(lambda: a.try_acquire_controller(1), "controller acquired")
    moves(lambda: a.create_topic(make_topic("t", 1)), "create topic")
    moves(lambda: a.set_topic_configs("t", {"x": "y"}), "set configs")
    moves(lambda: a.add_partitions("t", [PartitionState(1, 1, 0, [1], [1])]), "add partitions")
    st = a.topics()["t"].partitions[0]
    moves(lambda: a.update_partition("t", st, 0), "update partition")
    moves(lambda: a.resign_controller(1), "resign")
    moves(lambda: a.delete_topic("t"), "delete topic")
    moves(lambda: a.unregister_broker(1), "unregister")

    # A heartbeat alone is not a change.
    b.heartbeat(2)
    time.sleep(0.3)  # let late watch events of the changes above arrive
    v = watcher.version()
    b.heartbeat(2)
    time.sleep(0.2)
    assert watcher.version() == v

    # Liveness ending without anyone writing (broker 2's process dies) moves it too.
    moves(b.close, "liveness lapse", by=None)
    assert 2 not in watcher.live_brokers()


def test_producer_id_blocks_are_unique(make_store):
    stores = [make_store(), make_store()]
    got: list[list[int]] = [[], []]

    def run(i):
        for _ in range(30):
            got[i].append(stores[i].allocate_producer_ids(10))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    starts = sorted(got[0] + got[1])
    assert len(starts) == 60
    assert starts == list(range(0, 600, 10))  # no overlap and no gap
    assert stores[0].allocate_producer_ids(1) == 600
    with pytest.raises(ValueError):
        stores[0].allocate_producer_ids(0)
