"""kafka-python producer, consumer and admin client, and kcat, against a real broker process."""

import json
import shutil
import subprocess

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewPartitions, NewTopic

COUNT = 20_000


def test_kafka_python_round_trip(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    admin.create_topics([NewTopic("kp", num_partitions=4, replication_factor=1)])
    assert "kp" in admin.list_topics()
    admin.create_partitions({"kp": NewPartitions(total_count=6)})

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", compression_type="gzip", linger_ms=10)
    futures = [
        producer.send("kp", key=b"k%d" % i, value=b"v%d" % i, partition=i % 6, headers=[("seq", str(i).encode())], timestamp_ms=1_650_000_000_000 + i)
        for i in range(COUNT)
    ]
    producer.flush(timeout=60)
    offsets = [f.get(timeout=30) for f in futures]
    assert all(md.partition == i % 6 for i, md in enumerate(offsets))
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest", consumer_timeout_ms=5000)
    consumer.assign([TopicPartition("kp", p) for p in range(6)])
    consumer.seek_to_beginning()
    seen: dict[int, list[int]] = {p: [] for p in range(6)}
    for m in consumer:
        i = int(dict(m.headers)["seq"])
        assert m.key == b"k%d" % i and m.value == b"v%d" % i and m.timestamp == 1_650_000_000_000 + i
        seen[m.partition].append(i)
        if sum(map(len, seen.values())) == COUNT:
            break
    consumer.close()
    for p, items in seen.items():
        assert items == list(range(p, COUNT, 6))

    admin.delete_topics(["kp"])
    assert "kp" not in admin.list_topics()
    admin.close()


def test_kafka_python_offsets_by_time(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("times", num_partitions=1, replication_factor=1)])
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
    for i in range(10):
        producer.send("times", value=b"x", partition=0, timestamp_ms=1_000_000 + i * 1000).get(timeout=10)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    tp = TopicPartition("times", 0)
    assert consumer.beginning_offsets([tp])[tp] == 0
    assert consumer.end_offsets([tp])[tp] == 10
    found = consumer.offsets_for_times({tp: 1_005_000})[tp]
    assert found.offset == 5 and found.timestamp == 1_005_000
    assert consumer.offsets_for_times({tp: 9_999_999})[tp] is None
    consumer.close()
    admin.close()


@pytest.fixture
def kcat():
    path = shutil.which("kcat")
    if path is None:
        pytest.fail("kcat is not installed: the test command installs it (apt-get install kcat)")
    return path


def test_kcat_list_produce_consume(broker, kcat):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("kc", num_partitions=3, replication_factor=1)])
    admin.close()
    listing = subprocess.run([kcat, "-b", broker.bootstrap, "-L", "-J"], capture_output=True, text=True, timeout=30)
    assert listing.returncode == 0, listing.stderr
    meta = json.loads(listing.stdout)
    topic = next(t for t in meta["topics"] if t["topic"] == "kc")
    assert len(topic["partitions"]) == 3
    assert meta["brokers"][0]["name"] == broker.bootstrap

    lines = "".join(f"key{i}:line {i}\n" for i in range(300))
    produced = subprocess.run([kcat, "-b", broker.bootstrap, "-P", "-t", "kc", "-p", "1", "-K:", "-z", "snappy"], input=lines, capture_output=True, text=True, timeout=30)
    assert produced.returncode == 0, produced.stderr

    consumed = subprocess.run([kcat, "-b", broker.bootstrap, "-C", "-t", "kc", "-p", "1", "-o", "beginning", "-e", "-f", "%k=%s@%o\n"], capture_output=True, text=True, timeout=30)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == [f"key{i}=line {i}@{i}" for i in range(300)]
