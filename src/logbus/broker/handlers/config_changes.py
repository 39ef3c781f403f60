"""Validate and apply a change of a topic's config overrides (shared by AlterConfigs and IncrementalAlterConfigs)."""

from collections.abc import Callable

from logbus.broker.handlers.topic_admin import validated_configs
from logbus.protocol.errors import ErrorCode, KafkaProtocolError

TOPIC, BROKER = 2, 4


def apply_topic_configs(broker, resource_type: int, name: str, change: Callable[[dict[str, str]], dict[str, str]], validate_only: bool) -> None:
    if resource_type == BROKER:
        raise KafkaProtocolError(ErrorCode.invalid_request, "Broker settings of logbus are static: set them in the broker's TOML file or flags")
    if resource_type != TOPIC:
        raise KafkaProtocolError(ErrorCode.invalid_request, f"Unsupported resource type {resource_type}")
    topic = broker.topics.get(name)
    if topic is None:
        raise KafkaProtocolError(ErrorCode.unknown_topic_or_partition, f"Topic '{name}' does not exist.")
    updated = change(topic.configs)
    validated_configs(broker, updated)
    if not validate_only:
        broker.topics.set_configs(name, updated)
        broker.replicas.update_topic_config(topic)


def resource_error(e: KafkaProtocolError) -> dict:
    return {"error_code": e.code, "error_message": e.message}
