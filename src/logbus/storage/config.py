"""Per-topic log configuration, named after Kafka's topic configs."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["CONFIG_KEYS", "ConfigKey", "InvalidConfigError", "LogConfig"]

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
INT32_MIN = -(2**31)


class InvalidConfigError(ValueError):
    """A topic config that Kafka would reject with INVALID_CONFIG (40)."""

    error_code = 40

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}" if key else message)
        self.key = key
        self.message = message


@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str  # Kafka's name, e.g. "segment.bytes"
    attr: str  # LogConfig field name
    type: str  # "int", "long", "string" or "boolean" (Kafka's ConfigDef types)
    default: Any
    validator: Callable[[Any], str | None]  # returns an error message or None
    valid_values: str  # human-readable, e.g. "[14,...]"
    doc: str

    def parse(self, raw: object) -> Any:
        """Convert a string (or an already typed value) and validate it."""
        if self.type in ("int", "long"):
            if isinstance(raw, bool):
                raise InvalidConfigError(self.name, f"expected an integer, got {raw!r}")
            if isinstance(raw, int):
                value = raw
            else:
                try:
                    value = int(str(raw).strip())
                except ValueError:
                    raise InvalidConfigError(self.name, f"expected an integer, got {raw!r}") from None
            lo, hi = (INT32_MIN, INT32_MAX) if self.type == "int" else (INT64_MIN, INT64_MAX)
            if not lo <= value <= hi:
                bits = 32 if self.type == "int" else 64
                raise InvalidConfigError(self.name, f"{value} does not fit a {bits}-bit integer")
        elif self.type == "boolean":
            if isinstance(raw, bool):
                value = raw
            else:
                text = str(raw).strip().lower()
                if text not in ("true", "false"):
                    raise InvalidConfigError(self.name, f"expected true or false, got {raw!r}")
                value = text == "true"
        else:
            value = str(raw).strip()
        problem = self.validator(value)
        if problem:
            raise InvalidConfigError(self.name, problem)
        return value

    def format(self, value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)


def _at_least(lo: int) -> Callable[[int], str | None]:
    return lambda v: None if v >= lo else f"{v} is below the minimum {lo}"


def _one_of(*allowed: str) -> Callable[[str], str | None]:
    return lambda v: None if v in allowed else f"{v!r} is not one of {', '.join(allowed)}"


def _cleanup_policy(v: str) -> str | None:
    parts = [p.strip() for p in v.split(",") if p.strip()]
    if parts == ["delete"]:
        return None
    if "compact" in parts:
        return f"{v!r} is not supported: logbus has no log compaction; only 'delete' is accepted"
    return f"{v!r} is not a cleanup policy; only 'delete' is accepted"


def _any(_v: Any) -> str | None:
    return None


_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("segment.bytes", "segment_bytes", "int", 1073741824, _at_least(14), "[14,...]",
              "The size of a log segment file; a new segment is rolled when the active one would exceed it."),
    ConfigKey("segment.ms", "segment_ms", "long", 604800000, _at_least(1), "[1,...]",
              "The time after which the active segment is rolled even if it is not full, so that retention can delete old data."),
    ConfigKey("retention.ms", "retention_ms", "long", 604800000, _at_least(-1), "[-1,...]",
              "How long a segment is kept after its newest record's timestamp before it is deleted; -1 means no time limit."),
    ConfigKey("retention.bytes", "retention_bytes", "long", -1, _at_least(-1), "[-1,...]",
              "The maximum size a partition may grow to before its oldest segments are deleted; -1 means no size limit."),
    ConfigKey("flush.messages", "flush_messages", "long", INT64_MAX, _at_least(1), "[1,...]",
              "fsync the log after this many records have been appended; the default relies on replication and the page cache."),
    ConfigKey("flush.ms", "flush_ms", "long", INT64_MAX, _at_least(0), "[0,...]",
              "fsync the log when this much time has passed since the last fsync; the default relies on replication and the page cache."),
    ConfigKey("index.interval.bytes", "index_interval_bytes", "int", 4096, _at_least(0), "[0,...]",
              "How many log bytes are written between two entries of the sparse offset and time indexes."),
    ConfigKey("segment.index.bytes", "segment_index_bytes", "int", 10485760, _at_least(4), "[4,...]",
              "The maximum size of a segment's offset and time index files; a segment whose index is full is rolled."),
    ConfigKey("max.message.bytes", "max_message_bytes", "int", 1048588, _at_least(0), "[0,...]",
              "The largest record batch the broker accepts for this topic, in bytes."),
    ConfigKey("message.timestamp.type", "message_timestamp_type", "string", "CreateTime",
              _one_of("CreateTime", "LogAppendTime"), "[CreateTime, LogAppendTime]",
              "Whether record timestamps are the producer's create time or the broker's log append time."),
    ConfigKey("cleanup.policy", "cleanup_policy", "string", "delete", _cleanup_policy, "[delete]",
              "What happens to old segments: they are deleted by retention.ms and retention.bytes (compaction is not supported)."),
    ConfigKey("min.insync.replicas", "min_insync_replicas", "int", 1, _at_least(1), "[1,...]",
              "The least number of in-sync replicas that must acknowledge a write with acks=all for it to succeed."),
    ConfigKey("unclean.leader.election.enable", "unclean_leader_election_enable", "boolean", False, _any, "",
              "Whether a replica outside the ISR may become leader as a last resort, at the risk of losing data."),
)

#: Kafka config name -> ConfigKey, in documentation order.
CONFIG_KEYS: dict[str, ConfigKey] = {k.name: k for k in _KEYS}
_BY_ATTR: dict[str, ConfigKey] = {k.attr: k for k in _KEYS}


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    retention_ms: int = 604800000
    retention_bytes: int = -1
    flush_messages: int = INT64_MAX
    flush_ms: int = INT64_MAX
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10485760
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    cleanup_policy: str = "delete"
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False

    def __post_init__(self) -> None:
        for key in _KEYS:
            key.parse(getattr(self, key.attr))

    @classmethod
    def from_overrides(cls, defaults: LogConfig, overrides: dict[str, Any]) -> LogConfig:
        """`defaults` with Kafka-named overrides applied (values as strings, as on the wire)."""
        changes: dict[str, Any] = {}
        for name, raw in overrides.items():
            key = CONFIG_KEYS.get(name)
            if key is None:
                raise InvalidConfigError(
                    name, f"unknown topic config; supported: {', '.join(CONFIG_KEYS)}"
                )
            if raw is None:
                changes[key.attr] = key.default
                continue
            changes[key.attr] = key.parse(raw)
        return dataclasses.replace(defaults, **changes) if changes else defaults

    def to_kafka_dict(self) -> dict[str, str]:
        """Every config under its Kafka name, formatted as Kafka's DescribeConfigs shows it."""
        return {k.name: k.format(getattr(self, k.attr)) for k in _KEYS}

    def overrides_against(self, defaults: LogConfig) -> dict[str, str]:
        """The Kafka-named settings where this config differs from `defaults`."""
        return {
            k.name: k.format(getattr(self, k.attr))
            for k in _KEYS
            if getattr(self, k.attr) != getattr(defaults, k.attr)
        }

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"
