"""The logbus Spark data source against a real broker process: batch reads equal a confluent-kafka consumer,
streaming micro-batches with read limits, new partitions, DC prefixes, and clear errors for bad input."""

from __future__ import annotations

import json
import time

import pytest

from brokerproc import BrokerProcess  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewPartitions  # noqa: E402
from pipeline_data import create_topic  # noqa: E402
from pipeline_helpers import spark_session  # noqa: E402

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def bus(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("bus") / "data").start()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def spark():
    s = spark_session()
    yield s
    s.stop()


def produce(bootstrap, topic, n, partitions, start=0, bad_every=0):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        hs = [("lb.source", b"src-%d" % (i % 5)), ("lb.seqno", str(i).encode()), ("lb.created", b"1700000000000"),
              ("lb.type", b"access"), ("app", b"\x00\x01")]
        if bad_every and i % bad_every == 0:
            hs[1] = ("lb.seqno", b"12x")
        p.produce(topic, key=b"k%d" % i, value=b"value-%d" % i, partition=i % partitions, headers=hs)
    assert p.flush(30) == 0


def consume_range(bootstrap, topic, partition, start, end):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "t", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, partition, start)])
    out = []
    deadline = time.monotonic() + 30
    while (not out or out[-1].offset() < end - 1) and time.monotonic() < deadline:
        for m in c.consume(1000, 0.5):
            if m.error() is None and start <= m.offset() < end:
                out.append(m)
    c.close()
    assert len(out) == end - start, f"consumer read {len(out)} of {end - start}"
    return out


def test_batch_read_equals_confluent_consumer(bus, spark):
    topic = "dc1.acme.web.batch"
    create_topic(bus.bootstrap, topic, 3)
    produce(bus.bootstrap, topic, 3000, 3)
    starting = json.dumps({topic: {"0": 100, "1": -2, "2": 7}})
    ending = json.dumps({topic: {"0": 900, "1": 500, "2": -1}})
    df = (spark.read.format("logbus").option("bootstrap.servers", bus.bootstrap).option("subscribe", topic)
          .option("startingOffsets", starting).option("endingOffsets", ending).option("minPartitions", "6").load())
    got = {(r.partition, r.offset): r for r in df.collect()}
    want = {}
    for part, (s, e) in {0: (100, 900), 1: (0, 500), 2: (7, 1000)}.items():
        for m in consume_range(bus.bootstrap, topic, part, s, e):
            want[(part, m.offset())] = m
    assert set(got) == set(want)
    for k, m in want.items():
        r = got[k]
        assert (r.topic, bytes(r.key), bytes(r.value)) == (m.topic(), m.key(), m.value())
        assert int(r.timestamp.timestamp() * 1000) == m.timestamp()[1]
        assert [(h.key, bytes(h.value)) for h in r.headers] == m.headers()
        assert r.source == m.headers()[0][1].decode() and r.seqno == int(m.headers()[1][1]) and r.type == "access"
        assert r.malformed is None
    # A retried read of the same ranges returns the same rows.
    again = {(r.partition, r.offset): (bytes(r.value), r.seqno) for r in df.collect()}
    assert again == {k: (bytes(v.value), v.seqno) for k, v in got.items()}


def test_streaming_read_limits_and_new_partitions(bus, spark, tmp_path):
    topic = "dc1.acme.web.stream"
    create_topic(bus.bootstrap, topic, 2)
    produce(bus.bootstrap, topic, 1000, 2)
    df = (spark.readStream.format("logbus").option("bootstrap.servers", bus.bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "300").load())
    q = (df.select("partition", "offset", "seqno").writeStream.format("memory").queryName("limited")
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="200 milliseconds").start())
    try:
        deadline = time.monotonic() + 90
        while spark.table("limited").count() < 1000 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert spark.table("limited").count() == 1000
        sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
        assert max(sizes) <= 300 and len(sizes) >= 4, sizes
        # A new partition is picked up, from its first offset.
        admin = AdminClient({"bootstrap.servers": bus.bootstrap})
        admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
        p = Producer({"bootstrap.servers": bus.bootstrap})
        for i in range(50):
            p.produce(topic, value=b"new", partition=2, headers=[("lb.source", b"n"), ("lb.seqno", str(i).encode())])
        assert p.flush(30) == 0
        deadline = time.monotonic() + 90
        while spark.table("limited").filter("partition = 2").count() < 50 and time.monotonic() < deadline:
            time.sleep(0.5)
        rows = spark.table("limited").collect()
        assert len(rows) == 1050 and len({(r.partition, r.offset) for r in rows}) == 1050
        assert sorted(r.offset for r in rows if r.partition == 2) == list(range(50))
        latest = json.loads(q.lastProgress["sources"][0]["latestOffset"])
        assert latest[topic]["2"] == 50
    finally:
        q.stop()


def test_available_now_with_logical_topics_and_prefixes(bus, spark, tmp_path):
    for dc in ("dc1", "dc2", "dc3"):
        create_topic(bus.bootstrap, f"{dc}.acme.api.calls", 1)
        produce(bus.bootstrap, f"{dc}.acme.api.calls", 10, 1)
    df = (spark.readStream.format("logbus").option("bootstrap.servers", bus.bootstrap).option("topics", "acme/api/calls")
          .option("prefixes", "dc1,dc3").option("startingOffsets", "earliest").load())
    q = (df.select("topic").writeStream.format("memory").queryName("prefixed")
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    assert q.awaitTermination(90)
    topics = sorted(r.topic for r in spark.table("prefixed").collect())
    assert topics == ["dc1.acme.api.calls"] * 10 + ["dc3.acme.api.calls"] * 10


def test_malformed_headers_are_flagged_not_dropped(bus, spark):
    topic = "dc1.acme.web.bad"
    create_topic(bus.bootstrap, topic, 1)
    produce(bus.bootstrap, topic, 100, 1, bad_every=10)
    df = spark.read.format("logbus").option("bootstrap.servers", bus.bootstrap).option("subscribe", topic).load()
    assert df.count() == 100
    bad = df.filter("malformed is not null").collect()
    assert len(bad) == 10 and all("lb.seqno is not a decimal number: '12x'" in r.malformed and r.seqno is None for r in bad)
    only = (spark.read.format("logbus").option("bootstrap.servers", bus.bootstrap).option("subscribe", topic)
            .option("malformedOnly", "true").load())
    assert only.count() == 10


def test_unknown_topic_bad_option_and_unreachable_cluster_fail_clearly(bus, spark):
    from pyspark.errors import PySparkException

    with pytest.raises(PySparkException, match="unknown topic.*no-such-topic"):
        spark.read.format("logbus").option("bootstrap.servers", bus.bootstrap).option("subscribe", "no-such-topic").load().count()
    with pytest.raises(PySparkException, match="maxoffsetspertrigger.*positive integer"):
        (spark.readStream.format("logbus").option("bootstrap.servers", bus.bootstrap).option("subscribe", "x")
         .option("maxOffsetsPerTrigger", "-5").load().writeStream.format("noop").start().awaitTermination(30))
    t0 = time.monotonic()
    with pytest.raises(PySparkException, match="failed against the cluster at 127.0.0.1:1 .*_TRANSPORT|failed against the cluster at 127.0.0.1:1"):
        (spark.read.format("logbus").option("bootstrap.servers", "127.0.0.1:1").option("subscribe", "t")
         .option("requestTimeoutMs", "2000").option("fetchOffset.numRetries", "1").load().count())
    assert time.monotonic() - t0 < 30
