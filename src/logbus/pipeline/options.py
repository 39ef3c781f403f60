"""Options of the `logbus` Spark data source, named as Spark's own Kafka source names them.

Pure Python (no Spark, no client calls) so that it is checked by fast unit tests.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Mapping

from logbus.pipeline.topics import logical_topics_pattern

EARLIEST = -2
LATEST = -1

# Offsets as Spark's Kafka source writes them: {"topic": {"0": 23, "1": 42}}
Offsets = dict[str, dict[str, int]]
TP = tuple[str, int]


class OptionError(ValueError):
    """A data source option is missing, unknown or malformed."""


@dataclass(frozen=True)
class StartSpec:
    """Where to start (or end) reading: earliest, latest, per-partition offsets, or by timestamp."""

    kind: str  # "earliest" | "latest" | "offsets" | "timestamp" | "timestamps"
    offsets: Offsets = field(default_factory=dict)  # kind == offsets: -2 earliest, -1 latest
    timestamp: int | None = None  # kind == timestamp: ms for every partition
    timestamps: Offsets = field(default_factory=dict)  # kind == timestamps: ms per partition

    def spec_for(self, tp: TP, default_kind: str) -> tuple[str, int | None]:
        """("earliest"|"latest"|"offset"|"timestamp", value) for one partition."""
        topic, part = tp
        if self.kind in ("earliest", "latest"):
            return self.kind, None
        if self.kind == "timestamp":
            return "timestamp", self.timestamp
        if self.kind == "timestamps":
            ts = self.timestamps.get(topic, {}).get(str(part))
            return ("timestamp", ts) if ts is not None else (default_kind, None)
        off = self.offsets.get(topic, {}).get(str(part))
        if off is None:
            return default_kind, None
        if off == EARLIEST:
            return "earliest", None
        if off == LATEST:
            return "latest", None
        return "offset", off


@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: tuple[TP, ...] = ()
    starting: StartSpec = StartSpec("latest")
    ending: StartSpec = StartSpec("latest")
    timestamp_strategy: str = "error"  # startingOffsetsByTimestampStrategy: error | latest
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    poll_timeout_ms: int = 120_000
    request_timeout_ms: int = 15_000
    fetch_offset_num_retries: int = 3
    fetch_offset_retry_interval_ms: int = 1_000
    include_headers: bool = True
    malformed_only: bool = False
    data_loss_report: str | None = None
    kafka: tuple[tuple[str, str], ...] = ()  # passed to the confluent-kafka consumer (kafka.* options, client.rack)

    def consumer_config(self) -> dict[str, str]:
        conf = {
            "bootstrap.servers": self.bootstrap_servers,
            # assign() only: no group membership, no commits; offsets live in Spark's checkpoint.
            "group.id": "logbus-pipeline-reader",
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "auto.offset.reset": "earliest",
            "enable.partition.eof": "false",
            "socket.timeout.ms": str(min(self.request_timeout_ms, 60_000)),
        }
        conf.update(dict(self.kafka))
        return conf

    def admin_config(self) -> dict[str, str]:
        allowed = ("security.", "sasl.", "ssl.", "client.id", "socket.", "broker.address.family", "client.dns")
        conf = {"bootstrap.servers": self.bootstrap_servers, "socket.timeout.ms": str(min(self.request_timeout_ms, 60_000))}
        conf.update({k: v for k, v in self.kafka if k.startswith(allowed)})
        return conf

    @property
    def read_committed(self) -> bool:
        return dict(self.kafka).get("isolation.level", "read_committed") == "read_committed"


_KNOWN = {
    "bootstrap.servers", "kafka.bootstrap.servers", "subscribe", "subscribepattern", "assign", "topics", "prefixes",
    "startingoffsets", "endingoffsets", "startingtimestamp", "endingtimestamp", "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy", "maxoffsetspertrigger", "minoffsetspertrigger",
    "maxbytespertrigger", "failondataloss", "minpartitions", "kafkaconsumer.polltimeoutms", "requesttimeoutms",
    "fetchoffset.numretries", "fetchoffset.retryintervalms", "includeheaders", "client.rack", "malformedonly",
    "datalossreport", "path",
}


def parse_options(options: Mapping[str, str], streaming: bool) -> SourceOptions:
    """Options of spark.read / spark.readStream .format("logbus"), case-insensitive like Spark's."""
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    unknown = sorted(k for k in opts if k not in _KNOWN and not k.startswith("kafka."))
    if unknown:
        raise OptionError(f"unknown option(s) for the logbus source: {', '.join(unknown)}")

    servers = opts.get("bootstrap.servers") or opts.get("kafka.bootstrap.servers")
    if not servers:
        raise OptionError("option 'bootstrap.servers' is required: host:port[,host:port] of the cluster to read")

    strategies = [k for k in ("subscribe", "subscribepattern", "assign", "topics") if opts.get(k)]
    if len(strategies) != 1:
        raise OptionError(
            "give exactly one of 'subscribe' (topics), 'subscribePattern' (a regular expression), "
            "'assign' (JSON {\"topic\":[0,1]}) or 'topics' (logical tenant/namespace/topic names)"
            + (f"; got {', '.join(strategies)}" if strategies else "")
        )
    subscribe: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[TP, ...] = ()
    if "subscribe" in strategies:
        subscribe = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not subscribe:
            raise OptionError("option 'subscribe' names no topic")
    elif "subscribepattern" in strategies:
        pattern = opts["subscribepattern"]
    elif "topics" in strategies:
        prefixes_text = opts.get("prefixes", "*").strip()
        prefixes = None if prefixes_text in ("", "*") else [p.strip() for p in prefixes_text.split(",") if p.strip()]
        try:
            pattern = logical_topics_pattern([t for t in opts["topics"].split(",") if t.strip()], prefixes)
        except ValueError as e:
            raise OptionError(str(e)) from None
    else:
        assign = _parse_assign(opts["assign"])
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as e:
            raise OptionError(f"subscribePattern is not a valid regular expression: {e}") from None
    if "prefixes" in opts and "topics" not in strategies:
        raise OptionError("option 'prefixes' goes with 'topics' (logical topic names)")

    starting = _parse_spec(opts, "starting", default="latest" if streaming else "earliest", allow_latest_default=True)
    ending = _parse_spec(opts, "ending", default="latest", allow_latest_default=True)
    if streaming and any(k in opts for k in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")):
        raise OptionError("ending offsets are for batch queries (spark.read); a streaming query has no end")
    if not streaming and ending.kind == "earliest":
        raise OptionError("endingOffsets cannot be 'earliest' in a batch query")
    if not streaming and starting.kind == "latest":
        raise OptionError("startingOffsets cannot be 'latest' in a batch query")
    if not streaming and starting.kind == "offsets" and any(v == LATEST for p in starting.offsets.values() for v in p.values()):
        raise OptionError("startingOffsets cannot name -1 (latest) for a partition in a batch query")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise OptionError("startingOffsetsByTimestampStrategy must be 'error' or 'latest'")

    kafka = [(k[len("kafka."):], v) for k, v in opts.items() if k.startswith("kafka.") and k != "kafka.bootstrap.servers"]
    for k, _ in kafka:
        if k in ("group.id", "enable.auto.commit", "auto.offset.reset", "enable.partition.eof", "key.deserializer", "value.deserializer"):
            raise OptionError(f"kafka.{k} is not supported: the source assigns partitions and keeps offsets in Spark's checkpoint")
    if opts.get("client.rack"):
        kafka.append(("client.rack", opts["client.rack"]))

    return SourceOptions(
        bootstrap_servers=servers,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        timestamp_strategy=strategy,
        max_offsets_per_trigger=_positive(opts, "maxoffsetspertrigger"),
        min_offsets_per_trigger=_positive(opts, "minoffsetspertrigger"),
        max_bytes_per_trigger=_positive(opts, "maxbytespertrigger"),
        fail_on_data_loss=_bool(opts, "failondataloss", True),
        min_partitions=_positive(opts, "minpartitions"),
        poll_timeout_ms=_positive(opts, "kafkaconsumer.polltimeoutms") or 120_000,
        request_timeout_ms=_positive(opts, "requesttimeoutms") or 15_000,
        fetch_offset_num_retries=_nonnegative(opts, "fetchoffset.numretries", 3),
        fetch_offset_retry_interval_ms=_nonnegative(opts, "fetchoffset.retryintervalms", 1000),
        include_headers=_bool(opts, "includeheaders", True),
        malformed_only=_bool(opts, "malformedonly", False),
        data_loss_report=opts.get("datalossreport") or None,
        kafka=tuple(sorted(kafka)),
    )


def _parse_assign(text: str) -> tuple[TP, ...]:
    try:
        data = json.loads(text)
        out = tuple(sorted((str(t), int(p)) for t, parts in data.items() for p in parts))
    except (ValueError, TypeError, AttributeError):
        raise OptionError(f"option 'assign' must be JSON like {{\"topicA\":[0,1]}}, not {text!r}") from None
    if not out:
        raise OptionError("option 'assign' names no partition")
    return out


def _parse_spec(opts: dict[str, str], which: str, default: str, allow_latest_default: bool) -> StartSpec:
    offsets_key, ts_key, by_ts_key = f"{which}offsets", f"{which}timestamp", f"{which}offsetsbytimestamp"
    given = [k for k in (offsets_key, ts_key, by_ts_key) if k in opts]
    if len(given) > 1:
        # Spark's precedence: the global timestamp, then per-partition timestamps, then offsets.
        pass
    if ts_key in opts:
        try:
            return StartSpec("timestamp", timestamp=int(opts[ts_key]))
        except ValueError:
            raise OptionError(f"option '{which}Timestamp' must be milliseconds since the epoch, not {opts[ts_key]!r}") from None
    if by_ts_key in opts:
        return StartSpec("timestamps", timestamps=_offsets_json(opts[by_ts_key], f"{which}OffsetsByTimestamp"))
    text = opts.get(offsets_key, default).strip()
    if text.lower() in ("earliest", "latest"):
        return StartSpec(text.lower())
    return StartSpec("offsets", offsets=_offsets_json(text, f"{which}Offsets"))


def _offsets_json(text: str, name: str) -> Offsets:
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise TypeError
        out = {str(t): {str(int(p)): int(o) for p, o in parts.items()} for t, parts in data.items()}
    except (ValueError, TypeError, AttributeError):
        raise OptionError(
            f"option '{name}' must be 'earliest', 'latest' or JSON like {{\"topicA\":{{\"0\":23,\"1\":-2}}}}, not {text!r}"
        ) from None
    return out


def _positive(opts: dict[str, str], key: str) -> int | None:
    if key not in opts or opts[key] == "":
        return None
    try:
        n = int(opts[key])
    except ValueError:
        raise OptionError(f"option '{key}' must be a positive integer, not {opts[key]!r}") from None
    if n <= 0:
        raise OptionError(f"option '{key}' must be a positive integer, not {opts[key]!r}")
    return n


def _nonnegative(opts: dict[str, str], key: str, default: int) -> int:
    if key not in opts:
        return default
    try:
        n = int(opts[key])
    except ValueError:
        n = -1
    if n < 0:
        raise OptionError(f"option '{key}' must be a non-negative integer, not {opts[key]!r}")
    return n


def _bool(opts: dict[str, str], key: str, default: bool) -> bool:
    if key not in opts:
        return default
    text = opts[key].strip().lower()
    if text not in ("true", "false"):
        raise OptionError(f"option '{key}' must be true or false, not {opts[key]!r}")
    return text == "true"


# ---------------------------------------------------------------- offsets


def to_json_offsets(offsets: dict[TP, int]) -> Offsets:
    out: Offsets = {}
    for (topic, part), off in sorted(offsets.items()):
        out.setdefault(topic, {})[str(part)] = int(off)
    return out


def from_json_offsets(data: Offsets) -> dict[TP, int]:
    return {(str(t), int(p)): int(o) for t, parts in (data or {}).items() for p, o in parts.items()}


def rate_limit(start: dict[TP, int], latest: dict[TP, int], limit: int) -> dict[TP, int]:
    """Spread at most `limit` records over partitions in proportion to their lag, as Spark's Kafka source does."""
    sizes = {tp: latest[tp] - start.get(tp, latest[tp]) for tp in latest}
    sizes = {tp: s for tp, s in sizes.items() if s > 0}
    total = sum(sizes.values())
    if total <= limit:
        return dict(latest)
    out = dict(latest)
    for tp, size in sizes.items():
        prorate = limit * (size / total)
        n = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(latest[tp], start[tp] + n)
    return out


def split_range(start: int, end: int, pieces: int) -> list[tuple[int, int]]:
    """[start, end) cut into at most `pieces` contiguous ranges of nearly equal size."""
    size = end - start
    pieces = max(1, min(pieces, size))
    out = []
    for i in range(pieces):
        a = start + size * i // pieces
        b = start + size * (i + 1) // pieces
        if b > a:
            out.append((a, b))
    return out
