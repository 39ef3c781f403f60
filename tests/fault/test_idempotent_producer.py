"""The idempotent producer against real broker processes: raw wire rules, lost responses
through a fault proxy, SIGKILL and restart, confluent-kafka and kafka-python."""

import time

import pytest
from brokerproc import free_port
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from faultproxy import FaultProxy
from kafkawire import WireConnection

from logbus.protocol.records import encode_batch

NONE, OUT_OF_ORDER, INVALID_EPOCH, UNKNOWN_PRODUCER, TXN_ID_AUTH = 0, 45, 47, 59, 53


def init_pid(conn: WireConnection, version: int = 4, **kw):
    resp = conn.request(22, version, {"transactional_id": None, "transaction_timeout": -1, **kw})
    assert resp.error_code == NONE
    return resp.producer_id, resp.producer_epoch


def pbatch(pid, epoch, seq, n=2, tag=b"v"):
    return encode_batch([tag + b"%d" % (seq + i) for i in range(n)], timestamps=[1_700_000_000_000] * n,
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq)  # fmt: skip


def list_offset(conn: WireConnection, topic: str, timestamp: int, partition: int = 0) -> int:
    resp = conn.request(2, 7, {"replica_id": -1, "isolation_level": 0,
                               "topics": [{"name": topic, "partitions": [{"partition_index": partition, "timestamp": timestamp}]}]})  # fmt: skip
    return resp.topics[0].partitions[0].offset


def log_end(conn: WireConnection, topic: str) -> int:
    return list_offset(conn, topic, -1)


def log_start(conn: WireConnection, topic: str) -> int:
    return list_offset(conn, topic, -2)


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 60.0) -> dict[int, list[bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "idem-check", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 100})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    seen: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    got = 0
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=10000, timeout=0.5):
                if msg.error() is not None:
                    continue
                seen[msg.partition()].append(msg.value())
                got += 1
            if got >= expected:
                # read a little longer: a duplicate would show up as extra records
                for msg in consumer.consume(num_messages=10000, timeout=1.0):
                    if msg.error() is None:
                        seen[msg.partition()].append(msg.value())
                break
    finally:
        consumer.close()
    return seen


# --- InitProducerId and the produce rules on the raw wire --------------------------------------


def test_init_producer_id_versions_bump_and_transactional_refusal(broker):
    conn = WireConnection(broker.bootstrap)
    pids = [init_pid(conn, v) for v in range(6)]
    assert [e for _, e in pids] == [0] * 6
    assert len({p for p, _ in pids}) == 6
    pid, _ = pids[-1]
    assert init_pid(conn, 3, producer_id=pid, producer_epoch=0) == (pid, 1)  # KIP-360 bump
    assert init_pid(conn, 5, producer_id=pid, producer_epoch=1) == (pid, 2)
    new_pid, epoch = init_pid(conn, 4, producer_id=pid, producer_epoch=32766)  # exhausted
    assert new_pid not in {p for p, _ in pids} and epoch == 0
    foreign, epoch = init_pid(conn, 4, producer_id=10**9, producer_epoch=3)  # not issued here
    assert foreign != 10**9 and epoch == 0
    resp = conn.request(22, 4, {"transactional_id": "txn-1", "transaction_timeout": 60000})
    assert resp.error_code == TXN_ID_AUTH and resp.producer_id == -1
    conn.close()


