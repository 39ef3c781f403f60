"""The streaming source when the cluster misbehaves: a broker restart in the middle of a query, and ranges
deleted by retention with failOnDataLoss true (the query fails, saying why) and false (skipped and reported)."""

from __future__ import annotations

import json
import time

import pytest

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from pipeline_data import create_topic  # noqa: E402
from pipeline_helpers import spark_session  # noqa: E402

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def spark():
    s = spark_session()
    yield s
    s.stop()


def produce(bootstrap, topic, start, n, partitions=2):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for i in range(start, start + n):
        p.produce(topic, value=b"v" * 50, partition=i % partitions, headers=[("lb.source", b"s"), ("lb.seqno", str(i).encode())])
    assert p.flush(30) == 0


def wait_rows(spark, table, n, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if spark.table(table).count() >= n:
            return
        time.sleep(0.5)
    raise AssertionError(f"{table}: {spark.table(table).count()} rows, expected {n}, within {timeout}s")


def test_query_resumes_after_broker_restart(broker_factory, spark, tmp_path):
    b = broker_factory()
    topic = "dc1.acme.web.restart"
    create_topic(b.bootstrap, topic, 2)
    produce(b.bootstrap, topic, 0, 2000)
    df = (spark.readStream.format("logbus").option("bootstrap.servers", b.bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "500")
          .option("fetchOffset.numRetries", "10").option("requestTimeoutMs", "5000").load())
    q = (df.select("seqno").writeStream.format("memory").queryName("restarted")
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="300 milliseconds").start())
    try:
        wait_rows(spark, "restarted", 500, 90)
        b.kill()  # SIGKILL in the middle of the query
        time.sleep(2)
        assert q.isActive, q.exception()
        b.start()
        produce(b.bootstrap, topic, 2000, 1000)
        wait_rows(spark, "restarted", 3000, 120)
        time.sleep(1)
        seqnos = sorted(r.seqno for r in spark.table("restarted").collect())
        assert seqnos == list(range(3000)), "every record once, none lost or repeated"
        assert q.isActive and q.exception() is None
    finally:
        q.stop()


RETENTION_TOML = "retention_check_interval_ms = 300\n"


def deleted_prefix(b, topic):
    """Produce small segments and wait until retention has deleted the oldest ones; returns the log start offset."""
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "batch.num.messages": 10})
    for i in range(300):  # small batches, so that segments roll
        p.produce(topic, value=b"." * 200, partition=0, headers=[("lb.source", b"s"), ("lb.seqno", str(i).encode())])
        if i % 10 == 0:
            p.flush(10)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "t"})
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5, cached=False)
            if low > 0:
                return low, high
            time.sleep(0.3)
    finally:
        c.close()
    raise AssertionError("retention deleted nothing within 60s")


@pytest.mark.parametrize("fail", [True, False])
def test_range_deleted_by_retention(broker_factory, spark, tmp_path, fail):
    b = broker_factory(RETENTION_TOML)
    topic = f"dc1.acme.web.retention{int(fail)}"
    create_topic(b.bootstrap, topic, 1, {"segment.bytes": "20000", "retention.ms": "2000"})
    low, high = deleted_prefix(b, topic)
    report = tmp_path / "loss.jsonl"
    df = (spark.readStream.format("logbus").option("bootstrap.servers", b.bootstrap).option("subscribe", topic)
          .option("startingOffsets", json.dumps({topic: {"0": 0}})).option("failOnDataLoss", str(fail).lower())
          .option("dataLossReport", str(report)).load())
    name = f"retention{int(fail)}"
    q = (df.select("offset").writeStream.format("memory").queryName(name)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    if fail:
        with pytest.raises(Exception) as err:
            q.awaitTermination(120)
        text = str(err.value)
        assert "offsets [0, " in text and "were deleted before they were read" in text and "failOnDataLoss to false" in text
    else:
        assert q.awaitTermination(120)
        assert q.exception() is None
        offsets = sorted(r.offset for r in spark.table(name).collect())
        assert offsets and offsets[0] >= low and offsets[-1] == high - 1
        assert offsets == list(range(offsets[0], high))
        lines = [json.loads(x) for x in report.read_text().splitlines()]
        assert lines and lines[0]["start"] == 0 and lines[0]["end"] >= low and "deleted" in lines[0]["message"]
