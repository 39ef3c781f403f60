"""Topic creation and config validation shared by CreateTopics, Metadata auto-creation and config APIs."""

from __future__ import annotations

from logbus.protocol.errors import ErrorCode, KafkaProtocolError
from logbus.storage.config import InvalidConfigError, LogConfig


def validated_configs(broker, configs: dict[str, str]) -> LogConfig:
    try:
        return LogConfig.from_overrides(broker.config.topic_defaults, configs)
    except InvalidConfigError as e:
        raise KafkaProtocolError(ErrorCode.invalid_config, str(e)) from None


def check_topic(broker, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str]) -> tuple[int, int]:
    """Resolve -1 to the broker defaults and validate; raises KafkaProtocolError."""
    if num_partitions == -1:
        num_partitions = broker.config.num_partitions
    if replication_factor == -1:
        replication_factor = broker.config.default_replication_factor
    broker.topics.check_new(name, num_partitions, replication_factor, broker.live_broker_count)
    validated_configs(broker, configs)
    return num_partitions, replication_factor


def create_topic(broker, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str]):
    num_partitions, replication_factor = check_topic(broker, name, num_partitions, replication_factor, configs)
    topic = broker.topics.create(name, num_partitions, configs)
    broker.replicas.add_topic_partitions(topic, topic.partitions)
    return topic
