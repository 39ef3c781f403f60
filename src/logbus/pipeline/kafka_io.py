"""The pipeline's client layer on confluent-kafka: offsets and metadata on the driver, deterministic range reads
on the executors. Works against logbus and Apache Kafka alike (assign + explicit offsets, no group state)."""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from logbus.pipeline.options import TP, SourceOptions

log = logging.getLogger("logbus.pipeline")

# Record headers shared by gateway, agent, mirror and pipeline (shared/DESIGN.md); values are UTF-8 text.
TEXT_HEADERS = {
    "lb.source": "source",
    "lb.host": "host",
    "lb.file": "file",
    "lb.type": "type",
    "lb.txn": "txn",
    "lb.origin": "origin",
    "lb.src": "src",
}

# Column order of the source (also the Spark schema in source.py).
COLUMNS = [
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("timestampType", pa.int32()),
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ("source", pa.string()),
    ("seqno", pa.int64()),
    ("created", pa.timestamp("us", tz="UTC")),
    ("host", pa.string()),
    ("file", pa.string()),
    ("type", pa.string()),
    ("txn", pa.string()),
    ("commit", pa.bool_()),
    ("origin", pa.string()),
    ("src", pa.string()),
    ("malformed", pa.string()),
]
ARROW_SCHEMA = pa.schema(COLUMNS)
_HEADER_TYPE = COLUMNS[7][1]


class SourceError(RuntimeError):
    """A clear, user-facing failure of the logbus source."""


class DataLossError(SourceError):
    pass


# ------------------------------------------------------------------ header parsing


def parse_headers(headers: list[tuple[str, bytes | None]] | None) -> tuple[dict, str | None]:
    """The lb.* fields of one record, and the reason it is malformed (None when it is not)."""
    fields: dict = {}
    problems: list[str] = []
    if headers:
        for k, v in headers:
            if not k.startswith("lb."):
                continue
            if k == "lb.commit":
                fields["commit"] = True
                continue
            try:
                text = v.decode("utf-8") if v is not None else ""
            except UnicodeDecodeError:
                problems.append(f"{k} is not UTF-8 text")
                continue
            if k == "lb.seqno" or k == "lb.created":
                name = k[3:]
                if not (text.isascii() and text.isdigit()):
                    problems.append(f"{k} is not a decimal number: {text[:40]!r}")
                    continue
                value = int(text)
                if value >= 1 << 63:
                    problems.append(f"{k} is out of range: {text[:40]!r}")
                    continue
            else:
                name = TEXT_HEADERS.get(k)
                if name is None:
                    continue
                value = text
            if name in fields and fields[name] != value:
                problems.append(f"{k} appears twice with different values")
            fields[name] = value
    if "seqno" in fields and not fields.get("source"):
        problems.append("lb.seqno without lb.source")
    if fields.get("source") and "seqno" not in fields and not any(p.startswith("lb.seqno") for p in problems):
        problems.append("lb.source without lb.seqno")
    if fields.get("commit") and not fields.get("txn"):
        problems.append("lb.commit marker without lb.txn")
    return fields, ("; ".join(problems) if problems else None)


