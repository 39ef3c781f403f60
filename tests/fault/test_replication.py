"""Replication under faults: broker processes sharing a metadata store, real clients, SIGKILL.

What a replicated Kafka cluster must show, after Apache Kafka's own replication system test:
acknowledged records survive leader kills exactly once and in order (local and ZooKeeper
stores); min.insync.replicas refuses acks=all writes without writing them; the controller role
moves when its holder dies; a former leader truncates what never reached the ISR; observers hold
the data outside the ISR; unclean election through ElectLeaders; bad input gets Kafka errors.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid

import pytest

from logbus.cli_cluster import lease_holder
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ElectionType,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from zkserver import zookeeper  # noqa: F401  (fixture)

NOT_ENOUGH_REPLICAS = 19
INVALID_REPLICATION_FACTOR = 38
INVALID_CONFIG = 40
UNKNOWN_TOPIC_OR_PARTITION = 3
ELECTION_NOT_NEEDED = 84

# Confluent's documentation example: three synchronous replicas in "west", two observers in "east".
WEST_EAST_PLACEMENT = {
    "version": 1,
    "replicas": [{"count": 3, "constraints": {"rack": "west"}}],
    "observers": [{"count": 2, "constraints": {"rack": "east"}}],
}
WEST_EAST_RACKS = ["west", "west", "west", "east", "east"]


# --- helpers ------------------------------------------------------------------------------------


def admin_of(cluster):
    """One AdminClient per cluster, kept alive: a collected client cancels its pending futures.
    librdkafka learns a new controller only from a metadata refresh, hence the 1 s refresh."""
    if getattr(cluster, "_admin", None) is None:
        cluster._admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "topic.metadata.refresh.interval.ms": 1000})
    return cluster._admin


def create_topic(cluster, name: str, partitions: int = 1, rf: int = 3, configs: dict | None = None, timeout: float = 20.0):
    futures = admin_of(cluster).create_topics([NewTopic(name, partitions, rf, config=configs or {})], operation_timeout=10)
    futures[name].result(timeout)
    cluster.wait_until(lambda: all(cluster.partition(name, p)[0] >= 0 for p in range(partitions)), 20, f"leaders for {name}")


def leader(cluster, topic: str, partition: int = 0) -> int:
    return cluster.partition(topic, partition)[0]


def wait_leader(cluster, topic: str, partition: int = 0, not_in: set[int] = frozenset(), timeout: float = 30.0) -> int:
    def elected():
        lead = leader(cluster, topic, partition)
        return (lead,) if lead >= 0 and lead not in not_in else None  # a tuple: broker 0 is a leader too

    return cluster.wait_until(elected, timeout, f"a leader of {topic}-{partition} outside {sorted(not_in)}")[0]


def wait_isr(cluster, topic: str, partition: int, members: set[int], timeout: float = 30.0) -> None:
    cluster.wait_until(lambda: set(cluster.partition(topic, partition)[2]) == set(members), timeout,
                       f"ISR of {topic}-{partition} == {sorted(members)}")


def produce_sync(bootstrap: str, topic: str, values: list[bytes], partition: int = 0, acks: str = "all",
                 timeout_ms: int = 15000, **extra) -> list:
    """Produce and wait for every delivery report; returns the list of errors (None for success)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "message.timeout.ms": timeout_ms,
                         "enable.idempotence": False, "linger.ms": 0, **extra})
    results: list = []
    for v in values:
        producer.produce(topic, value=v, partition=partition, on_delivery=lambda err, msg: results.append(err))
    remaining = producer.flush(timeout_ms / 1000 + 10)
    assert remaining == 0, f"{remaining} records got no delivery report"
    assert len(results) == len(values)
    return results


