"""`logbus demo`: the embedded default at work.

Starts a logbus broker as a child process, creates the topic `demo`, produces records with
confluent-kafka (lz4, acks=all), consumes them back and checks that every acknowledged record came
back exactly once, at the offset the broker acknowledged, in order within its partition. Every wait
is bounded; the exit status is 0 only if nothing was lost, duplicated, misplaced or reordered.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

TOPIC = "demo"
MB = 1_000_000
VALUE_PAD = b"." * 80  # makes a record value about 100 bytes
START_TIMEOUT_S = 30.0
ADMIN_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 20.0


class DemoError(Exception):
    """The demo could not run (broker did not start, topic could not be created, ...)."""


@dataclass
class DemoResult:
    records: int
    partitions: int
    bootstrap: str
    produced: int = 0  # acknowledged by the broker
    produce_errors: int = 0  # delivery reports with an error
    consumed: int = 0
    lost: int = 0  # acknowledged but never consumed
    duplicated: int = 0  # extra copies consumed
    out_of_order: int = 0  # consumed before a record produced earlier to the same partition
    misplaced: int = 0  # consumed at another partition or offset than the broker acknowledged
    unexpected: int = 0  # consumed but never acknowledged (or not a demo record)
    bad_headers: int = 0  # header missing or not matching the value
    produce_seconds: float = 0.0
    consume_seconds: float = 0.0
    produce_mb_s: float = 0.0
    consume_mb_s: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            not self.errors
            and self.produce_errors == 0
            and self.produced == self.records
            and self.consumed == self.produced
            and self.lost == 0
            and self.duplicated == 0
            and self.out_of_order == 0
            and self.misplaced == 0
            and self.unexpected == 0
            and self.bad_headers == 0
        )

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EmbeddedBroker:
    """A `logbus broker` child process on a free loopback port."""

    def __init__(self, data_dir: Path, log_path: Path) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        cmd = [sys.executable, "-m", "logbus.cli", "broker", "--listen", self.bootstrap, "--data-dir", str(self.data_dir)]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise DemoError(f"the broker exited with status {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise DemoError(f"the broker did not listen on {self.bootstrap} within {timeout:g} s:\n{self.log_tail()}")

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM (a clean shutdown), then SIGKILL if it does not exit in time."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no broker log)"


def _ensure_topic(bootstrap: str, partitions: int) -> int:
    """Create `demo`; if it exists (a reused data directory), use it as it is. Returns its partition count."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    futures = admin.create_topics([NewTopic(TOPIC, num_partitions=partitions, replication_factor=1)],
                                  operation_timeout=ADMIN_TIMEOUT_S, request_timeout=ADMIN_TIMEOUT_S)
    try:
        futures[TOPIC].result(timeout=ADMIN_TIMEOUT_S + 5)
    except KafkaException as e:
        err = e.args[0] if e.args else None
        if not (isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS):
            raise DemoError(f"could not create topic {TOPIC!r}: {err.str() if isinstance(err, KafkaError) else e}") from None
    except Exception as e:  # noqa: BLE001 - a timeout of the future
        raise DemoError(f"could not create topic {TOPIC!r} within {ADMIN_TIMEOUT_S:g} s: {e!r}") from None
    try:
        metadata = admin.list_topics(TOPIC, timeout=ADMIN_TIMEOUT_S)
    except KafkaException as e:
        raise DemoError(f"could not read metadata of topic {TOPIC!r}: {e}") from None
    topic = metadata.topics.get(TOPIC)
    if topic is None or topic.error is not None or not topic.partitions:
        raise DemoError(f"topic {TOPIC!r} has no usable metadata: {topic.error if topic else 'missing'}")
    return len(topic.partitions)


def _progress(disable: bool):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
    from rich.text import Text

    class RecordsPerSecond(ProgressColumn):
        def render(self, task) -> Text:
            return Text("" if task.speed is None else f"{task.speed:,.0f} records/s")

    return Progress(
        TextColumn("[bold]{task.description:<9}"),
        BarColumn(),
        MofNCompleteColumn(),
        RecordsPerSecond(),
        TimeElapsedColumn(),
        disable=disable,
        transient=False,
    )