def test_duplicates_gaps_epochs_and_unknown_producers(broker):
    conn = WireConnection(broker.bootstrap)
    assert conn.create_topic("idem").error_code == NONE
    pid, epoch = init_pid(conn)
    r = conn.produce("idem", 0, pbatch(pid, epoch, 0), acks=-1)
    assert r.error_code == NONE and r.base_offset == 0
    r = conn.produce("idem", 0, pbatch(pid, epoch, 2), acks=-1)
    assert r.error_code == NONE and r.base_offset == 2
    # a retry of an acknowledged batch: the same offset, the log grows once
    r = conn.produce("idem", 0, pbatch(pid, epoch, 0), acks=-1)
    assert r.error_code == NONE and r.base_offset == 0
    assert log_end(conn, "idem") == 4
    assert len(conn.fetch("idem", 0, 0).records) == 2 * len(pbatch(pid, epoch, 0))
    # a gap
    r = conn.produce("idem", 0, pbatch(pid, epoch, 7), acks=-1)
    assert r.error_code == OUT_OF_ORDER and "7 (incoming seq. number), 3" in r.error_message
    # a new epoch starts at 0; then the old epoch is fenced
    r = conn.produce("idem", 0, pbatch(pid, epoch + 1, 4), acks=-1)
    assert r.error_code == OUT_OF_ORDER
    r = conn.produce("idem", 0, pbatch(pid, epoch + 1, 0), acks=-1)
    assert r.error_code == NONE and r.base_offset == 4
    r = conn.produce("idem", 0, pbatch(pid, epoch, 4), acks=-1)
    assert r.error_code == INVALID_EPOCH
    # a producer the partition has never seen must start at 0 (nothing was ever removed)
    other, oe = init_pid(conn)
    r = conn.produce("idem", 0, pbatch(other, oe, 5), acks=-1)
    assert r.error_code == OUT_OF_ORDER
    assert log_end(conn, "idem") == 6
    conn.close()


def test_unknown_producer_after_its_batches_were_deleted(broker_factory):
    b = broker_factory("retention_check_interval_ms = 200\n")
    conn = WireConnection(b.bootstrap)
    assert conn.create_topic("gone", configs={"segment.bytes": "200", "retention.bytes": "300"}).error_code == NONE
    pid, epoch = init_pid(conn)
    assert conn.produce("gone", 0, pbatch(pid, epoch, 0)).error_code == NONE
    for _ in range(10):
        assert conn.produce("gone", 0, encode_batch([b"x" * 150])).error_code == NONE
    deadline = time.monotonic() + 15
    while log_start(conn, "gone") < 2:  # the producer's batch (offsets 0-1) is gone
        assert time.monotonic() < deadline, "retention never removed the producer's batches"
        time.sleep(0.2)
    r = conn.produce("gone", 0, pbatch(pid, epoch, 2))
    assert r.error_code == UNKNOWN_PRODUCER and "retention" in r.error_message
    # the producer's way out (KIP-360): a new epoch from sequence 0
    assert conn.produce("gone", 0, pbatch(pid, epoch + 1, 0)).error_code == NONE
    conn.close()


# --- lost responses through the fault proxy ------------------------------------------------------

RECORDS = 50_000
PARTITIONS = 4


