"""confluent-kafka (librdkafka) producer and consumer against a real broker process."""

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap: str, name: str, partitions: int, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})], operation_timeout=10)
    futures[name].result(timeout=15)


def produce_numbered(bootstrap: str, topic: str, count: int, partitions: int, compression: str, base_ts: int) -> int:
    """Record i goes to partition i % partitions with key k{i}, header seq=i and timestamp base_ts + i."""
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": compression, "linger.ms": 20, "acks": "all",
                         "batch.size": 1_000_000, "queue.buffering.max.messages": 2_000_000})
    failures = []

    def on_delivery(err, msg):
        if err is not None:
            failures.append(err)

    for i in range(count):
        while True:
            try:
                producer.produce(topic, value=b"value-%d-" % i + b"x" * 40, key=b"k%d" % i, partition=i % partitions,
                                 headers=[("seq", str(i).encode()), ("origin", b"test")], timestamp=base_ts + i, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        if i % 10000 == 0:
            producer.poll(0)
    remaining = producer.flush(120)
    assert remaining == 0, f"{remaining} records not delivered"
    assert not failures, failures[:5]
    return count


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 180.0) -> dict[int, list]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                         "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760, "enable.partition.eof": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got: dict[int, list] = {p: [] for p in range(partitions)}
    count = 0
    deadline = time.monotonic() + timeout
    try:
        while count < expected and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=10000, timeout=1.0):
                assert m.error() is None, m.error()
                got[m.partition()].append((m.offset(), m.key(), m.value(), m.headers(), m.timestamp()))
                count += 1
    finally:
        consumer.close()
    return got


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_million_records_round_trip(broker, compression):
    topic, partitions, count = f"million-{compression}", 8, 1_000_000
    create_topic(broker.bootstrap, topic, partitions)
    base_ts = 1_700_000_000_000
    produce_numbered(broker.bootstrap, topic, count, partitions, compression, base_ts)
    got = consume_all(broker.bootstrap, topic, partitions, count)

    assert sum(len(v) for v in got.values()) == count
    for p, records in got.items():
        expected_i = p
        for n, (offset, key, value, headers, (ts_type, ts)) in enumerate(records):
            assert offset == n, f"partition {p}: offset {offset} at position {n}"
            assert key == b"k%d" % expected_i
            assert value.startswith(b"value-%d-" % expected_i)
            assert headers == [("seq", str(expected_i).encode()), ("origin", b"test")]
            assert ts == base_ts + expected_i and ts_type == 1  # TIMESTAMP_CREATE_TIME
            expected_i += partitions


def test_small_round_trip_every_codec(broker):
    topic = "codecs"
    create_topic(broker.bootstrap, topic, 2)
    total = 0
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        total += produce_numbered(broker.bootstrap, topic, 500, 2, codec, 1_600_000_000_000 + total)
    got = consume_all(broker.bootstrap, topic, 2, total, timeout=60)
    assert sum(len(v) for v in got.values()) == total
    for p, records in got.items():
        assert [r[0] for r in records] == list(range(len(records)))


def test_log_append_time_topic(broker):
    create_topic(broker.bootstrap, "appendtime", 1, {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    produce_numbered(broker.bootstrap, "appendtime", 100, 1, "lz4", 1_000)
    got = consume_all(broker.bootstrap, "appendtime", 1, 100, timeout=30)
    after = int(time.time() * 1000)
    assert len(got[0]) == 100
    for _, _, _, _, (ts_type, ts) in got[0]:
        assert ts_type == 2  # TIMESTAMP_LOG_APPEND_TIME
        assert before - 1000 <= ts <= after + 1000
