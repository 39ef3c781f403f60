"""IncrementalAlterConfigs (44): SET, DELETE, APPEND and SUBTRACT on a topic's config overrides."""

from logbus.broker.handlers.config_changes import apply_topic_configs, resource_error
from logbus.protocol.errors import ErrorCode, KafkaProtocolError
from logbus.storage.config import LogConfig

API_KEY, MIN_VERSION, MAX_VERSION = 44, 0, 1

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
LIST_CONFIGS = {"cleanup.policy"}  # Kafka's LIST-typed topic configs among those logbus serves


def _changes(broker, configs):
    def apply(current: dict[str, str]) -> dict[str, str]:
        updated = dict(current)
        for c in configs:
            if c.config_operation == SET:
                updated[c.name] = c.value
            elif c.config_operation == DELETE:
                updated.pop(c.name, None)
            elif c.config_operation in (APPEND, SUBTRACT):
                if c.name not in LIST_CONFIGS:
                    raise KafkaProtocolError(ErrorCode.invalid_config, f"Config value append/subtract is not allowed for config key {c.name}")
                effective = updated.get(c.name, LogConfig.from_overrides(broker.config.topic_defaults, {}).to_kafka_dict()[c.name])
                items = [i for i in effective.split(",") if i]
                given = [i for i in (c.value or "").split(",") if i]
                if c.config_operation == APPEND:
                    items += [i for i in given if i not in items]
                else:
                    items = [i for i in items if i not in given]
                updated[c.name] = ",".join(items)
            else:
                raise KafkaProtocolError(ErrorCode.invalid_request, f"Unknown config operation {c.config_operation}")
        return updated

    return apply


async def handle(ctx, request) -> dict:
    responses = []
    for r in request.resources:
        base = {"resource_type": r.resource_type, "resource_name": r.resource_name}
        names = [c.name for c in r.configs]
        try:
            if len(names) != len(set(names)):
                raise KafkaProtocolError(ErrorCode.invalid_request, f"Error due to duplicate config keys: {sorted({n for n in names if names.count(n) > 1})}")
            apply_topic_configs(ctx.broker, r.resource_type, r.resource_name, _changes(ctx.broker, r.configs), request.validate_only)
        except KafkaProtocolError as e:
            responses.append({**base, **resource_error(e)})
            continue
        responses.append({**base, "error_code": ErrorCode.none, "error_message": None})
    return {"throttle_time": 0, "responses": responses}
