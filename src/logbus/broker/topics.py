"""Topics and their partitions as this broker knows them, kept in the data directory.

The partition model already carries what replication needs (replicas, ISR, observers,
leader epoch, partition epoch); on a single broker every list is just this broker.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from logbus.protocol.errors import ErrorCode, KafkaProtocolError

MAX_TOPIC_NAME = 249
OFFSETS_TOPIC = "__consumer_offsets"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC})  # written by the broker itself, never by clients
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


@dataclass
class TopicState:
    name: str
    topic_id: str
    partitions: list[PartitionState]
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


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


class TopicRegistry:
    """The topics of this broker, saved atomically to `topics.json` in the data directory."""

    def __init__(self, data_dir: Path, broker_id: int) -> None:
        self.path = data_dir / "topics.json"
        self.broker_id = broker_id
        self.topics: dict[str, TopicState] = {}
        if self.path.exists():
            raw = json.loads(self.path.read_text())
            for t in raw["topics"]:
                parts = [PartitionState(**p) for p in t.pop("partitions")]
                self.topics[t["name"]] = TopicState(partitions=parts, **t)

    def get(self, name: str) -> TopicState | None:
        return self.topics.get(name)

    def by_id(self, topic_id: str) -> TopicState | None:
        return next((t for t in self.topics.values() if t.topic_id == topic_id), None)

    def check_new(self, name: str, num_partitions: int, replication_factor: int, live_brokers: int) -> None:
        validate_topic_name(name)
        if name in self.topics:
            raise KafkaProtocolError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        if num_partitions < 1:
            raise KafkaProtocolError(ErrorCode.invalid_partitions, "Number of partitions must be larger than 0.")
        if replication_factor < 1:
            raise KafkaProtocolError(ErrorCode.invalid_replication_factor, "Replication factor must be larger than 0.")
        if replication_factor > live_brokers:
            raise KafkaProtocolError(
                ErrorCode.invalid_replication_factor,
                f"Replication factor: {replication_factor} larger than available brokers: {live_brokers}.",
            )

    def create(self, name: str, num_partitions: int, configs: dict[str, str]) -> TopicState:
        me = self.broker_id
        topic = TopicState(
            name=name,
            topic_id=str(uuid.uuid4()),
            partitions=[PartitionState(p, me, 0, [me], [me]) for p in range(num_partitions)],
            configs=dict(configs),
        )
        self.topics[name] = topic
        self.save()
        return topic

    def add_partitions(self, name: str, new_total: int) -> list[PartitionState]:
        topic = self.topics[name]
        me = self.broker_id
        added = [PartitionState(p, me, 0, [me], [me]) for p in range(len(topic.partitions), new_total)]
        topic.partitions.extend(added)
        self.save()
        return added

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        self.topics[name].configs = dict(configs)
        self.save()

    def delete(self, name: str) -> TopicState:
        topic = self.topics.pop(name)
        self.save()
        return topic

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        data = {"version": 1, "topics": [asdict(t) for t in self.topics.values()]}
        with open(tmp, "w") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)


def load_or_create_cluster_id(data_dir: Path, broker_id: int) -> str:
    """Kafka keeps cluster and node ids in meta.properties; a data dir of another broker is refused."""
    meta = data_dir / "meta.properties"
    if meta.exists():
        props = dict(line.split("=", 1) for line in meta.read_text().splitlines() if "=" in line and not line.startswith("#"))
        if int(props.get("node.id", broker_id)) != broker_id:
            raise ValueError(f"{data_dir} belongs to broker {props['node.id']}, not {broker_id}")
        return props["cluster.id"]
    cluster_id = uuid.uuid4().hex[:22]
    meta.write_text(f"version=1\ncluster.id={cluster_id}\nnode.id={broker_id}\n")
    return cluster_id
