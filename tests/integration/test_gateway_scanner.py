"""The gateway's partition scanner against a real broker: every range gives exactly the highest (seqno, offset) per
source of the records in it, whether the scan continues where the last one ended, skips ahead (other gateways
indexed the records between), or goes back."""

from __future__ import annotations

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from logbus.gateway.kafka import PartitionScanner

TOPIC = "dc1.acme.logs.scan"


def _expected(records: list[tuple[str, int]], start: int, end: int) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for offset in range(start, end):
        source, seqno = records[offset]
        if source not in out or seqno > out[source][0]:
            out[source] = (seqno, offset)
    return out


def test_scans_continue_skip_ahead_and_go_back_exactly(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    records = [(f"host-{i % 30}/app.log", i // 30 + 1) for i in range(6000)]
    for source, seqno in records:
        p.produce(TOPIC, b"x" * 50, partition=0, headers=[("lb.source", source.encode()), ("lb.seqno", str(seqno).encode())])
    assert p.flush(30) == 0
    scanner = PartitionScanner(broker.bootstrap)
    try:
        # continue, continue, skip ahead, skip ahead, go back, continue from there, to the end
        for start, end in [(0, 700), (700, 1500), (2100, 2600), (4000, 4001), (1000, 3000), (3000, 6000)]:
            assert scanner.scan_sources(TOPIC, 0, start, end) == _expected(records, start, end), (start, end)
        assert scanner.scan_sources(TOPIC, 0, 6000, 6000) == {}
    finally:
        scanner.close()