@pytest.mark.slow
def test_lost_produce_responses_give_exactly_once_in_order(broker_factory):
    port = free_port()
    with FaultProxy(port) as proxy:
        b = broker_factory(port=port, extra_args=["--advertised", proxy.address])
        conn = WireConnection(b.bootstrap)
        assert conn.create_topic("lost", partitions=PARTITIONS).error_code == NONE
        conn.close()
        proxy.drop_produce_responses(every=15)
        producer = Producer({
            "bootstrap.servers": proxy.address, "enable.idempotence": True, "acks": "all",
            "linger.ms": 2, "batch.num.messages": 500, "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 200,
            "retry.backoff.ms": 20, "message.timeout.ms": 120000,
        })  # fmt: skip
        errors: list = []

        def on_delivery(err, msg):
            if err is not None:
                errors.append(err)

        for i in range(RECORDS):
            while True:
                try:
                    producer.produce("lost", value=b"%d" % i, partition=i % PARTITIONS, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        assert producer.flush(150) == 0, "records not acknowledged"
        assert not errors, errors[:5]
        assert proxy.dropped > 0, "the proxy lost no responses: the test proved nothing"
        dropped = proxy.dropped
        proxy.drop_produce_responses(0)
        seen = consume_all(proxy.address, "lost", PARTITIONS, RECORDS)
    for p in range(PARTITIONS):
        got = [int(v) for v in seen[p]]
        want = list(range(p, RECORDS, PARTITIONS))
        assert len(got) == len(want), f"partition {p}: {len(got)} records, want {len(want)} ({dropped} responses lost)"
        assert got == want, f"partition {p}: records repeated, lost or out of order"


# --- SIGKILL and restart -------------------------------------------------------------------------


def test_retry_after_sigkill_is_still_a_duplicate(broker_factory):
    b = broker_factory()
    conn = WireConnection(b.bootstrap)
    assert conn.create_topic("crash").error_code == NONE
    pid, epoch = init_pid(conn)
    offsets = [conn.produce("crash", 0, pbatch(pid, epoch, seq), acks=-1).base_offset for seq in (0, 2, 4)]
    assert offsets == [0, 2, 4]
    conn.close()
    b.kill()
    b.start()
    conn = WireConnection(b.bootstrap)
    r = conn.produce("crash", 0, pbatch(pid, epoch, 2), acks=-1)
    assert r.error_code == NONE and r.base_offset == 2
    assert log_end(conn, "crash") == 6
    r = conn.produce("crash", 0, pbatch(pid, epoch, 8), acks=-1)
    assert r.error_code == OUT_OF_ORDER  # the sequence state survived too
    assert conn.produce("crash", 0, pbatch(pid, epoch, 6), acks=-1).base_offset == 6
    # and once more across a clean restart (state from the snapshot written at close)
    conn.close()
    b.stop()
    b.start()
    conn = WireConnection(b.bootstrap)
    r = conn.produce("crash", 0, pbatch(pid, epoch, 6), acks=-1)
    assert r.error_code == NONE and r.base_offset == 6
    assert init_pid(conn)[0] > pid  # the allocator never hands out an id twice
    conn.close()


def _produce(producer, topic, values, partitions, on_delivery):
    for i in values:
        while True:
            try:
                producer.produce(topic, value=b"%d" % i, partition=i % partitions, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)


@pytest.mark.slow
def test_confluent_idempotent_producer_continues_after_sigkill_without_duplicates(broker_factory):
    """A produce is written, its response lost, the broker SIGKILLed and restarted before the
    client retries: the retry must be recognised from the state rebuilt on restart."""
    port = free_port()
    total = 20_000
    with FaultProxy(port) as proxy:
        b = broker_factory(port=port, extra_args=["--advertised", proxy.address])
        conn = WireConnection(b.bootstrap)
        assert conn.create_topic("crash2", partitions=2).error_code == NONE
        conn.close()
        producer = Producer({
            "bootstrap.servers": proxy.address, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
            "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500, "retry.backoff.ms": 50, "message.timeout.ms": 120000,
        })  # fmt: skip
        errors: list = []

        def on_delivery(err, msg):
            if err is not None:
                errors.append(err)

        _produce(producer, "crash2", range(0, total // 2), 2, on_delivery)
        assert producer.flush(60) == 0
        proxy.drop_produce_responses(every=1, max_drops=1, pause_after_drop=True)
        _produce(producer, "crash2", range(total // 2, total // 2 + 1000), 2, on_delivery)
        deadline = time.monotonic() + 30
        while proxy.dropped < 1:
            assert time.monotonic() < deadline, "no produce response was lost"
            producer.poll(0.05)
        b.kill()  # the lost request was written; the client has not retried yet
        b.start()
        proxy.drop_produce_responses(0)
        proxy.resume()
        _produce(producer, "crash2", range(total // 2 + 1000, total), 2, on_delivery)
        assert producer.flush(120) == 0, "records not acknowledged"
        assert not errors, errors[:5]
        seen = consume_all(proxy.address, "crash2", 2, total)
    for p in range(2):
        got = [int(v) for v in seen[p]]
        assert len(got) == total // 2, f"partition {p}: {len(got)} records, want {total // 2}"
        assert got == list(range(p, total, 2)), f"partition {p}: records repeated, lost or reordered"


# --- kafka-python 3 with its default (idempotence on) -------------------------------------------


def test_kafka_python_default_idempotent_producer(broker):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    conn = WireConnection(broker.bootstrap)
    assert conn.create_topic("kpidem", partitions=2).error_code == NONE
    conn.close()
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=5)
    futures = [producer.send("kpidem", value=b"%d" % i, partition=i % 2) for i in range(2000)]
    producer.flush(timeout=60)
    metas = [f.get(timeout=30) for f in futures]
    assert producer._transaction_manager is not None and producer._transaction_manager.producer_id_and_epoch.producer_id >= 0
    producer.close()
    assert [m.offset for m in metas if m.partition == 0] == list(range(1000))
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000)
    consumer.assign([KTP("kpidem", 0), KTP("kpidem", 1)])
    consumer.seek_to_beginning()
    got = {0: [], 1: []}
    for m in consumer:
        got[m.partition].append(int(m.value))
    consumer.close()
    assert got == {0: list(range(0, 2000, 2)), 1: list(range(1, 2000, 2))}
