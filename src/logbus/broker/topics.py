"""The cluster's metadata as a broker sees it: topics, partitions, live brokers.

The partition model carries what replication needs: `replicas` (observers included, in
placement order), `observers` (the subset that never joins the ISR), `isr`, `leader`
(-1 when none), `leader_epoch`, and `partition_epoch`, the version every change of the
partition compares and sets in the metadata store.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from logbus.protocol.errors import ErrorCode, KafkaProtocolError

MAX_TOPIC_NAME = 249
OFFSETS_TOPIC = "__consumer_offsets"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC})  # written by the broker itself, never by clients
NO_LEADER = -1
PLACEMENT_CONFIG = "confluent.placement.constraints"  # Confluent's topic config name, kept for familiarity
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")


@dataclass
class PartitionState:
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    observers: list[int] = field(default_factory=list)
    partition_epoch: int = 0

    def copy(self, **changes) -> "PartitionState":
        lists = {"replicas": list(self.replicas), "isr": list(self.isr), "observers": list(self.observers)}
        return replace(self, **{**lists, **changes})

    @property
    def sync_replicas(self) -> list[int]:
        return [r for r in self.replicas if r not in self.observers]


@dataclass
class TopicState:
    name: str
    topic_id: str
    partitions: list[PartitionState]
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


@dataclass(frozen=True)
class BrokerInfo:
    broker_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class MetadataImage:
    """An immutable snapshot of the cluster, replaced whole when the store changes."""

    cluster_id: str
    controller_id: int
    brokers: dict[int, BrokerInfo]
    topics: dict[str, TopicState]
    version: int = -1

    def topic(self, name: str) -> TopicState | None:
        return self.topics.get(name)

    def topic_by_id(self, topic_id: str) -> TopicState | None:
        return next((t for t in self.topics.values() if t.topic_id == topic_id), None)

    def partition(self, topic: str, index: int) -> PartitionState | None:
        t = self.topics.get(topic)
        return t.partitions[index] if t is not None and 0 <= index < len(t.partitions) else None


def validate_topic_name(name: str) -> None:
    if not name or name in (".", ".."):
        raise KafkaProtocolError(ErrorCode.invalid_topic_exception, f"Topic name {name!r} is illegal, it can't be empty, '.' or '..'")
    if len(name) > MAX_TOPIC_NAME:
        raise KafkaProtocolError(ErrorCode.invalid_topic_exception, f"Topic name is longer than {MAX_TOPIC_NAME} characters")
    if not _LEGAL_TOPIC.match(name):
        raise KafkaProtocolError(
            ErrorCode.invalid_topic_exception,
            f"Topic name {name!r} is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'",
        )
