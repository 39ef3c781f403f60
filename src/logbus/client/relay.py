"""Consume, then produce: the MirrorMaker rule on top of the failover producer.

Source offsets are committed only after every record they cover is acknowledged by the
destination. An unrecoverable produce failure (a permanent error, a record not acknowledged within
`give_up_after_s`, a flush that does not finish) stops the relay with RelayError and *no* commit,
so the process exits non-zero and a supervisor restart resumes from the last commit without loss
(records after it may be produced again; the `lb.src` header — source topic/partition/offset — and
the records' own `lb.source`/`lb.seqno` let the pipeline drop the repeat).

    python -m logbus.client.relay --from HOST:PORT --to HOST:PORT --group G --topic T [--to-topic T2]
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from logbus.client.errors import DeliveryFailedError, FailoverProducerError
from logbus.client.failover import FailoverProducer
from logbus.client.settings import FailoverSettings

log = logging.getLogger(__name__)


class RelayError(Exception):
    """An unrecoverable failure; nothing after the last commit was committed."""


@dataclass
class RelayStats:
    consumed: int = 0
    acknowledged: int = 0
    commits: int = 0


def relay(consumer_config: dict, topics: list[str], producer: FailoverProducer, *,
          to_topic: str | Callable[[str], str] | None = None, commit_interval_s: float = 1.0,
          flush_timeout_s: float = 60.0, idle_exit_s: float | None = None,
          stop: threading.Event | None = None, batch: int = 500) -> RelayStats:
    """Copy records from `topics` (a consumer group) to the producer's cluster; see the module doc.

    Returns when `stop` is set or nothing arrived for `idle_exit_s`, after a final commit.
    Raises RelayError (without committing) on an unrecoverable produce failure.
    """
    stop = stop or threading.Event()
    dest = (lambda t: t) if to_topic is None else (lambda t: to_topic) if isinstance(to_topic, str) else to_topic
    stats = RelayStats()
    failures: list[DeliveryFailedError] = []
    positions: dict[tuple[str, int], int] = {}

    def on_delivery(err, delivery) -> None:
        if err is not None:
            failures.append(err)
        else:
            stats.acknowledged += 1

    def commit() -> None:
        remaining = producer.flush(flush_timeout_s)
        if failures:
            raise RelayError(f"{len(failures)} records not delivered (first: {failures[0]}); offsets not committed")
        if remaining:
            raise RelayError(f"{remaining} records not acknowledged within {flush_timeout_s:g}s; offsets not committed")
        if positions:
            consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in positions.items()], asynchronous=False)
            positions.clear()
            stats.commits += 1

    broken: list[str] = []

    def on_revoke(_consumer, partitions) -> None:
        if not broken:
            commit()  # hand over only what the destination acknowledged

    consumer = Consumer({"auto.offset.reset": "earliest", **consumer_config,
                         "enable.auto.commit": False, "enable.auto.offset.store": False})
    assigned: list[int] = []
    last_commit = last_record = time.monotonic()

    def on_assign(_consumer, partitions) -> None:
        nonlocal last_record
        assigned.append(len(partitions))
        last_record = time.monotonic()   # idle time counts from having partitions, not from the start

    consumer.subscribe(topics, on_assign=on_assign, on_revoke=on_revoke)
    try:
        while not stop.is_set():
            msgs = consumer.consume(batch, timeout=0.2)
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    if err.fatal() or not err.retriable() and err.code() != KafkaError._TRANSPORT:
                        raise RelayError(f"consumer failed: {err.str()}")
                    log.warning("consumer: %s", err.str())
                    continue
                headers = list(msg.headers() or [])
                if not any(k == "lb.src" for k, _ in headers):
                    headers.append(("lb.src", f"{msg.topic()}/{msg.partition()}/{msg.offset()}".encode()))
                try:
                    producer.produce(dest(msg.topic()), msg.value(), msg.key(), headers, on_delivery=on_delivery)
                except FailoverProducerError as e:
                    raise RelayError(f"record {msg.topic()}/{msg.partition()}/{msg.offset()} not accepted: {e}") from None
                positions[(msg.topic(), msg.partition())] = msg.offset() + 1
                stats.consumed += 1
            now = time.monotonic()
            if msgs:
                last_record = now
            if failures:
                raise RelayError(f"{len(failures)} records not delivered (first: {failures[0]}); offsets not committed")
            if now - last_commit >= commit_interval_s:
                commit()
                last_commit = now
            if idle_exit_s is not None and assigned and now - last_record >= idle_exit_s:
                break
        commit()
    except KafkaException as e:
        broken.append(str(e))
        raise RelayError(f"relay failed: {e}") from None
    except BaseException as e:
        broken.append(str(e))
        raise
    finally:
        try:
            consumer.close()   # no auto-commit: closing commits nothing
        except Exception:
            pass
    return stats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m logbus.client.relay", description="Consume from one cluster, produce to another with failover; commit only what was acknowledged.")
    ap.add_argument("--from", dest="source", required=True, metavar="HOST:PORT", help="source bootstrap servers")
    ap.add_argument("--to", dest="dest", required=True, metavar="HOST:PORT", help="destination bootstrap servers")
    ap.add_argument("--group", required=True, help="consumer group of the relay")
    ap.add_argument("--topic", action="append", required=True, help="source topic; repeatable")
    ap.add_argument("--to-topic", help="destination topic (default: the source topic's name)")
    ap.add_argument("--commit-interval", type=float, default=1.0, metavar="S")
    ap.add_argument("--give-up-after", type=float, default=60.0, metavar="S", help="a record not acknowledged this long stops the relay (default 60)")
    ap.add_argument("--idle-exit", type=float, default=None, metavar="S", help="exit 0 after this long without records")
    ap.add_argument("--max-pending", type=int, default=10000)
    ap.add_argument("--session-timeout-ms", type=int, default=10000, help="consumer group session timeout (default 10000)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        producer = FailoverProducer(FailoverSettings(bootstrap_servers=args.dest, give_up_after_s=args.give_up_after,
                                                     max_pending_records=args.max_pending))
    except FailoverProducerError as e:
        print(f"relay: {e}", file=sys.stderr)
        return 1
    code = 0
    try:
        stats = relay({"bootstrap.servers": args.source, "group.id": args.group, "session.timeout.ms": args.session_timeout_ms}, args.topic, producer,
                      to_topic=args.to_topic, commit_interval_s=args.commit_interval, idle_exit_s=args.idle_exit, stop=stop)
        print(f"relay: {stats.consumed} consumed, {stats.acknowledged} acknowledged, {stats.commits} commits", file=sys.stderr)
    except RelayError as e:
        print(f"relay: stopped without committing: {e}", file=sys.stderr)
        code = 1
    finally:
        left = producer.close(timeout=0 if code else 10)
        if left and not code:
            code = 1
    return code


if __name__ == "__main__":
    sys.exit(main())
