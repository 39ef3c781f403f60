"""Validate and apply a change of a topic's config overrides (shared by AlterConfigs and IncrementalAlterConfigs)."""

from collections.abc import Callable

from logbus.protocol.errors import ErrorCode, KafkaProtocolError

TOPIC, BROKER = 2, 4


def apply_topic_configs(broker, resource_type: int, name: str, change: Callable[[dict[str, str]], dict[str, str]], validate_only: bool) -> None:
    if resource_type == BROKER:
        raise KafkaProtocolError(ErrorCode.invalid_request, "Broker settings of logbus are static: set them in the broker's TOML file or flags")
    if resource_type != TOPIC:
        raise KafkaProtocolError(ErrorCode.invalid_request, f"Unsupported resource type {resource_type}")
    topic = broker.image.topic(name)
    if topic is None:
        raise KafkaProtocolError(ErrorCode.unknown_topic_or_partition, f"Topic '{name}' does not exist.")
    updated = change(topic.configs)
    broker.control.log_config(updated)
    broker.control.placement(updated)
    if not validate_only:
        broker.control.set_topic_configs(name, updated)
        broker.refresh_metadata()


def resource_error(e: KafkaProtocolError) -> dict:
    return {"error_code": e.code, "error_message": e.message}
