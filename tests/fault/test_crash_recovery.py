"""SIGKILL the broker in the middle of acks=1 producing with flush.messages=1: nothing acknowledged is lost."""

import threading
import time
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from kafkawire import WireConnection
from logbus.protocol.records import scan_valid_prefix
from logbus.protocol.errors import ErrorCode


def test_sigkill_mid_produce_loses_nothing_acknowledged(broker_factory, tmp_path):
    b = broker_factory()
    conn = WireConnection(b.bootstrap)
    assert conn.create_topic("durable", 4, {"flush.messages": "1"}).error_code == ErrorCode.none
    conn.close()

    acked: dict[tuple[int, int], bytes] = {}
    lock = threading.Lock()

    def on_delivery(err, msg):
        if err is None:
            with lock:
                acked[(msg.partition(), msg.offset())] = msg.value()

    producer = Producer({"bootstrap.servers": b.bootstrap, "acks": 1, "linger.ms": 2, "message.timeout.ms": 60000,
                         "retry.backoff.ms": 100, "reconnect.backoff.max.ms": 500, "enable.idempotence": False})
    stop = threading.Event()
    sent = [0]

    def produce_forever():
        i = 0
        while not stop.is_set() and i < 2_000_000:
            try:
                producer.produce("durable", value=b"rec-%d" % i, partition=i % 4, on_delivery=on_delivery)
                i += 1
            except BufferError:
                producer.poll(0.05)
            producer.poll(0)
        sent[0] = i

    worker = threading.Thread(target=produce_forever)
    worker.start()
    deadline = time.monotonic() + 60
    while len(acked) < 20_000 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(acked) >= 20_000, "producer made no progress before the kill"
    b.kill()
    acked_at_kill = len(acked)
    time.sleep(1.0)
    b.start()
    time.sleep(2.0)
    stop.set()
    worker.join(timeout=60)
    assert producer.flush(60) == 0
    assert len(acked) > acked_at_kill, "producing did not continue after the restart"

    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "x", "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition("durable", p, OFFSET_BEGINNING) for p in range(4)])
    stored: dict[tuple[int, int], bytes] = {}
    eof = set()
    deadline = time.monotonic() + 120
    while len(eof) < 4 and time.monotonic() < deadline:
        for m in consumer.consume(10000, 1.0):
            if m.error():
                assert m.error().code() == -191, m.error()  # _PARTITION_EOF
                eof.add(m.partition())
                continue
            stored[(m.partition(), m.offset())] = m.value()
    consumer.close()
    missing = [k for k, v in acked.items() if stored.get(k) != v]
    assert not missing, f"{len(missing)} acknowledged records lost or changed, e.g. {missing[:5]}"

    b.stop()
    for log_file in Path(b.data_dir).glob("durable-*/*.log"):
        data = log_file.read_bytes()
        _, valid = scan_valid_prefix(data)
        assert valid == len(data), f"{log_file} has a torn or corrupt tail after recovery"