def consume(bootstrap: str, topic: str, partitions: int = 1, timeout: float = 30.0) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of the topic up to the high watermarks (as they are when reading starts)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100, "topic.metadata.refresh.interval.ms": 1000})
    try:
        ends = {}
        deadline = time.monotonic() + timeout
        for p in range(partitions):
            while True:
                try:
                    ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
                    break
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        last = {p: -1 for p in range(partitions)}
        while any(last[p] < ends[p] - 1 for p in range(partitions)):
            assert time.monotonic() < deadline, f"read only up to {last} of high watermarks {ends} within {timeout}s"
            for msg in consumer.consume(num_messages=10000, timeout=0.5):
                if msg.error() is not None:
                    continue
                out[msg.partition()].append((msg.offset(), msg.value()))
                last[msg.partition()] = msg.offset()
        return out
    finally:
        consumer.close()


def log_bytes(cluster, broker_id: int, topic: str, partition: int = 0) -> bytes:
    """The partition's segment files on one broker's disk, concatenated in offset order."""
    d = cluster.brokers[broker_id].data_dir / f"{topic}-{partition}"
    return b"".join(f.read_bytes() for f in sorted(d.glob("*.log")))


def wait_same_logs(cluster, topic: str, brokers: list[int], partition: int = 0, timeout: float = 30.0) -> bytes:
    def same():
        logs = {b: log_bytes(cluster, b, topic, partition) for b in brokers}
        return next(iter(logs.values())) if len(set(logs.values())) == 1 and next(iter(logs.values())) else None

    return cluster.wait_until(same, timeout, f"identical {topic}-{partition} logs on brokers {brokers}")


def election_code(outcome) -> int:
    """The Kafka error code of one partition's outcome from AdminClient.elect_leaders (0: elected)."""
    if outcome is None:
        return 0
    return (outcome.args[0] if isinstance(outcome, KafkaException) else outcome).code()


def describe_controller(cluster) -> int:
    """The lease holder: DescribeCluster's controllers endpoint (the brokers endpoint names any live broker)."""
    holder = lease_holder(cluster.bootstrap)
    assert holder is not None, "no broker holds the controller lease"
    return holder