class _Columns:
    """Column builders for one Arrow record batch of one topic-partition."""

    __slots__ = ("offset", "ts", "tstype", "key", "value", "hoff", "hkey", "hval", "source", "seqno", "created",
                 "host", "file", "type", "txn", "commit", "origin", "src", "malformed")

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, [])
        self.hoff.append(0)

    def __len__(self) -> int:
        return len(self.offset)

    def add(self, msg, include_headers: bool, malformed_only: bool) -> None:
        headers = msg.headers()
        fields, problem = parse_headers(headers)
        if malformed_only and problem is None:
            return
        self.offset.append(msg.offset())
        ts_type, ts = msg.timestamp()
        self.ts.append(ts if ts_type else None)
        self.tstype.append(ts_type - 1 if ts_type else -1)  # Kafka: 0 CreateTime, 1 LogAppendTime
        self.key.append(msg.key())
        self.value.append(msg.value())
        if include_headers and headers:
            for k, v in headers:
                self.hkey.append(k)
                self.hval.append(v)
        self.hoff.append(len(self.hkey))
        get = fields.get
        self.source.append(get("source"))
        self.seqno.append(get("seqno"))
        self.created.append(get("created"))
        self.host.append(get("host"))
        self.file.append(get("file"))
        self.type.append(get("type"))
        self.txn.append(get("txn"))
        self.commit.append(bool(get("commit", False)))
        self.origin.append(get("origin"))
        self.src.append(get("src"))
        self.malformed.append(problem)

    def to_batch(self, topic: str, partition: int) -> pa.RecordBatch:
        n = len(self.offset)
        ms = pa.timestamp("ms", tz="UTC")
        us = pa.timestamp("us", tz="UTC")
        headers = pa.ListArray.from_arrays(
            pa.array(self.hoff, pa.int32()),
            pa.StructArray.from_arrays([pa.array(self.hkey, pa.string()), pa.array(self.hval, pa.binary())], names=["key", "value"]),
        ).cast(_HEADER_TYPE)
        arrays = [
            pa.array([topic] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array(self.offset, pa.int64()),
            pa.array(self.ts, pa.int64()).cast(ms).cast(us),
            pa.array(self.tstype, pa.int32()),
            pa.array(self.key, pa.binary()),
            pa.array(self.value, pa.binary()),
            headers,
            pa.array(self.source, pa.string()),
            pa.array(self.seqno, pa.int64()),
            pa.array(self.created, pa.int64()).cast(ms).cast(us),
            pa.array(self.host, pa.string()),
            pa.array(self.file, pa.string()),
            pa.array(self.type, pa.string()),
            pa.array(self.txn, pa.string()),
            pa.array(self.commit, pa.bool_()),
            pa.array(self.origin, pa.string()),
            pa.array(self.src, pa.string()),
            pa.array(self.malformed, pa.string()),
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


# ------------------------------------------------------------------ data loss


def report_data_loss(opts: SourceOptions, message: str, **details) -> None:
    """failOnDataLoss=true: raise; false: log a warning and append a JSON line to the dataLossReport file."""
    if opts.fail_on_data_loss:
        raise DataLossError(
            message + ". Some data may have been lost because it is no longer available in the cluster "
            "(deleted by retention, or the topic was deleted). If you want the query to skip it and go on, "
            "set the source option failOnDataLoss to false."
        )
    log.warning("logbus source: %s; skipped (failOnDataLoss=false)", message)
    if opts.data_loss_report:
        try:
            with open(opts.data_loss_report, "a") as f:
                f.write(json.dumps({"time_ms": int(time.time() * 1000), "message": message, **details}) + "\n")
        except OSError as e:
            log.warning("logbus source: cannot write the data loss report %s: %s", opts.data_loss_report, e)


# ------------------------------------------------------------------ executor side: read one range


def read_range(opts: SourceOptions, topic: str, partition: int, start: int, end: int, batch_rows: int = 8192) -> Iterator[pa.RecordBatch]:
    """Records [start, end) of one partition, as Arrow record batches; the same rows every time it is called."""
    if end <= start:
        return
    consumer = Consumer(opts.consumer_config())
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        cols = _Columns()
        expected = start  # next offset we expect to see
        last_progress = time.monotonic()
        timeout_s = opts.poll_timeout_ms / 1000.0
        while expected < end:
            msgs = consumer.consume(num_messages=min(10_000, max(1, end - expected)), timeout=0.2)
            progressed = False
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    if err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC):
                        report_data_loss(opts, f"topic {topic} partition {partition} is gone while reading offsets [{expected}, {end})",
                                         topic=topic, partition=partition, start=expected, end=end)
                        expected = end
                        break
                    if err.fatal() or not err.retriable():
                        if err.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT):
                            continue  # the client reconnects; the poll timeout bounds the wait
                        raise SourceError(f"reading {topic} partition {partition} at offset {expected}: {err.str()}")
                    continue
                off = m.offset()
                if off < expected:
                    continue  # a fetch may return a batch starting before the requested offset
                if off >= end:
                    expected = end
                    break
                if off > expected:
                    _check_gap(opts, consumer, topic, partition, expected, off)
                cols.add(m, opts.include_headers, opts.malformed_only)
                expected = off + 1
                progressed = True
                if len(cols) >= batch_rows:
                    yield cols.to_batch(topic, partition)
                    cols = _Columns()
            if expected >= end:
                break
            if progressed:
                last_progress = time.monotonic()
                continue
            # No record: control records or compaction may leave the rest of the range empty.
            pos = consumer.position([TopicPartition(topic, partition)])[0].offset
            if pos >= end:
                break
            if pos > expected:
                _check_gap(opts, consumer, topic, partition, expected, pos)
                expected = pos
                last_progress = time.monotonic()
                continue
            if time.monotonic() - last_progress > timeout_s:
                low, high = _watermarks(consumer, topic, partition, opts.request_timeout_ms / 1000.0)
                if high is not None and high <= expected:
                    report_data_loss(opts, f"offsets [{expected}, {end}) of {topic} partition {partition} are gone: the log now ends at {high}",
                                     topic=topic, partition=partition, start=expected, end=end)
                    break
                if low is not None and low >= end:
                    report_data_loss(opts, f"offsets [{expected}, {end}) of {topic} partition {partition} were deleted: the log now starts at {low}",
                                     topic=topic, partition=partition, start=expected, end=end)
                    break
                raise SourceError(
                    f"no record of {topic} partition {partition} at offset {expected} within {opts.poll_timeout_ms} ms "
                    f"(range [{start}, {end}); cluster {opts.bootstrap_servers} unreachable or too slow; "
                    f"raise kafkaConsumer.pollTimeoutMs to wait longer)"
                )
        if len(cols):
            yield cols.to_batch(topic, partition)
    finally:
        consumer.close()


