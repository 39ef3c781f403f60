"""FindCoordinator (10): this broker coordinates every group (single broker)."""

from logbus.protocol.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 10, 0, 4

GROUP_KEY_TYPE = 0


async def handle(ctx, request) -> dict:
    broker = ctx.broker
    host, port = broker.config.advertised_host_port
    keys = list(request.coordinator_keys) if ctx.api_version >= 4 else [request.key]
    key_type = getattr(request, "key_type", GROUP_KEY_TYPE)
    coordinators = []
    for key in keys:
        if key_type != GROUP_KEY_TYPE:
            coordinators.append({"key": key, "node_id": -1, "host": "", "port": -1, "error_code": ErrorCode.invalid_request,
                                 "error_message": "logbus does not coordinate transactions"})
            continue
        broker.groups.coordinator_ready()
        coordinators.append({"key": key, "node_id": broker.config.broker_id, "host": host, "port": port, "error_code": ErrorCode.none, "error_message": None})
    if ctx.api_version >= 4:
        return {"throttle_time": 0, "coordinators": coordinators}
    return {"throttle_time": 0, **coordinators[0]}
