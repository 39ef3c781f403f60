"""Consumer groups against real broker processes with real clients (confluent-kafka, kafka-python),
raw protocol requests for the error paths, and `logbus groups` as a user runs it."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkawire import WireConnection, make_batch

GROUP_SETTINGS = "group_initial_rebalance_delay_ms = 200\n"
CONSUMER_SCRIPT = Path(__file__).resolve().parents[1] / "group_consumer.py"

# Kafka error codes
ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_SESSION_TIMEOUT = 26
OFFSET_METADATA_TOO_LARGE = 12
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79


# --- helpers -----------------------------------------------------------------------------------


def wait_until(condition, timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"not within {timeout:g} s: {what}")


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    client = admin(bootstrap)  # kept alive until the future is done: a destroyed client fails its futures
    futures = client.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)], operation_timeout=10, request_timeout=10)
    futures[name].result(timeout=15)


def produce(bootstrap: str, topic: str, per_partition: int, partitions: int, start: int = 0) -> dict[int, list[int]]:
    """Numbered records, `per_partition` to each partition; returns the acknowledged offsets per partition."""
    acked: dict[int, list[int]] = {p: [] for p in range(partitions)}

    def delivered(err, msg):
        assert err is None, err
        acked[msg.partition()].append(msg.offset())

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(per_partition):
        for p in range(partitions):
            producer.produce(topic, value=b"%d" % (start + i * partitions + p), partition=p, on_delivery=delivered)
    assert producer.flush(30) == 0, "records not acknowledged"
    return acked


class BackgroundProducer:
    """Produces numbered records round-robin over the partitions until stopped; keeps the acknowledged offsets."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate_per_s: float = 400) -> None:
        self.topic, self.partitions, self.rate = topic, partitions, rate_per_s
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.acked: dict[int, set[int]] = {p: set() for p in range(partitions)}
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.acked[msg.partition()].add(msg.offset())

    def _run(self) -> None:
        n = 0
        started = time.monotonic()
        while not self._stop.is_set():
            self.producer.produce(self.topic, value=b"%d" % n, partition=n % self.partitions, on_delivery=self._delivered)
            n += 1
            self.producer.poll(0)
            ahead = n / self.rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)

    def start(self) -> "BackgroundProducer":
        self._thread.start()
        return self

    def stop(self) -> dict[int, set[int]]:
        self._stop.set()
        self._thread.join(timeout=10)
        assert self.producer.flush(30) == 0, "records not acknowledged"
        assert not self.failed, self.failed[:5]
        return self.acked


class ConsumerProcess:
    """tests/group_consumer.py in its own process; its event lines are read from a file."""

    def __init__(self, bootstrap: str, group: str, topic: str, out: Path, config: dict[str, str] | None = None) -> None:
        self.out = out
        args = [sys.executable, str(CONSUMER_SCRIPT), "--bootstrap", bootstrap, "--group", group, "--topic", topic, "--out", str(out)]
        for k, v in (config or {}).items():
            args += ["--config", f"{k}={v}"]
        self.stderr_path = out.with_suffix(".stderr")
        self._stderr = open(self.stderr_path, "ab")
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self._stderr)

    def lines(self) -> list[str]:
        if not self.out.exists():
            return []
        text = self.out.read_text()
        return text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]

    def assignments(self) -> list[set[int]]:
        return [set(int(p) for p in line[2:].split(",") if p) for line in self.lines() if line.startswith("A ")]

    def owned(self) -> set[int] | None:
        history = self.assignments()
        return history[-1] if history else None

    def consumed(self) -> list[tuple[int, int]]:
        return [(int(p), int(o)) for kind, p, o in (line.split() for line in self.lines() if line.startswith("R ")) if kind == "R"]

    def last_commits(self) -> dict[int, int]:
        commits: dict[int, int] = {}
        for line in self.lines():
            if line.startswith("C "):
                _, p, o = line.split()
                commits[int(p)] = int(o)
        return commits

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self, timeout: float = 20) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def debug(self) -> str:
        return f"{self.out.name}: last lines {self.lines()[-5:]}\nstderr: {self.stderr_path.read_text(errors='replace')[-2000:]}"