class SequenceProducer(threading.Thread):
    """An idempotent acks=all producer writing `partition:seq` continuously to every partition."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, pause_s: float = 0.004) -> None:
        super().__init__(daemon=True)
        self.topic, self.partitions, self.pause_s = topic, partitions, pause_s
        self.config = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                       "message.timeout.ms": 120000, "topic.metadata.refresh.interval.ms": 1000}
        self.sent = [0] * partitions
        self.acked: dict[int, list[int]] = {p: [] for p in range(partitions)}
        self.failed: list[tuple[int, int, str]] = []
        self.fatal: list[str] = []
        self.unflushed = -1
        self._halt = threading.Event()

    @property
    def acked_count(self) -> int:
        return sum(len(a) for a in self.acked.values())

    def _report(self, err, msg) -> None:
        p, seq = (int(x) for x in msg.value().split(b":"))
        if err is None:
            self.acked[p].append(seq)
        else:
            self.failed.append((p, seq, str(err)))
            if err.fatal():
                self.fatal.append(str(err))

    def run(self) -> None:
        producer = Producer({**self.config, "error_cb": lambda e: self.fatal.append(str(e)) if e.fatal() else None})
        while not self._halt.is_set():
            for p in range(self.partitions):
                try:
                    producer.produce(self.topic, value=b"%d:%d" % (p, self.sent[p]), partition=p, on_delivery=self._report)
                    self.sent[p] += 1
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
            time.sleep(self.pause_s)
        self.unflushed = producer.flush(90)

    def finish(self, timeout: float = 100.0) -> None:
        self._halt.set()
        self.join(timeout)
        assert not self.is_alive(), "the producer did not finish flushing"


# --- 1. Kafka's replication system test --------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("store", ["local", "zookeeper"])
def test_leader_kills_lose_nothing_and_duplicate_nothing(cluster_factory, request, store):
    metadata = None
    if store == "zookeeper":
        metadata = f"zk://{request.getfixturevalue('zookeeper')}/logbus-{uuid.uuid4().hex[:10]}"
    cluster = cluster_factory(brokers=3, metadata=metadata)
    topic = "replicated"
    create_topic(cluster, topic, partitions=3, rf=3, configs={"min.insync.replicas": "2"})
    writer = SequenceProducer(cluster.bootstrap, topic, 3)
    writer.start()
    try:
        cluster.wait_until(lambda: writer.acked_count > 300, 30, "first acknowledged records")
        for round_ in range(5):
            old = wait_leader(cluster, topic, 0)
            before = writer.acked_count
            cluster.brokers[old].kill()
            new = wait_leader(cluster, topic, 0, not_in={old}, timeout=20)
            assert new != old
            # the producer goes on through the new leader while the old one is down
            cluster.wait_until(lambda before=before: writer.acked_count > before + 200, 30, f"round {round_}: produce after failover")
            cluster.brokers[old].start()
            for p in range(3):
                wait_isr(cluster, topic, p, {0, 1, 2}, timeout=40)
    finally:
        writer.finish()
    assert not writer.fatal, writer.fatal
    assert writer.unflushed == 0
    assert not writer.failed, f"{len(writer.failed)} records failed: {writer.failed[:5]}"
    read = consume(cluster.bootstrap, topic, 3, timeout=60)
    for p in range(3):
        seqs = [int(v.split(b":")[1]) for _, v in read[p]]
        assert all(v.startswith(b"%d:" % p) for _, v in read[p])
        dups = len(seqs) - len(set(seqs))
        assert dups == 0, f"partition {p}: {dups} duplicates"
        assert seqs == sorted(seqs), f"partition {p}: out of order"
        missing = set(writer.acked[p]) - set(seqs)
        assert not missing, f"partition {p}: {len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
        # every record was acknowledged, so the partition holds exactly the producer's sequence, gap-free
        assert seqs == list(range(writer.sent[p])), f"partition {p}: {len(seqs)} records, {writer.sent[p]} sent"
    assert sum(len(r) for r in read.values()) == writer.acked_count > 1000


# --- 2. min.insync.replicas ---------------------------------------------------------------------


@pytest.mark.slow
def test_min_isr_refuses_acks_all_then_recovers(cluster_factory):
    cluster = cluster_factory(brokers=3)
    topic = "guarded"
    create_topic(cluster, topic, rf=3, configs={"min.insync.replicas": "2"})
    assert produce_sync(cluster.bootstrap, topic, [b"before-%d" % i for i in range(10)]) == [None] * 10
    lead = leader(cluster, topic)
    followers = [b for b in range(3) if b != lead]
    for b in followers:
        cluster.brokers[b].kill()
    wait_isr(cluster, topic, 0, {lead}, timeout=20)
    on_disk = log_bytes(cluster, lead, topic)

    # without retries the client reports the broker's NOT_ENOUGH_REPLICAS itself
    errors = produce_sync(cluster.bootstrap, topic, [b"refused-%d" % i for i in range(5)], retries=0, timeout_ms=5000)
    assert all(e is not None and e.code() == KafkaError.NOT_ENOUGH_REPLICAS for e in errors), errors
    # with retries it keeps trying until the message timeout, then reports a failure: never a success
    errors = produce_sync(cluster.bootstrap, topic, [b"timed-out-%d" % i for i in range(5)], timeout_ms=2000)
    assert all(e is not None for e in errors), errors
    assert log_bytes(cluster, lead, topic) == on_disk, "refused records were appended to the leader's log"
    # acks=1 does not need the ISR, and readers still read
    assert produce_sync(cluster.bootstrap, topic, [b"acks1"], acks="1") == [None]
    values = [v for _, v in consume(cluster.bootstrap, topic)[0]]
    assert values == [b"before-%d" % i for i in range(10)] + [b"acks1"]

    back = followers[0]
    cluster.brokers[back].start()
    wait_isr(cluster, topic, 0, {lead, back}, timeout=30)
    assert produce_sync(cluster.bootstrap, topic, [b"after-%d" % i for i in range(10)]) == [None] * 10
    wait_same_logs(cluster, topic, [lead, back])
    values = [v for _, v in consume(cluster.bootstrap, topic)[0]]
    assert values == [b"before-%d" % i for i in range(10)] + [b"acks1"] + [b"after-%d" % i for i in range(10)]


def test_acks_all_waiting_for_a_fenced_follower_ends_when_the_controller_removes_it(cluster_factory):
    """A produce waits for a follower that stopped (SIGSTOP, then SIGKILL); the controller fences it when its
    session ends and removes it from the ISR. The waiting request is answered then, with
    NOT_ENOUGH_REPLICAS_AFTER_APPEND (20: maybe written), not left to its 30 s timeout. The leader's own lag check
    is set far out so that the controller's ISR change is the one that must wake the request."""
    cluster = cluster_factory(brokers=3, settings={"replica_lag_time_max_ms": 120_000})
    topic = "fenced-follower"
    lead = cluster.admin().list_topics(timeout=10).controller_id   # any live broker; the follower is another one
    follower = next(b for b in range(3) if b != lead)
    futures = admin_of(cluster).create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[lead, follower]],
                                                        config={"min.insync.replicas": "2"})], operation_timeout=10)
    futures[topic].result(20)
    wait_isr(cluster, topic, 0, {lead, follower}, timeout=20)
    assert produce_sync(cluster.bootstrap, topic, [b"both"]) == [None]

    cluster.brokers[follower].proc.send_signal(signal.SIGSTOP)   # alive to the controller, but fetching nothing
    errors: list = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "retries": 0, "linger.ms": 0,
                         "enable.idempotence": False, "request.timeout.ms": 30_000, "message.timeout.ms": 40_000})
    producer.produce(topic, b"waits", partition=0, on_delivery=lambda err, msg: errors.append(err))
    producer.poll(0.5)
    assert errors == [], "the record was answered while the follower could not have fetched it"
    cluster.brokers[follower].kill()
    assert producer.flush(45) == 0
    assert errors[0] is not None and errors[0].code() == KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND, errors
    wait_isr(cluster, topic, 0, {lead}, timeout=10)   # every broker's metadata follows within its store poll


