"""AlterConfigs (33): replace a topic's whole set of config overrides (the legacy, non-incremental API)."""

from logbus.broker.handlers.config_changes import apply_topic_configs, resource_error
from logbus.protocol.errors import ErrorCode, KafkaProtocolError

API_KEY, MIN_VERSION, MAX_VERSION = 33, 0, 2


async def handle(ctx, request) -> dict:
    responses = []
    for r in request.resources:
        base = {"resource_type": r.resource_type, "resource_name": r.resource_name}
        try:
            apply_topic_configs(ctx.broker, r.resource_type, r.resource_name, lambda _current, r=r: {c.name: c.value for c in r.configs}, request.validate_only)
        except KafkaProtocolError as e:
            responses.append({**base, **resource_error(e)})
            continue
        responses.append({**base, "error_code": ErrorCode.none, "error_message": None})
    return {"throttle_time": 0, "responses": responses}