@pytest.fixture
def consumers():
    started: list[ConsumerProcess] = []

    def make(*args, **kwargs) -> ConsumerProcess:
        c = ConsumerProcess(*args, **kwargs)
        started.append(c)
        return c

    yield make
    for c in started:
        if c.proc.poll() is None:
            c.kill()


def describe_group(bootstrap: str, group: str):
    client = admin(bootstrap)
    return client.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)


def committed_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    client = admin(bootstrap)
    futures = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=10)
    result = futures[group].result(timeout=15)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def owned_by_members(desc) -> list[set[int]]:
    return [{tp.partition for tp in m.assignment.topic_partitions} for m in desc.members]


def cover_everything(consumed: set[tuple[int, int]], acked: dict[int, set[int]]) -> bool:
    return all((p, o) in consumed for p, offsets in acked.items() for o in offsets)


# --- three consumers, one killed ---------------------------------------------------------------


@pytest.mark.slow
def test_killed_member_partitions_taken_over_without_gaps(broker_factory, consumers, tmp_path):
    """Three consumer processes share 12 partitions (4 each); one is SIGKILLed while records flow.

    Each consumer writes `R p o` for every record it processes and `C p o` before each synchronous
    commit of `o` (so for the killed one, a written C is an upper bound of what it committed).
    Criterion, checked per partition p, with E_p the acknowledged offsets of p (all of 0..end-1):
      1. every acknowledged record was consumed by someone (killed member included);
      2. no gap when the killed member's uncommitted work is thrown away: E_p is covered by the
         offsets the survivors consumed together with the offsets < C_p (its last written commit
         for p) the killed member consumed. A record it processed but did not commit must have
         been consumed again by a survivor.
    Also: after its session timeout the two survivors own all 12 partitions (6 each, disjoint)
    in their own callbacks and in DescribeGroups, and they consumed from every partition the
    killed member owned.
    """
    b = broker_factory(GROUP_SETTINGS)
    topic, group = "events", "g-kill"
    create_topic(b.bootstrap, topic, 12)
    procs = [consumers(b.bootstrap, group, topic, tmp_path / f"c{i}.log") for i in range(3)]
    wait_until(lambda: all(c.owned() is not None and len(c.owned()) == 4 for c in procs)
               and set().union(*(c.owned() for c in procs)) == set(range(12)), 45,
               "three consumers own 4 partitions each")

    producer = BackgroundProducer(b.bootstrap, topic, 12).start()
    try:
        wait_until(lambda: all(len(c.last_commits()) == 4 for c in procs), 30, "every consumer committed on all its partitions")
        victim, survivors = procs[0], procs[1:]
        victim_partitions = victim.owned()
        victim.kill()
        killed_at = time.monotonic()
        wait_until(lambda: all(c.owned() is not None and len(c.owned()) == 6 for c in survivors)
                   and survivors[0].owned() | survivors[1].owned() == set(range(12)), 40,
                   "the two survivors own 6 partitions each:\n" + "\n".join(c.debug() for c in survivors))
        takeover_s = time.monotonic() - killed_at
        desc = wait_until(lambda: (d := describe_group(b.bootstrap, group)) and d.state.name == "STABLE" and len(d.members) == 2 and d, 15,
                          "DescribeGroups shows a stable group of two")
        owned = owned_by_members(desc)
        assert sorted(len(s) for s in owned) == [6, 6] and owned[0] | owned[1] == set(range(12)), owned
        # the coordinator waited for the session timeout (6 s) before it gave the partitions away
        assert takeover_s > 3.0, takeover_s
        time.sleep(1.0)  # records keep flowing to the new owners
    finally:
        acked = producer.stop()

    everyone = lambda: set().union(*(set(c.consumed()) for c in procs))  # noqa: E731
    wait_until(lambda: cover_everything(everyone(), acked), 30, "every acknowledged record consumed")
    for c in survivors:
        assert c.stop() == 0, c.debug()

    for p, offsets in acked.items():
        assert offsets == set(range(len(offsets))), f"partition {p}: acknowledged offsets are not 0..{len(offsets) - 1}"
    consumed_all = everyone()
    missing = [(p, o) for p, offsets in acked.items() for o in offsets if (p, o) not in consumed_all]
    assert not missing, f"never consumed: {missing[:20]}"

    committed_by_victim = victim.last_commits()
    victim_done = {(p, o) for p, o in victim.consumed() if o < committed_by_victim.get(p, 0)}
    by_survivors = set(survivors[0].consumed()) | set(survivors[1].consumed())
    gaps = [(p, o) for p, offsets in acked.items() for o in offsets if (p, o) not in by_survivors and (p, o) not in victim_done]
    assert not gaps, f"records consumed only by the killed member after its last commit, lost for the group: {gaps[:20]}"
    for p in victim_partitions:
        assert any(pp == p for pp, _ in by_survivors), f"no survivor consumed partition {p} of the killed member"
        assert committed_by_victim[p] > 0


