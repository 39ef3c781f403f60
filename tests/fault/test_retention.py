"""Retention deletes whole old segments, advances the log start offset, and consumers below it reset."""

import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from kafkawire import WireConnection
from logbus.protocol.errors import ErrorCode

FAST_RETENTION = "retention_check_interval_ms = 300\n"


def fill(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 10})
    for i in range(count):
        producer.produce(topic, value=b"%06d" % i + b"." * 200, partition=0)
        if i % 10 == 0:
            producer.flush(10)
    assert producer.flush(30) == 0


def wait_for_log_start_above(conn: WireConnection, topic: str, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        resp = conn.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -2}]}]})
        start = resp.topics[0].partitions[0].offset
        if start > 0:
            return start
        time.sleep(0.2)
    raise AssertionError("retention never advanced the log start offset")


def test_retention_by_bytes_deletes_whole_segments(broker_factory):
    b = broker_factory(FAST_RETENTION)
    conn = WireConnection(b.bootstrap)
    assert conn.create_topic("rb", 1, {"segment.bytes": "20000", "retention.bytes": "60000"}).error_code == ErrorCode.none
    fill(b.bootstrap, "rb", 1000)
    start = wait_for_log_start_above(conn, "rb")
    segments = sorted(int(p.stem) for p in Path(b.data_dir, "rb-0").glob("*.log"))
    assert segments[0] == start, "the log start offset is the base offset of the oldest remaining segment"
    total = sum(p.stat().st_size for p in Path(b.data_dir, "rb-0").glob("*.log"))
    assert total < 60000 + 20000 + 2000

    below = conn.fetch("rb", 0, 0)
    assert below.error_code == ErrorCode.offset_out_of_range
    assert below.log_start_offset == start
    at = conn.fetch("rb", 0, start)
    assert at.error_code == ErrorCode.none and at.records
    conn.close()

    # A consumer asked to start below the log start resets per auto.offset.reset.
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([TopicPartition("rb", 0, 0)])
    first = None
    deadline = time.monotonic() + 30
    while first is None and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is not None and not m.error():
            first = m.offset()
    c.close()
    assert first == start

    strict = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g2", "auto.offset.reset": "error", "enable.auto.commit": False})
    strict.assign([TopicPartition("rb", 0, 0)])
    err = None
    deadline = time.monotonic() + 30
    while err is None and time.monotonic() < deadline:
        m = strict.poll(1.0)
        if m is not None and m.error():
            err = m.error()
    strict.close()
    assert err is not None and err.code() == KafkaError._AUTO_OFFSET_RESET


def test_retention_by_time(broker_factory):
    b = broker_factory(FAST_RETENTION)
    conn = WireConnection(b.bootstrap)
    assert conn.create_topic("rt", 1, {"segment.bytes": "20000", "retention.ms": "2000"}).error_code == ErrorCode.none
    fill(b.bootstrap, "rt", 300)
    start = wait_for_log_start_above(conn, "rt", timeout=30)
    assert start > 0
    segments = sorted(int(p.stem) for p in Path(b.data_dir, "rt-0").glob("*.log"))
    assert segments[0] == start
    conn.close()