def _produce(bootstrap: str, n: int, result: DemoResult, quiet: bool) -> tuple[list[int], list[int]]:
    """Produce n records; returns, per sequence number, the acknowledged partition and offset (-1 if none)."""
    from confluent_kafka import Producer

    part_of = [-1] * n
    offset_of = [-1] * n
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "compression.type": "lz4",
        "linger.ms": 10,
        "batch.size": 1_000_000,
        "queue.buffering.max.messages": 500_000,
        "message.timeout.ms": 60_000,
        "log_level": 3,
    })
    produced_bytes = 0
    budget = 60.0 + n / 5_000  # generous for a 2-core machine; the demo never hangs
    with _progress(quiet) as progress:
        task = progress.add_task("produce", total=n)

        def on_delivery(err, msg) -> None:
            nonlocal produced_bytes
            if err is not None:
                result.produce_errors += 1
                if len(result.errors) < 5:
                    result.errors.append(f"delivery failed: {err.str()}")
            else:
                seq = int(msg.value().split(b"|", 1)[0])
                part_of[seq] = msg.partition()
                offset_of[seq] = msg.offset()
                result.produced += 1
                produced_bytes += len(msg.value()) + len(msg.key())
            progress.advance(task)

        start = time.perf_counter()
        deadline = time.monotonic() + budget
        for seq in range(n):
            key = b"key-%d" % seq
            value = b"%d|" % seq + VALUE_PAD
            headers = [("lb.source", b"logbus-demo"), ("lb.seqno", b"%d" % seq)]
            while True:
                try:
                    producer.produce(TOPIC, value=value, key=key, headers=headers, on_delivery=on_delivery)
                    break
                except BufferError:  # local queue full: serve delivery reports, then retry
                    producer.poll(0.05)
                    if time.monotonic() > deadline:
                        raise DemoError(f"producing did not finish within {budget:.0f} s") from None
            if seq % 1000 == 0:
                producer.poll(0)
        while producer.flush(1.0) > 0:
            if time.monotonic() > deadline:
                left = len(producer)
                raise DemoError(f"{left} records still unacknowledged after {budget:.0f} s")
        result.produce_seconds = time.perf_counter() - start
    result.produce_mb_s = produced_bytes / MB / max(result.produce_seconds, 1e-9)
    return part_of, offset_of


def _consume(bootstrap: str, partitions: int, start_offsets: dict[int, int], part_of: list[int], offset_of: list[int],
             result: DemoResult, quiet: bool) -> None:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    n = len(part_of)
    expected_per_partition = [0] * partitions
    for p in part_of:
        if p >= 0:
            expected_per_partition[p] += 1
    seen = bytearray(n)  # copies consumed per sequence number (saturates at 255)
    last_seq = [-1] * partitions
    got_per_partition = [0] * partitions
    consumed_bytes = 0
    # Consumer groups are not served yet: assign partitions explicitly; group.id is required by the
    # client but no offsets are committed.
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "logbus-demo",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "fetch.max.bytes": 52_428_800,
        "max.partition.fetch.bytes": 10_485_760,
        "log_level": 3,
    })
    consumer.assign([TopicPartition(TOPIC, p, start_offsets.get(p, 0)) for p in range(partitions)])
    budget = 60.0 + n / 5_000
    try:
        with _progress(quiet) as progress:
            task = progress.add_task("consume", total=result.produced)
            start = time.perf_counter()
            deadline = time.monotonic() + budget
            while any(got_per_partition[p] < expected_per_partition[p] for p in range(partitions)):
                if time.monotonic() > deadline:
                    result.errors.append(f"consuming stopped after {budget:.0f} s with records still missing")
                    break
                batch = consumer.consume(num_messages=10_000, timeout=0.5)
                for msg in batch:
                    err = msg.error()
                    if err is not None:
                        if err.code() != KafkaError._PARTITION_EOF and len(result.errors) < 5:
                            result.errors.append(f"consume error: {err.str()}")
                        continue
                    result.consumed += 1
                    value = msg.value() or b""
                    consumed_bytes += len(value) + len(msg.key() or b"")
                    p = msg.partition()
                    got_per_partition[p] += 1
                    try:
                        seq = int(value.split(b"|", 1)[0])
                    except ValueError:
                        result.unexpected += 1
                        continue
                    if not 0 <= seq < n or part_of[seq] < 0:
                        result.unexpected += 1
                        continue
                    if seen[seq]:
                        result.duplicated += 1
                    elif seq < last_seq[p]:
                        result.out_of_order += 1
                    if seen[seq] < 255:
                        seen[seq] += 1
                    last_seq[p] = max(last_seq[p], seq)
                    if part_of[seq] != p or offset_of[seq] != msg.offset():
                        result.misplaced += 1
                    if dict(msg.headers() or []).get("lb.seqno") != b"%d" % seq:
                        result.bad_headers += 1
                progress.advance(task, len(batch))
            result.consume_seconds = time.perf_counter() - start
    finally:
        consumer.close()
    result.lost = sum(1 for seq in range(n) if part_of[seq] >= 0 and not seen[seq])
    result.consume_mb_s = consumed_bytes / MB / max(result.consume_seconds, 1e-9)