# --- kafka-python, cooperative-sticky, offsets across clients -----------------------------------


def test_kafka_python_group_and_offsets_shared_with_confluent(broker_factory):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    from kafka.coordinator.assignors.range import RangePartitionAssignor

    b = broker_factory(GROUP_SETTINGS)
    topic = "kp"
    create_topic(b.bootstrap, topic, 4)
    produce(b.bootstrap, topic, per_partition=10, partitions=4)

    def kafka_python_consumer(group: str) -> KafkaConsumer:
        return KafkaConsumer(bootstrap_servers=b.bootstrap, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                             session_timeout_ms=6000, heartbeat_interval_ms=1000, partition_assignment_strategy=[RangePartitionAssignor],
                             request_timeout_ms=20000)

    # two kafka-python members, each polled by its own thread: the range assignor gives each two contiguous partitions
    members = [kafka_python_consumer("g-kp") for _ in range(2)]
    consumed: dict[int, set[tuple[int, int]]] = {0: set(), 1: set()}
    assigned: list[set[int]] = [set(), set()]
    done = threading.Event()

    def run(i: int) -> None:
        m = members[i]
        m.subscribe([topic])
        deadline = time.monotonic() + 45
        while not done.is_set() and time.monotonic() < deadline:
            for tp, records in m.poll(timeout_ms=500).items():
                consumed[i] |= {(r.partition, r.offset) for r in records}
            assigned[i] = {tp.partition for tp in m.assignment()}
        m.commit()
        m.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: sorted(map(sorted, assigned)) == [[0, 1], [2, 3]] and len(consumed[0] | consumed[1]) == 40, 45,
                   f"two kafka-python members own 2 partitions each and consume all 40 records: {assigned}")
        time.sleep(0.6)  # both poll once more with the final assignment
    finally:
        done.set()
        for t in threads:
            t.join(timeout=30)
    assert sorted(map(sorted, assigned)) == [[0, 1], [2, 3]], assigned
    assert consumed[0] | consumed[1] == {(p, o) for p in range(4) for o in range(10)}
    for i in range(2):
        assert {p for p, _ in consumed[i]} <= assigned[i]

    # confluent-kafka reads what kafka-python committed
    reader = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g-kp", "enable.auto.commit": False})
    try:
        got = reader.committed([TopicPartition(topic, p) for p in range(4)], timeout=10)
        assert [(tp.partition, tp.offset) for tp in got] == [(p, 10) for p in range(4)]
    finally:
        reader.close()

    # kafka-python reads what confluent-kafka committed, and resumes from it
    writer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g-ck", "enable.auto.commit": False})
    try:
        writer.commit(offsets=[TopicPartition(topic, p, 3 + p) for p in range(4)], asynchronous=False)
    finally:
        writer.close()
    kp = kafka_python_consumer("g-ck")
    try:
        assert [kp.committed(KTP(topic, p)) for p in range(4)] == [3, 4, 5, 6]
        kp.subscribe([topic])
        first: dict[int, int] = {}
        deadline = time.monotonic() + 30
        while len(first) < 4 and time.monotonic() < deadline:
            for tp, records in kp.poll(timeout_ms=200).items():
                first.setdefault(tp.partition, min(r.offset for r in records))
        assert first == {0: 3, 1: 4, 2: 5, 3: 6}
    finally:
        kp.close()