@pytest.mark.slow
def test_dead_follower_stays_out_of_the_isr(cluster_factory):
    """The leader must not bring a dead follower back into the ISR from its last fetch position
    when another follower fetches; acks=all counts only live, caught-up followers."""
    cluster = cluster_factory(brokers=3)
    topic = "idle"
    create_topic(cluster, topic, rf=3, configs={"min.insync.replicas": "3"})
    assert produce_sync(cluster.bootstrap, topic, [b"a", b"b"]) == [None, None]
    lead = leader(cluster, topic)
    dead = next(b for b in range(3) if b != lead)
    cluster.brokers[dead].kill()
    wait_isr(cluster, topic, 0, {0, 1, 2} - {dead}, timeout=20)
    # One broker answered with the new ISR; the others take up the store's change within their 100 ms poll. Until
    # then a stale answer would show the dead follower still in.
    time.sleep(0.5)
    on_disk = log_bytes(cluster, lead, topic)
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:  # the partition is idle and the other follower keeps fetching
        assert dead not in cluster.partition(topic, 0)[2], "a dead follower came back into the ISR"
        time.sleep(0.1)
    errors = produce_sync(cluster.bootstrap, topic, [b"needs-three"], retries=0, timeout_ms=5000)
    assert errors[0] is not None and errors[0].code() == KafkaError.NOT_ENOUGH_REPLICAS, errors
    assert log_bytes(cluster, lead, topic) == on_disk


