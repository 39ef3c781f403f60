"""`logbus produce`: read lines from stdin and produce them to a topic, like kafka-console-producer.

Without `--failover` a plain confluent-kafka producer (acks=all, the default partitioner) is used.
With `--failover` the FailoverProducer is used: records go only to partitions whose ISR is at least
min.insync.replicas, records refused by a partition are produced again elsewhere, and input stops
while too many records are unacknowledged. Either way the exit status is 0 only when every line was
acknowledged; undelivered lines are reported on stderr (count and first errors), never dropped
silently.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
ERROR_PREFIX = "logbus produce: "


def add_produce_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "produce",
        help="produce lines from stdin to a topic (like kafka-console-producer); --failover avoids partitions under min.insync.replicas",
        description="Read lines from stdin and produce each as a record. Exit 0 only when every line was acknowledged.",
    )
    p.add_argument("--bootstrap-server", metavar="HOST:PORT",
                   default=os.environ.get("LOGBUS_BOOTSTRAP_SERVERS") or DEFAULT_BOOTSTRAP,
                   help=f"broker(s) to connect to (default: $LOGBUS_BOOTSTRAP_SERVERS, else {DEFAULT_BOOTSTRAP})")
    p.add_argument("--topic", required=True, help="topic to produce to")
    p.add_argument("--failover", action="store_true", help="use the FailoverProducer (online partitions only, re-send refused records)")
    p.add_argument("--key-separator", metavar="SEP", help="split each line at the first SEP into key and value (parse.key)")
    p.add_argument("--header", action="append", default=[], metavar="KEY=VALUE", help="header added to every record; repeatable")
    p.add_argument("--source-id", metavar="ID", help="with --failover: add lb.source=ID and a rising lb.seqno to each record "
                   "(default: host-pid-start time, unique per run)")
    p.add_argument("--partitioner", choices=("sticky", "round-robin"), default="sticky", help="with --failover: for unkeyed lines (default sticky)")
    p.add_argument("--max-pending", type=int, default=10000, metavar="N", help="with --failover: unacknowledged records before input waits (default 10000)")
    p.add_argument("--timeout", type=float, default=30.0, metavar="S", help="at the end, wait this long for acknowledgements (default 30)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.set_defaults(func=run_produce)
    return p


def _headers(items: list[str]) -> list[tuple[str, bytes]]:
    out = []
    for item in items:
        if "=" not in item:
            raise ValueError(f"--header {item!r}: expected KEY=VALUE")
        k, v = item.split("=", 1)
        out.append((k, v.encode()))
    return out


def _lines(stream, sep: bytes | None):
    for raw in stream:
        line = raw[:-1] if raw.endswith(b"\n") else raw
        if line.endswith(b"\r"):
            line = line[:-1]
        if sep is None:
            yield None, line
        elif sep in line:
            k, v = line.split(sep, 1)
            yield k, v
        else:
            raise ValueError(f"no key separator {sep!r} in line: {line[:80]!r}")


def run_produce(args: argparse.Namespace) -> int:
    try:
        headers = _headers(args.header)
    except ValueError as e:
        print(ERROR_PREFIX + str(e), file=sys.stderr)
        return 2
    sep = args.key_separator.encode().decode("unicode_escape").encode() if args.key_separator else None
    stdin = sys.stdin.buffer
    try:
        summary = _produce_failover(args, headers, sep, stdin) if args.failover else _produce_plain(args, headers, sep, stdin)
    except Exception as e:  # a clear one-line error: unreachable cluster, unknown topic, bad line, too large
        print(ERROR_PREFIX + str(e), file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{summary['acknowledged']} of {summary['read']} records acknowledged"
              + (f", {summary['failed']} failed" if summary["failed"] else "")
              + (f", {summary['failovers']} failed over" if summary.get("failovers") else ""), file=sys.stderr)
    for err in summary.pop("_errors", [])[:5]:
        print(ERROR_PREFIX + "not delivered: " + err, file=sys.stderr)
    ok = summary["acknowledged"] == summary["read"] and summary["failed"] == 0 and summary.get("error") is None
    if summary.get("error"):
        print(ERROR_PREFIX + summary["error"], file=sys.stderr)
    return 0 if ok else 1


def _produce_plain(args, headers, sep, stdin) -> dict:
    from confluent_kafka import KafkaException, Producer

    producer = Producer({"bootstrap.servers": args.bootstrap_server, "acks": "all", "linger.ms": 5})
    try:
        md = producer.list_topics(args.topic, timeout=15)
    except KafkaException as e:
        raise RuntimeError(f"cannot reach the cluster at {args.bootstrap_server!r}: {e}") from None
    t = md.topics.get(args.topic)
    if t is None or t.error is not None or not t.partitions:
        raise RuntimeError(f"topic {args.topic!r} does not exist in the cluster at {args.bootstrap_server!r}")
    state = {"read": 0, "acknowledged": 0, "failed": 0, "_errors": []}

    def report(err, msg) -> None:
        if err is None:
            state["acknowledged"] += 1
        else:
            state["failed"] += 1
            state["_errors"].append(err.str())

    error = None
    try:
        for key, value in _lines(stdin, sep):
            state["read"] += 1
            while True:
                try:
                    producer.produce(args.topic, value, key, headers=headers or None, on_delivery=report)
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
    except (ValueError, KafkaException) as e:
        error = str(e)
    left = producer.flush(args.timeout)
    state["still_queued"] = left
    if left:
        error = error or f"{left} records not acknowledged within {args.timeout:g}s"
    state["error"] = error
    return state


def _produce_failover(args, headers, sep, stdin) -> dict:
    from logbus.client import FailoverProducer, FailoverProducerError, FailoverSettings

    source = args.source_id or f"{socket.gethostname()}-{os.getpid()}-{int(time.time() * 1000)}"
    errors: list[str] = []
    settings = FailoverSettings(bootstrap_servers=args.bootstrap_server, source_id=source, partitioner=args.partitioner,
                                max_pending_records=args.max_pending, on_failure=lambda e: errors.append(str(e)),
                                delivery_reports="errors")   # fire and forget: failures still come back
    producer = FailoverProducer(settings)
    read, error = 0, None
    try:
        for key, value in _lines(stdin, sep):
            read += 1
            producer.produce(args.topic, value, key, headers=headers or None)
    except (ValueError, FailoverProducerError) as e:
        read -= isinstance(e, FailoverProducerError)   # that line was not accepted
        error = str(e)
    left = producer.flush(args.timeout)
    m = producer.metrics()
    producer.close(0)   # anything still pending comes back through on_failure
    if left and not error:
        error = f"{left} records not acknowledged within {args.timeout:g}s"
    return {"read": read, "acknowledged": m["acknowledged"], "failed": len(errors), "failovers": m["failovers"],
            "resent": m["resent"], "source_id": source, "error": error, "_errors": errors}
