"""A confluent-kafka group consumer run as its own process by the group tests.

It subscribes to one topic and writes one line per event to --out (flushed at once, so a test can
read the file while it runs and after a SIGKILL):

    A 0,1,2,3      the partitions it owns now, after every assignment change
    R 3 17         it processed the record at partition 3, offset 17
    C 3 18        it is about to commit offset 18 for partition 3 (written *before* the commit,
                   so a printed C is an upper bound of what this process may have committed)
    K              the synchronous commit of the batch returned without error
    E message      an error (commit failure, consumer error)

It commits synchronously after each batch it processed. SIGTERM closes the consumer cleanly
(LeaveGroup) and exits 0; --max-seconds bounds its life.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--max-seconds", type=float, default=120.0)
    ap.add_argument("--batch", type=int, default=50)
    args = ap.parse_args()

    out = open(args.out, "a", buffering=1)

    def emit(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    stopping = False

    def on_term(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)

    conf = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1000,
        "log_level": 3,
    }
    for item in args.config:
        key, _, value = item.partition("=")
        conf[key] = value
    consumer = Consumer(conf)
    owned: set[int] = set()

    def show() -> None:
        emit("A " + ",".join(str(p) for p in sorted(owned)))

    def on_assign(c, partitions):
        owned.update(tp.partition for tp in partitions)
        show()

    def on_revoke(c, partitions):
        owned.difference_update(tp.partition for tp in partitions)
        show()

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
    deadline = time.monotonic() + args.max_seconds
    try:
        while not stopping and time.monotonic() < deadline:
            msgs = consumer.consume(num_messages=args.batch, timeout=0.2)
            positions: dict[int, int] = {}
            for m in msgs:
                if m.error() is not None:
                    emit(f"E {m.error().str()}")
                    continue
                emit(f"R {m.partition()} {m.offset()}")
                positions[m.partition()] = m.offset() + 1
            if not positions:
                continue
            for p, off in sorted(positions.items()):
                emit(f"C {p} {off}")
            try:
                consumer.commit(offsets=[TopicPartition(args.topic, p, off) for p, off in positions.items()], asynchronous=False)
                emit("K")
            except KafkaException as e:
                emit(f"E commit: {e.args[0].str() if e.args else e}")
    finally:
        consumer.close()
        emit("X")
    return 0


if __name__ == "__main__":
    sys.exit(main())
