"""FindCoordinator (10): a group's coordinator is the leader of its __consumer_offsets partition."""

from logbus.protocol.errors import ErrorCode, KafkaProtocolError

API_KEY, MIN_VERSION, MAX_VERSION = 10, 0, 4

GROUP_KEY_TYPE = 0


def _find(broker, key: str, key_type: int) -> dict:
    if key_type != GROUP_KEY_TYPE:
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": ErrorCode.invalid_request,
                "error_message": "logbus does not coordinate transactions"}
    try:
        leader = broker.groups.coordinator_for(key)
    except KafkaProtocolError as e:
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": ErrorCode.coordinator_not_available, "error_message": e.message}
    info = broker.image.brokers.get(leader)
    if info is None:
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": ErrorCode.coordinator_not_available,
                "error_message": "The coordinator of this group has no live leader yet."}
    return {"key": key, "node_id": info.broker_id, "host": info.host, "port": info.port, "error_code": ErrorCode.none, "error_message": None}


async def handle(ctx, request) -> dict:
    keys = list(request.coordinator_keys) if ctx.api_version >= 4 else [request.key]
    key_type = getattr(request, "key_type", GROUP_KEY_TYPE)
    coordinators = [_find(ctx.broker, key, key_type) for key in keys]
    if ctx.api_version >= 4:
        return {"throttle_time": 0, "coordinators": coordinators}
    return {"throttle_time": 0, **coordinators[0]}