@pytest.mark.slow
def test_cooperative_sticky_second_member_takes_half_without_loss(broker_factory, consumers, tmp_path):
    """With cooperative-sticky, a second member joining takes 3 of 6 partitions; the first one keeps
    its other 3 throughout (never revoked everything), and every acknowledged record is consumed."""
    b = broker_factory(GROUP_SETTINGS)
    topic, group = "coop", "g-coop"
    create_topic(b.bootstrap, topic, 6)
    config = {"partition.assignment.strategy": "cooperative-sticky"}
    first = consumers(b.bootstrap, group, topic, tmp_path / "first.log", config)
    wait_until(lambda: first.owned() == set(range(6)), 30, "the first member owns all 6 partitions")
    producer = BackgroundProducer(b.bootstrap, topic, 6, rate_per_s=300).start()
    try:
        wait_until(lambda: len(first.last_commits()) == 6, 20, "the first member committed on every partition")
        second = consumers(b.bootstrap, group, topic, tmp_path / "second.log", config)
        wait_until(lambda: first.owned() is not None and second.owned() is not None and len(first.owned()) == 3
                   and len(second.owned()) == 3 and first.owned() | second.owned() == set(range(6)), 40,
                   "each member owns 3 partitions:\n" + first.debug() + "\n" + second.debug())
        time.sleep(1.0)
    finally:
        acked = producer.stop()
    history = first.assignments()
    start = history.index(set(range(6)))
    kept = first.owned()
    assert all(kept <= s for s in history[start:]), f"the first member lost partitions it kept (not incremental): {history}"
    desc = describe_group(b.bootstrap, group)
    assert desc.partition_assignor == "cooperative-sticky"
    assert sorted(len(s) for s in owned_by_members(desc)) == [3, 3]

    everyone = lambda: set(first.consumed()) | set(second.consumed())  # noqa: E731
    wait_until(lambda: cover_everything(everyone(), acked), 30, "every acknowledged record consumed")
    for p in second.owned():
        assert any(pp == p for pp, _ in second.consumed()), f"the second member consumed nothing of partition {p}"
    assert first.stop() == 0 and second.stop() == 0


# --- restart of the broker ---------------------------------------------------------------------


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_committed_offsets_survive_broker_restart(broker_factory, how):
    b = broker_factory(GROUP_SETTINGS)
    topic, group = "rs", "g-restart"
    create_topic(b.bootstrap, topic, 3)
    produce(b.bootstrap, topic, per_partition=10, partitions=3)

    # a group member commits part of what it consumed
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "session.timeout.ms": 6000})
    c.subscribe([topic])
    seen: set[tuple[int, int]] = set()
    deadline = time.monotonic() + 30
    while len(seen) < 30 and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            seen.add((m.partition(), m.offset()))
    assert len(seen) == 30
    wanted = {(topic, 0): 4, (topic, 1): 7, (topic, 2): 10}
    c.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in wanted.items()], asynchronous=False)
    c.close()
    assert committed_offsets(b.bootstrap, group) == wanted

    if how == "sigterm":
        assert b.stop() == 0
    else:
        b.kill()
    b.start()
    assert wait_until(lambda: committed_offsets(b.bootstrap, group), 15, "offsets readable after the restart") == wanted
    assert describe_group(b.bootstrap, group).state.name == "EMPTY"

    # a new member resumes from the committed offsets
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "session.timeout.ms": 6000})
    c.subscribe([topic])
    first: dict[int, int] = {}
    try:
        deadline = time.monotonic() + 30
        while len(first) < 2 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                first.setdefault(m.partition(), m.offset())
    finally:
        c.close()
    assert first == {0: 4, 1: 7}


# --- static membership -------------------------------------------------------------------------