# --- 3. controller failover ---------------------------------------------------------------------


@pytest.mark.slow
def test_controller_dies_another_takes_over_and_elects(cluster_factory):
    cluster = cluster_factory(brokers=3)
    topic = "spread"
    create_topic(cluster, topic, partitions=6, rf=3)
    first = describe_controller(cluster)
    assert first in (0, 1, 2)
    cluster.brokers[first].kill()

    def other_controller():
        c = describe_controller(cluster)
        return (c,) if c not in (first, -1) and cluster.brokers[c].alive() else None

    (second,) = cluster.wait_until(other_controller, 20, "a new controller")
    # partitions the dead controller led got new leaders from the new controller
    for p in range(6):
        assert wait_leader(cluster, topic, p, not_in={first}, timeout=20) != first
    # it keeps electing: kill the leader of a partition led by the third broker
    third = ({0, 1, 2} - {first, second}).pop()
    led = [p for p in range(6) if leader(cluster, topic, p) == third]
    assert led, "rack-unaware assignment gives every broker preferred leaderships of 6 partitions"
    cluster.brokers[third].kill()
    for p in led:
        assert wait_leader(cluster, topic, p, not_in={first, third}, timeout=20) == second
    assert produce_sync(cluster.bootstrap, topic, [b"still-here"], partition=led[0], acks="1") == [None]
    assert describe_controller(cluster) == second


@pytest.mark.slow
def test_leadership_returns_to_preferred_replicas_by_itself(cluster_factory):
    """auto.leader.rebalance.enable: after a leader comes back, the controller gives it its preferred
    partitions again without anyone asking (a check every second here, 300 s by default)."""
    cluster = cluster_factory(brokers=3, settings={"leader_imbalance_check_interval_seconds": 1})
    topic = "preferred"
    create_topic(cluster, topic, partitions=3, rf=3)
    preferred = {p: cluster.partition(topic, p)[1][0] for p in range(3)}
    for p in range(3):
        wait_isr(cluster, topic, p, {0, 1, 2})
    victim = preferred[0]
    cluster.brokers[victim].kill()
    assert wait_leader(cluster, topic, 0, not_in={victim}) != victim
    cluster.brokers[victim].start()
    wait_isr(cluster, topic, 0, {0, 1, 2})
    cluster.wait_until(lambda: all(leader(cluster, topic, p) == preferred[p] for p in range(3)), 30,
                       "every partition led by its preferred replica again")
    assert produce_sync(cluster.bootstrap, topic, [b"home"], partition=0) == [None]


# --- 4. truncation of what never reached the ISR --------------------------------------------------


@pytest.mark.slow
def test_former_leader_truncates_records_that_never_reached_the_isr(cluster_factory):
    cluster = cluster_factory(brokers=3)
    topic = "diverged"
    create_topic(cluster, topic, rf=3, configs={"min.insync.replicas": "1"})
    assert produce_sync(cluster.bootstrap, topic, [b"common-%d" % i for i in range(10)]) == [None] * 10
    old = leader(cluster, topic)
    followers = [b for b in range(3) if b != old]
    wait_same_logs(cluster, topic, [0, 1, 2])
    for b in followers:
        cluster.brokers[b].kill()
    wait_isr(cluster, topic, 0, {old}, timeout=20)
    lost = [b"only-on-old-leader-%d" % i for i in range(5)]
    assert produce_sync(cluster.bootstrap, topic, lost, acks="1") == [None] * 5
    cluster.brokers[old].kill()
    for b in followers:
        cluster.brokers[b].start()
    cluster.wait_until(lambda: len(admin_of(cluster).list_topics(timeout=5).brokers) == 2, 20, "two live brokers")
    # the ISR holds only the dead leader: without unclean election the partition stays offline
    time.sleep(3)
    assert leader(cluster, topic) == -1
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"unclean.leader.election.enable": "true",
                                                                             "min.insync.replicas": "1"})
    admin_of(cluster).alter_configs([resource])[resource].result(10)
    new = wait_leader(cluster, topic, not_in={old}, timeout=20)
    assert new in followers
    later = [b"after-unclean-%d" % i for i in range(7)]
    assert produce_sync(cluster.bootstrap, topic, later) == [None] * 7

    cluster.brokers[old].start()
    wait_isr(cluster, topic, 0, {0, 1, 2}, timeout=30)
    cluster.wait_until(lambda: "truncating 5 records" in cluster.brokers[old].log(), 10, "the old leader's truncation log line")
    data = wait_same_logs(cluster, topic, [0, 1, 2])
    assert all(v not in data for v in lost), "a record that never reached the ISR is still on disk"
    values = [v for _, v in consume(cluster.bootstrap, topic)[0]]
    assert values == [b"common-%d" % i for i in range(10)] + later
    # and with the old leader leading again, readers see the same log
    for b in followers:
        cluster.brokers[b].kill()
    wait_leader(cluster, topic, not_in=set(followers), timeout=20)
    assert [v for _, v in consume(cluster.bootstrap, topic)[0]] == values