def _end_offsets(bootstrap: str, partitions: int) -> dict[int, int]:
    """Where the demo's records will start: the current end of each partition (0 for a new topic)."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "logbus-demo", "enable.auto.commit": False, "log_level": 3})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=ADMIN_TIMEOUT_S)[1] for p in range(partitions)}
    except KafkaException as e:
        raise DemoError(f"could not read the end offsets of {TOPIC!r}: {e}") from None
    finally:
        consumer.close()


def _print_summary(result: DemoResult) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"logbus demo: {result.records} records, topic {TOPIC!r}, {result.partitions} partitions, broker {result.bootstrap}")
    table.add_column("", style="bold")
    table.add_column("records", justify="right")
    table.add_column("seconds", justify="right")
    table.add_column("MB/s", justify="right")
    table.add_row("produced (acks=all, lz4)", str(result.produced), f"{result.produce_seconds:.2f}", f"{result.produce_mb_s:.1f}")
    table.add_row("consumed", str(result.consumed), f"{result.consume_seconds:.2f}", f"{result.consume_mb_s:.1f}")
    for label, value in (("produce errors", result.produce_errors), ("lost", result.lost), ("duplicated", result.duplicated),
                         ("out of order", result.out_of_order), ("misplaced", result.misplaced),
                         ("unexpected", result.unexpected), ("bad headers", result.bad_headers)):
        table.add_row(label, f"[{'green' if value == 0 else 'red'}]{value}[/]", "", "")
    console.print(table)
    for err in result.errors:
        console.print(f"[red]error:[/] {err}", markup=True, highlight=False)
    if result.ok:
        console.print("[green]OK[/]: every record came back exactly once, in order, where the broker put it.")
    else:
        console.print("[red]FAILED[/]: see the counts above.")


def run(args: argparse.Namespace) -> int:
    n = int(args.records)
    if n < 1 or args.partitions < 1:
        print("logbus demo: --records and --partitions must be at least 1", file=sys.stderr)
        return 2
    own_dir = None
    if args.data_dir:
        data_dir = Path(args.data_dir)
        log_dir = Path(tempfile.mkdtemp(prefix="logbus-demo-log-"))
    else:
        own_dir = Path(tempfile.mkdtemp(prefix="logbus-demo-"))
        data_dir = own_dir / "data"
        log_dir = own_dir
    broker = EmbeddedBroker(data_dir, log_dir / "broker.log")
    result = DemoResult(records=n, partitions=args.partitions, bootstrap=broker.bootstrap)
    quiet = bool(args.json)
    status = 1
    try:
        broker.start()
        result.partitions = _ensure_topic(broker.bootstrap, args.partitions)
        starts = _end_offsets(broker.bootstrap, result.partitions)
        part_of, offset_of = _produce(broker.bootstrap, n, result, quiet)
        _consume(broker.bootstrap, result.partitions, starts, part_of, offset_of, result, quiet)
        status = 0 if result.ok else 1
    except DemoError as e:
        result.errors.append(str(e))
    except KeyboardInterrupt:
        result.errors.append("interrupted")
        status = 130
    finally:
        code = broker.stop()
        if code not in (0, None, -signal.SIGTERM):
            result.errors.append(f"the broker exited with status {code} on SIGTERM:\n{broker.log_tail()}")
            status = status or 1
        if not result.ok and status == 0:
            status = 1
        if result.errors and not quiet:
            print(f"broker log: {broker.log_path}", file=sys.stderr)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        _print_summary(result)
    if own_dir is not None and status == 0:
        shutil.rmtree(own_dir, ignore_errors=True)
    elif args.data_dir and status == 0:
        shutil.rmtree(log_dir, ignore_errors=True)
    return status