@pytest.mark.slow
def test_static_member_restart_keeps_assignment(broker_factory, consumers, tmp_path):
    """A member with group.instance.id that restarts within its session timeout gets its partitions
    back; the other member sees no rebalance (no assignment change at all)."""
    b = broker_factory(GROUP_SETTINGS)
    topic, group = "static", "g-static"
    create_topic(b.bootstrap, topic, 4)
    a = consumers(b.bootstrap, group, topic, tmp_path / "a1.log", {"group.instance.id": "inst-a", "session.timeout.ms": "10000"})
    other = consumers(b.bootstrap, group, topic, tmp_path / "b.log", {"group.instance.id": "inst-b", "session.timeout.ms": "10000"})
    wait_until(lambda: a.owned() and other.owned() and len(a.owned()) == 2 and len(other.owned()) == 2, 30, "two members with 2 partitions each")
    time.sleep(1.5)  # settle: no rebalance is pending
    a_before, other_history = a.owned(), other.assignments()
    desc = describe_group(b.bootstrap, group)
    assert sorted(m.group_instance_id for m in desc.members) == ["inst-a", "inst-b"]
    old_ids = {m.group_instance_id: m.member_id for m in desc.members}

    assert a.stop() == 0
    a2 = consumers(b.bootstrap, group, topic, tmp_path / "a2.log", {"group.instance.id": "inst-a", "session.timeout.ms": "10000"})
    wait_until(lambda: a2.owned(), 20, "the restarted member has an assignment:\n" + a2.debug())
    assert a2.owned() == a_before
    produce(b.bootstrap, topic, per_partition=5, partitions=4)
    wait_until(lambda: {p for p, _ in a2.consumed()} == a_before, 20, "the restarted member consumes its partitions")
    time.sleep(2.0)  # a rebalance of the other member would show within a few heartbeats
    assert other.assignments() == other_history, "the other member's partitions moved"
    desc = describe_group(b.bootstrap, group)
    assert desc.state.name == "STABLE"
    assert sorted(m.group_instance_id for m in desc.members) == ["inst-a", "inst-b"]
    new_ids = {m.group_instance_id: m.member_id for m in desc.members}
    assert new_ids["inst-b"] == old_ids["inst-b"] and new_ids["inst-a"] != old_ids["inst-a"]
    assert a2.stop() == 0 and other.stop() == 0


# --- bad input on the wire ---------------------------------------------------------------------


