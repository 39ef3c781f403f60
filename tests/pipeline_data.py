"""Test data for the delivery pipeline: records with lb.* headers, failover repeats in other partitions,
batch transactions with and without commit markers, and malformed records. Produced with confluent-kafka."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap: str, topic: str, partitions: int, config: dict[str, str] | None = None, timeout: float = 30.0) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})], request_timeout=timeout)[topic]
    fut.result(timeout=timeout)


@dataclass
class Dataset:
    """What the lake must hold after delivery."""

    expected: set[tuple[str, int]] = field(default_factory=set)  # every (source, seqno) exactly once
    uncommitted: set[tuple[str, int]] = field(default_factory=set)  # records of transactions that must not appear
    malformed: int = 0  # records that must land in the quarantine table
    repeats: int = 0  # extra copies written to other partitions
    produced: int = 0  # records written, all kinds


def produce_dataset(
    bootstrap: str,
    topic: str,
    partitions: int,
    records: int,
    sources: int = 200,
    repeat_every: int = 50,
    txn_every: int = 2000,
    txn_size: int = 20,
    malformed_every: int = 0,
    value_size: int = 100,
    start_seqno: int = 0,
    log_types: tuple[str, ...] = ("access", "error"),
    timeout: float = 120.0,
) -> Dataset:
    """`records` delivered records in all: plain ones from `sources` sources, each pinned to a partition; every
    `repeat_every`-th also written to the next partition (a failover repeat); every `txn_every` records a
    transaction of `txn_size` records, alternately committed (with a marker), uncommitted (no marker) and
    committed too late (a marker timestamped 61 s after the records); every `malformed_every`-th a record with
    a seqno that is not a number."""
    p = Producer({
        "bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 5000, "compression.type": "lz4",
        "queue.buffering.max.messages": 500_000, "acks": "all",
    })
    ds = Dataset()
    payload = b"x" * value_size
    now = int(time.time() * 1000)
    seq = [start_seqno] * sources
    txn_no = 0
    n = 0

    def send(part: int, headers: list, ts: int | None = None) -> None:
        while True:
            try:
                if ts is None:
                    p.produce(topic, value=payload, partition=part, headers=headers)
                else:
                    p.produce(topic, value=payload, partition=part, headers=headers, timestamp=ts)
                ds.produced += 1
                return
            except BufferError:
                p.poll(0.05)

    while n < records:
        if txn_every and n and n % txn_every == 0:
            txn = f"txn-{start_seqno}-{txn_no}"
            kind = txn_no % 3  # 0 committed, 1 uncommitted, 2 marker too late
            txn_no += 1
            part = txn_no % partitions
            src = f"batch-{start_seqno}-{txn_no}"
            ts = int(time.time() * 1000)
            for i in range(txn_size):
                hs = [("lb.source", src.encode()), ("lb.seqno", str(i).encode()), ("lb.txn", txn.encode()),
                      ("lb.created", str(ts).encode()), ("lb.type", b"batch")]
                send(part, hs, ts)
                if kind == 0:
                    ds.expected.add((src, i))
                else:
                    ds.uncommitted.add((src, i))
                if i == 0:  # a repeat of a transaction's record in another partition
                    send((part + 1) % partitions, hs, ts)
                    ds.repeats += 1
            if kind == 0:
                send(part, [("lb.txn", txn.encode()), ("lb.commit", b"")], ts + 500)
                n += txn_size
            elif kind == 2:
                send(part, [("lb.txn", txn.encode()), ("lb.commit", b"")], ts + 61_000)
            continue
        s = n % sources
        src = f"src-{s}"
        part = s % partitions
        sq = seq[s]
        seq[s] += 1
        if malformed_every and n % malformed_every == malformed_every - 1:
            send(part, [("lb.source", src.encode()), ("lb.seqno", b"not-a-number"), ("lb.type", b"access")])
            ds.malformed += 1
            seq[s] -= 1
            n += 1
            continue
        created = str(now + n // 1000).encode()
        hs = [("lb.source", src.encode()), ("lb.seqno", str(sq).encode()), ("lb.created", created),
              ("lb.host", b"host-%d" % (s % 7)), ("lb.file", b"/var/log/app.log"), ("lb.type", log_types[s % len(log_types)].encode())]
        send(part, hs)
        ds.expected.add((src, sq))
        if repeat_every and n % repeat_every == 0:
            send((part + 1) % partitions, hs)
            ds.repeats += 1
        n += 1
        if n % 20000 == 0:
            p.poll(0)
    left = p.flush(timeout)
    if left:
        raise RuntimeError(f"{left} records not acknowledged within {timeout}s")
    return ds