def _check_gap(opts: SourceOptions, consumer: Consumer, topic: str, partition: int, expected: int, got: int) -> None:
    """Offsets [expected, got) were skipped: fine for control records or compaction, data loss if deleted."""
    low, _ = _watermarks(consumer, topic, partition, opts.request_timeout_ms / 1000.0)
    if low is not None and low > expected:
        report_data_loss(opts, f"offsets [{expected}, {min(low, got)}) of {topic} partition {partition} were deleted before they were read "
                         f"(the log now starts at {low})", topic=topic, partition=partition, start=expected, end=min(low, got))


def _watermarks(consumer: Consumer, topic: str, partition: int, timeout: float) -> tuple[int | None, int | None]:
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout, cached=False)
    except KafkaException:
        return None, None


# ------------------------------------------------------------------ driver side: metadata and offsets


@dataclass
class OffsetReader:
    """Topic discovery and offset look-ups on the driver, with Spark's fetchOffset retry rules."""

    opts: SourceOptions

    def __post_init__(self) -> None:
        self._admin: AdminClient | None = None
        self._pattern = re.compile(self.opts.subscribe_pattern) if self.opts.subscribe_pattern else None

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(self.opts.admin_config())
        return self._admin

    def _retry(self, what: str, fn):
        tries = self.opts.fetch_offset_num_retries + 1
        last: Exception | None = None
        for i in range(tries):
            try:
                return fn()
            except SourceError:
                raise
            except (KafkaException, TimeoutError, RuntimeError) as e:
                last = e
                if i + 1 < tries:
                    time.sleep(self.opts.fetch_offset_retry_interval_ms / 1000.0)
        raise SourceError(
            f"{what} failed against the cluster at {self.opts.bootstrap_servers} after {tries} tries "
            f"(requestTimeoutMs={self.opts.request_timeout_ms}): {_describe(last)}"
        )

    def partitions(self) -> list[TP]:
        """The topic-partitions to read now, by subscribe / subscribePattern / topics / assign."""

        def fetch():
            md = self.admin.list_topics(timeout=self.opts.request_timeout_ms / 1000.0)
            if not md.brokers:
                raise KafkaException(KafkaError(KafkaError._TRANSPORT, "no broker in metadata"))
            return md

        md = self._retry("reading the cluster's metadata", fetch)
        out: list[TP] = []
        if self.opts.assign:
            for topic, part in self.opts.assign:
                t = md.topics.get(topic)
                if t is None or t.error is not None or part not in t.partitions:
                    raise SourceError(f"unknown topic partition {topic}-{part} (assign) on the cluster at {self.opts.bootstrap_servers}")
            return list(self.opts.assign)
        if self.opts.subscribe:
            missing = [t for t in self.opts.subscribe if t not in md.topics or md.topics[t].error is not None]
            if missing:
                raise SourceError(
                    f"unknown topic(s) {', '.join(missing)} on the cluster at {self.opts.bootstrap_servers}; "
                    f"it has {len([t for t in md.topics if not t.startswith('__')])} topic(s)"
                )
            names = list(self.opts.subscribe)
        else:
            names = [t for t in md.topics if not t.startswith("__") and self._pattern.search(t) and md.topics[t].error is None]
        for name in sorted(names):
            for part in sorted(md.topics[name].partitions):
                out.append((name, part))
        return out

    def offsets(self, tps: list[TP], spec: str, timestamp: int | None = None) -> dict[TP, int]:
        """Earliest, latest (the last stable offset when reading committed) or first offset at/after a timestamp."""
        if not tps:
            return {}
        if spec == "earliest":
            offspec = OffsetSpec.earliest()
        elif spec == "latest":
            offspec = OffsetSpec.latest()
        else:
            offspec = OffsetSpec.for_timestamp(int(timestamp))
        iso = IsolationLevel.READ_COMMITTED if self.opts.read_committed else IsolationLevel.READ_UNCOMMITTED

        def fetch():
            futures = self.admin.list_offsets(
                {TopicPartition(t, p): offspec for t, p in tps},
                isolation_level=iso,
                request_timeout=self.opts.request_timeout_ms / 1000.0,
            )
            out = {}
            for tp, fut in futures.items():
                out[(tp.topic, tp.partition)] = fut.result(timeout=self.opts.request_timeout_ms / 1000.0 + 5).offset
            return out

        return self._retry(f"listing {spec} offsets", fetch)

    def resolve(self, tps: list[TP], start_spec, default_kind: str, strategy: str = "error") -> dict[TP, int]:
        """Concrete offsets for a StartSpec (earliest/latest/offsets/timestamps) over the given partitions."""
        kinds: dict[TP, tuple[str, int | None]] = {tp: start_spec.spec_for(tp, default_kind) for tp in tps}
        if start_spec.kind == "offsets":
            known = set(tps)
            for topic, parts in start_spec.offsets.items():
                for p in parts:
                    if (topic, int(p)) not in known:
                        raise SourceError(f"offsets name {topic}-{p}, which is not among the partitions read")
        out: dict[TP, int] = {}
        for kind in ("earliest", "latest"):
            sel = [tp for tp, (k, _) in kinds.items() if k == kind]
            out.update(self.offsets(sel, kind))
        by_ts: dict[int, list[TP]] = {}
        for tp, (k, v) in kinds.items():
            if k == "offset":
                out[tp] = int(v)
            elif k == "timestamp":
                by_ts.setdefault(int(v), []).append(tp)
        for ts, sel in by_ts.items():
            found = self.offsets(sel, "timestamp", ts)
            missing = [tp for tp, off in found.items() if off < 0]
            if missing and strategy == "error":
                raise SourceError(
                    f"no record at or after timestamp {ts} in {', '.join(f'{t}-{p}' for t, p in missing)}; "
                    "set startingOffsetsByTimestampStrategy=latest to start from the end instead"
                )
            if missing:
                found.update(self.offsets(missing, "latest"))
            out.update(found)
        return out

    def sample_record_bytes(self, tps: list[TP], start: dict[TP, int], latest: dict[TP, int], max_partitions: int = 4) -> float | None:
        """Average bytes per record (key + value + headers), from a few records at the start of a few ranges."""
        chosen = [tp for tp in tps if latest.get(tp, 0) > start.get(tp, 0)][:max_partitions]
        if not chosen:
            return None
        total = n = 0
        consumer = Consumer(self.opts.consumer_config())
        try:
            for tp in chosen:
                consumer.assign([TopicPartition(tp[0], tp[1], start[tp])])
                deadline = time.monotonic() + 2.0
                got = 0
                while got < 200 and time.monotonic() < deadline:
                    for m in consumer.consume(num_messages=200 - got, timeout=0.2):
                        if m.error() is None:
                            total += len(m.value() or b"") + len(m.key() or b"") + sum(len(k) + len(v or b"") for k, v in (m.headers() or []))
                            n += 1
                            got += 1
                    if start[tp] + got >= latest[tp]:
                        break
        finally:
            consumer.close()
        return total / n if n else None

    def close(self) -> None:
        self._admin = None


def _describe(e: Exception | None) -> str:
    if isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError):
        err = e.args[0]
        return f"{err.name()}: {err.str()}"
    return f"{type(e).__name__}: {e}"