# --- 5. observers ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_observers_replicate_outside_the_isr(cluster_factory):
    cluster = cluster_factory(brokers=5, racks=WEST_EAST_RACKS)
    topic = "west-east"
    create_topic(cluster, topic, rf=-1, configs={"confluent.placement.constraints": json.dumps(WEST_EAST_PLACEMENT),
                                                 "min.insync.replicas": "2"})
    # every broker learns of the new topic within a metadata poll; ask until the one answering has
    lead, replicas, isr = cluster.wait_until(lambda: cluster.partition(topic, 0), 10, "the topic in Metadata")
    assert sorted(replicas) == [0, 1, 2, 3, 4]
    assert replicas[3:] in ([3, 4], [4, 3]), f"observers come last: {replicas}"
    assert sorted(isr) == [0, 1, 2] and lead in (0, 1, 2)
    values = [b"r-%d" % i for i in range(200)]
    assert produce_sync(cluster.bootstrap, topic, values) == [None] * 200
    data = wait_same_logs(cluster, topic, [0, 1, 2, 3, 4])
    assert all(v in data for v in values)
    time.sleep(2)  # caught-up observers still stay out of the ISR
    assert sorted(cluster.partition(topic, 0)[2]) == [0, 1, 2]

    for b in (3, 4):
        cluster.brokers[b].kill()
    started = time.monotonic()
    assert produce_sync(cluster.bootstrap, topic, [b"no-observers-%d" % i for i in range(20)], timeout_ms=5000) == [None] * 20
    # acks=all did not wait for the observers (their deaths are not even noticed yet: session 2 s)
    assert time.monotonic() - started < 1.5
    assert sorted(cluster.partition(topic, 0)[2]) == [0, 1, 2]


# --- 6. unclean election through ElectLeaders -----------------------------------------------------


@pytest.mark.slow
def test_unclean_election_makes_an_observer_leader(cluster_factory):
    cluster = cluster_factory(brokers=5, racks=WEST_EAST_RACKS)
    topic = "orphaned"
    create_topic(cluster, topic, rf=-1, configs={"confluent.placement.constraints": json.dumps(WEST_EAST_PLACEMENT)})
    values = [b"v-%d" % i for i in range(50)]
    assert produce_sync(cluster.bootstrap, topic, values) == [None] * 50
    wait_same_logs(cluster, topic, [0, 1, 2, 3, 4])
    tp = [TopicPartition(topic, 0)]
    # a live leader needs no unclean election
    result = admin_of(cluster).elect_leaders(ElectionType.UNCLEAN, tp).result(10)
    assert election_code(result[TopicPartition(topic, 0)]) == ELECTION_NOT_NEEDED, result

    for b in (0, 1, 2):
        cluster.brokers[b].kill()
    cluster.wait_until(lambda: leader(cluster, topic) == -1, 20, "the partition offline")
    time.sleep(1)
    assert leader(cluster, topic) == -1, "the controller elected an observer without being asked"
    result = admin_of(cluster).elect_leaders(ElectionType.UNCLEAN, tp).result(10)
    assert result[TopicPartition(topic, 0)] is None, result
    new = wait_leader(cluster, topic, timeout=10)
    assert new in (3, 4)
    # the broker that answered knew the new leader; another may take up the change one store poll later
    wait_isr(cluster, topic, 0, {new}, timeout=10)
    assert [v for _, v in consume(cluster.bootstrap, topic)[0]] == values
    assert produce_sync(cluster.bootstrap, topic, [b"after"]) == [None]
    assert any("unclean election of orphaned-0" in cluster.brokers[b].log() for b in (3, 4))