def subscription(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, null user data."""
    body = struct.pack(">hi", 0, len(topics)) + b"".join(struct.pack(">h", len(t)) + t.encode() for t in topics)
    return body + struct.pack(">i", -1)


def join(conn: WireConnection, group: str, member_id: str = "", session_ms: int = 30000, protocol_type: str = "consumer", version: int = 5):
    return conn.request(11, version, {"group_id": group, "session_timeout": session_ms, "rebalance_timeout": 30000, "member_id": member_id,
                                      "group_instance_id": None, "protocol_type": protocol_type,
                                      "protocols": [{"name": "range", "metadata": subscription(["wire"])}]})


def commit(conn: WireConnection, group: str, generation: int, member_id: str, offset: int = 1, metadata: str = ""):
    resp = conn.request(8, 7, {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id, "group_instance_id": None,
                               "topics": [{"name": "wire", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                                           "committed_leader_epoch": -1, "committed_metadata": metadata}]}]})
    return int(resp.topics[0].partitions[0].error_code)


def test_group_requests_with_bad_input_get_kafka_errors(broker_factory):
    b = broker_factory(GROUP_SETTINGS)
    conn = WireConnection(b.bootstrap, timeout=15)
    try:
        assert int(conn.create_topic("wire", 1).error_code) == 0
        assert int(conn.produce("wire", 0, make_batch([b"a", b"b", b"c"])).error_code) == 0
        group = "g-wire"
        # as every client does first: the coordinator is the leader of the group's offsets partition
        found = conn.request(10, 4, {"key_type": 0, "coordinator_keys": [group]}).coordinators[0]
        assert int(found.error_code) == 0 and found.port == b.port

        # KIP-394: a v4+ JoinGroup without a member id is told its id, then joins with it
        first = join(conn, group)
        assert int(first.error_code) == MEMBER_ID_REQUIRED and first.member_id
        member = first.member_id
        joined = join(conn, group, member_id=member)
        assert int(joined.error_code) == 0 and joined.member_id == member and joined.leader == member
        generation = joined.generation_id
        assert generation >= 1
        synced = conn.request(14, 3, {"group_id": group, "generation_id": generation, "member_id": member, "group_instance_id": None,
                                      "assignments": [{"member_id": member, "assignment": b"\x00\x01"}]})
        assert int(synced.error_code) == 0 and synced.assignment == b"\x00\x01"

        other = WireConnection(b.bootstrap, timeout=15)
        try:
            assert int(join(other, group, protocol_type="connect").error_code) == INCONSISTENT_GROUP_PROTOCOL
            assert int(join(other, "g-fresh", session_ms=10).error_code) == INVALID_SESSION_TIMEOUT
            assert int(join(other, group, session_ms=10).error_code) == INVALID_SESSION_TIMEOUT
        finally:
            other.close()

        wrong = generation + 7
        resp = conn.request(14, 3, {"group_id": group, "generation_id": wrong, "member_id": member, "group_instance_id": None, "assignments": []})
        assert int(resp.error_code) == ILLEGAL_GENERATION
        beat = lambda g, m: int(conn.request(12, 3, {"group_id": group, "generation_id": g, "member_id": m, "group_instance_id": None}).error_code)  # noqa: E731
        assert beat(wrong, member) == ILLEGAL_GENERATION
        assert beat(generation, "nobody-0") == UNKNOWN_MEMBER_ID
        assert commit(conn, group, wrong, member) == ILLEGAL_GENERATION
        assert commit(conn, group, generation, member, metadata="x" * 4097) == OFFSET_METADATA_TOO_LARGE
        assert commit(conn, group, generation, member, offset=2, metadata="x" * 4096) == 0

        deleted = conn.request(42, 1, {"groups_names": [group, "no-such-group"]})
        codes = {r.group_id: int(r.error_code) for r in deleted.results}
        assert codes == {group: NON_EMPTY_GROUP, "no-such-group": GROUP_ID_NOT_FOUND}

        # still serving: the member is alive, its offset is stored, produce and fetch work
        assert beat(generation, member) == 0
        fetched = conn.request(9, 7, {"group_id": group, "topics": [{"name": "wire", "partition_indexes": [0]}], "require_stable": False})
        assert fetched.topics[0].partitions[0].committed_offset == 2
        assert int(conn.produce("wire", 0, make_batch([b"d"])).error_code) == 0
        assert int(conn.fetch("wire", 0, 0).error_code) == 0
        client = admin(b.bootstrap)
        listed = client.list_consumer_groups(request_timeout=10).result(timeout=15)
        assert not listed.errors, listed.errors
        assert group in {g.group_id for g in listed.valid}
    finally:
        conn.close()
    assert b.alive()


# --- the CLI -----------------------------------------------------------------------------------


def groups(bootstrap: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "logbus.cli", "groups", "--bootstrap-server", bootstrap, *args],
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, "LOGBUS_BOOTSTRAP_SERVERS": ""})


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    return result.stdout


def test_cli_list_describe_reset_delete(broker_factory):
    b = broker_factory(GROUP_SETTINGS)
    topic, group = "cli", "g-cli"
    create_topic(b.bootstrap, topic, 3)
    produce(b.bootstrap, topic, per_partition=10, partitions=3)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "session.timeout.ms": 6000, "client.id": "cli-test"})
    try:
        c.subscribe([topic])
        wait_until(lambda: c.poll(0.1) is not None and c.assignment(), 30, "the consumer is assigned")
        c.commit(offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 10)], asynchronous=False)
        member_id = c.memberid()

        assert group in ok(groups(b.bootstrap, "--list")).split()
        listed = json.loads(ok(groups(b.bootstrap, "--list", "--json")))
        assert {"group": group, "state": "Stable"} in listed

        text = ok(groups(b.bootstrap, "--describe", "--group", group)).strip().splitlines()
        assert text[0].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
        rows = [line.split() for line in text[1:]]
        assert [r[:6] for r in rows] == [[group, topic, "0", "4", "10", "6"], [group, topic, "1", "10", "10", "0"], [group, topic, "2", "-", "10", "-"]]
        assert all(r[6] == member_id and r[7] == "/127.0.0.1" and r[8] == "cli-test" for r in rows)

        (report,) = json.loads(ok(groups(b.bootstrap, "--describe", "--group", group, "--json")))
        assert report["state"] == "Stable" and report["assignment_strategy"] == "range"
        assert [(o["partition"], o["current_offset"], o["log_end_offset"], o["lag"]) for o in report["offsets"]] == [(0, 4, 10, 6), (1, 10, 10, 0), (2, None, 10, None)]
        assert [m["consumer_id"] for m in report["members"]] == [member_id]

        members = ok(groups(b.bootstrap, "--describe", "--group", group, "--members", "--verbose")).strip().splitlines()
        assert members[0].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
        assert members[1].split() == [group, member_id, "/127.0.0.1", "cli-test", "3", f"{topic}(0,1,2)"]
        state = ok(groups(b.bootstrap, "--describe", "--group", group, "--state")).strip().splitlines()
        assert state[1].split() == [group, b.bootstrap, "(0)", "range", "Stable", "1"]

        busy = groups(b.bootstrap, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
        assert busy.returncode == 1
        assert busy.stderr.strip() == f"Error: Assignments can only be reset if the group '{group}' is inactive, but the current state is Stable."
    finally:
        c.close()
    wait_until(lambda: describe_group(b.bootstrap, group).state.name == "EMPTY", 10, "the group is empty after close")

    # a dry run changes nothing; --execute commits the plan
    plan = ok(groups(b.bootstrap, "--reset-offsets", "--group", group, "--topic", f"{topic}:0,1", "--to-latest", "--dry-run")).strip().splitlines()
    assert plan[0].split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert [r.split() for r in plan[1:]] == [[group, topic, "0", "10"], [group, topic, "1", "10"]]
    assert committed_offsets(b.bootstrap, group) == {(topic, 0): 4, (topic, 1): 10}
    done = ok(groups(b.bootstrap, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")).strip().splitlines()
    assert [r.split() for r in done[1:]] == [[group, topic, str(p), "0"] for p in range(3)]
    assert committed_offsets(b.bootstrap, group) == {(topic, p): 0 for p in range(3)}
    shifted = json.loads(ok(groups(b.bootstrap, "--reset-offsets", "--group", group, "--all-topics", "--shift-by", "25", "--execute", "--json")))
    assert shifted == [{"group": group, "executed": True, "offsets": [{"topic": topic, "partition": p, "new_offset": 10} for p in range(3)]}]
    ok(groups(b.bootstrap, "--reset-offsets", "--group", group, "--topic", f"{topic}:2", "--to-offset", "3", "--execute"))
    assert committed_offsets(b.bootstrap, group)[(topic, 2)] == 3

    out = ok(groups(b.bootstrap, "--delete-offsets", "--group", group, "--topic", f"{topic}:1"))
    assert out.splitlines()[0] == f"Request succeed for deleting offsets with topic {topic} group {group}"
    assert committed_offsets(b.bootstrap, group) == {(topic, 0): 10, (topic, 2): 3}

    assert ok(groups(b.bootstrap, "--delete", "--group", group)).strip() == f"Deletion of requested consumer groups ('{group}') was successful."
    assert group not in ok(groups(b.bootstrap, "--list")).split()
    gone = groups(b.bootstrap, "--describe", "--group", group)
    assert gone.returncode == 1 and gone.stderr.strip() == f"Error: Consumer group '{group}' does not exist."
    again = groups(b.bootstrap, "--delete", "--group", group)
    assert again.returncode == 1 and "could not be deleted" in again.stderr

    usage = groups(b.bootstrap, "--reset-offsets", "--group", group, "--topic", topic)
    assert usage.returncode == 2 and "--to-earliest" in usage.stderr
    unreachable = subprocess.run([sys.executable, "-m", "logbus.cli", "groups", "--bootstrap-server", "127.0.0.1:1", "--list", "--timeout", "2000"],
                                 capture_output=True, text=True, timeout=60)
    assert unreachable.returncode == 1 and unreachable.stderr.startswith("Error: could not get metadata from 127.0.0.1:1")
