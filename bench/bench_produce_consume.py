"""Produce/consume throughput of one logbus broker with the librdkafka client (acks=1).

Prints records/s and MB/s for 100-byte and 1 KiB records, the raw loopback TCP throughput of this
machine measured in the same run, the ratio to it, and the broker's resident memory as data is
written (it must stay flat). Run: python bench/bench_produce_consume.py [--seconds-budget N]
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from brokerproc import BrokerProcess  # noqa: E402

MB = 1_000_000


def loopback_tcp_mb_s(total_bytes: int = 2_000_000_000, chunk: int = 1 << 20) -> float:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    received = [0]

    def sink():
        conn, _ = server.accept()
        buf = bytearray(chunk)
        while True:
            n = conn.recv_into(buf)
            if not n:
                break
            received[0] += n
        conn.close()

    t = threading.Thread(target=sink)
    t.start()
    payload = b"\0" * chunk
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as s:
        sent = 0
        while sent < total_bytes:
            s.sendall(payload)
            sent += chunk
    t.join()
    elapsed = time.perf_counter() - start
    server.close()
    return received[0] / elapsed / MB


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def produce(bootstrap: str, topic: str, size: int, count: int, partitions: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576, "compression.type": "none",
                         # report failures only: a Python callback per record would measure the client, not the broker
                         "delivery.report.only.error": True})
    value = b"v" * size
    errors = [0]

    def on_delivery(err, _msg):
        if err is not None:
            errors[0] += 1

    start = time.perf_counter()
    p = 0
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=p, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        p = (p + 1) % partitions
    producer.flush(300)
    elapsed = time.perf_counter() - start
    if errors[0]:
        raise SystemExit(f"{errors[0]} records failed")
    return elapsed


def consume(bootstrap: str, topic: str, count: int, partitions: int) -> float:
    # librdkafka stops prefetching at queued.min.messages (100000) or queued.max.messages.kbytes (64 MiB),
    # which caps it far below what the broker serves (broker CPU stays under 0.6 s per GB either way);
    # a deeper queue measures the broker instead of the client's prefetch limit.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                         "queued.min.messages": 1_000_000, "queued.max.messages.kbytes": 1_048_576})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got = 0
    start = time.perf_counter()
    deadline = start + 300
    while got < count and time.perf_counter() < deadline:
        got += len(consumer.consume(num_messages=100_000, timeout=1.0))
    elapsed = time.perf_counter() - start
    consumer.close()
    if got < count:
        raise SystemExit(f"consumed {got} of {count}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply record counts (default 1.0)")
    args = parser.parse_args()

    baseline = loopback_tcp_mb_s()
    results = {"loopback_tcp_mb_s": round(baseline, 1), "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data").start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            partitions = 8
            for size, count in ((100, int(3_000_000 * args.scale)), (1024, int(1_000_000 * args.scale))):
                topic = f"bench-{size}"
                admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)
                rss_before = rss_mb(broker.proc.pid)
                p_s = produce(broker.bootstrap, topic, size, count, partitions)
                rss_after = rss_mb(broker.proc.pid)
                c_s = consume(broker.bootstrap, topic, count, partitions)
                mb = size * count / MB
                run = {
                    "record_bytes": size, "records": count,
                    "produce_records_s": round(count / p_s), "produce_mb_s": round(mb / p_s, 1),
                    "consume_records_s": round(count / c_s), "consume_mb_s": round(mb / c_s, 1),
                    "produce_ratio_to_loopback": round(mb / p_s / baseline, 3),
                    "consume_ratio_to_loopback": round(mb / c_s / baseline, 3),
                    "broker_rss_mb_before": round(rss_before, 1), "broker_rss_mb_after_produce": round(rss_after, 1),
                    "broker_rss_mb_after_consume": round(rss_mb(broker.proc.pid), 1),
                }
                results["runs"].append(run)
        finally:
            broker.stop()
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"raw loopback TCP: {baseline:,.0f} MB/s")
    for r in results["runs"]:
        print(
            f"{r['record_bytes']:>5} B x {r['records']:,}: produce {r['produce_records_s']:>10,} rec/s {r['produce_mb_s']:>7} MB/s "
            f"(x{r['produce_ratio_to_loopback']} of loopback) | consume {r['consume_records_s']:>10,} rec/s {r['consume_mb_s']:>7} MB/s "
            f"(x{r['consume_ratio_to_loopback']}) | broker RSS {r['broker_rss_mb_before']} -> {r['broker_rss_mb_after_produce']} -> {r['broker_rss_mb_after_consume']} MB"
        )


if __name__ == "__main__":
    main()