# --- 7. bad input ---------------------------------------------------------------------------------


def _create_error(cluster, topic: NewTopic) -> KafkaError:
    future = admin_of(cluster).create_topics([topic], operation_timeout=10)[topic.topic]
    with pytest.raises(KafkaException) as info:
        future.result(15)
    return info.value.args[0]


def test_bad_placement_replication_and_elections_get_kafka_errors(cluster_factory):
    cluster = cluster_factory(brokers=3, racks=["west", "west", "east"])
    overlap = {"version": 1, "replicas": [{"count": 1, "constraints": {"rack": "west"}}],
               "observers": [{"count": 1, "constraints": {"rack": "west"}}]}
    err = _create_error(cluster, NewTopic("overlap", 1, -1, config={"confluent.placement.constraints": json.dumps(overlap)}))
    assert err.code() == INVALID_CONFIG and "west" in err.str(), err

    unknown_key = {"version": 1, "replicas": [{"count": 1, "constraints": {"rack": "west", "zone": "a"}}]}
    err = _create_error(cluster, NewTopic("unknown-key", 1, -1, config={"confluent.placement.constraints": json.dumps(unknown_key)}))
    assert err.code() == INVALID_CONFIG and "zone" in err.str(), err

    err = _create_error(cluster, NewTopic("not-json", 1, -1, config={"confluent.placement.constraints": "{replicas"}))
    assert err.code() == INVALID_CONFIG, err

    err = _create_error(cluster, NewTopic("too-many", 1, 4))
    assert err.code() == INVALID_REPLICATION_FACTOR and "4" in err.str() and "3" in err.str(), err

    nowhere = {"version": 1, "replicas": [{"count": 1, "constraints": {"rack": "north"}}]}
    err = _create_error(cluster, NewTopic("no-rack", 1, -1, config={"confluent.placement.constraints": json.dumps(nowhere)}))
    assert err.code() == INVALID_REPLICATION_FACTOR and "north" in err.str(), err
    assert "overlap" not in admin_of(cluster).list_topics(timeout=5).topics

    # elections for partitions that do not exist, through both clients
    create_topic(cluster, "real", rf=3)
    result = admin_of(cluster).elect_leaders(ElectionType.PREFERRED, [TopicPartition("ghost", 0), TopicPartition("real", 7)]).result(10)
    for tp in (TopicPartition("ghost", 0), TopicPartition("real", 7)):
        assert election_code(result[tp]) == UNKNOWN_TOPIC_OR_PARTITION, result
    from kafka.admin import KafkaAdminClient

    kadmin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=10000)
    try:
        resp = kadmin.elect_leaders(1, {"ghost": [0]}, raise_errors=False)
        codes = [(r.topic, p.partition_id, p.error_code, p.error_message) for r in resp.replica_election_results for p in r.partition_result]
        assert codes == [("ghost", 0, UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")], codes
    finally:
        kadmin.close()
    # the brokers are all still serving
    assert len(admin_of(cluster).list_topics(timeout=5).brokers) == 3
