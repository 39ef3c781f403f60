"""DescribeCluster (60): the live brokers and the controller."""

from logbus.protocol.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 60, 0, 1

BROKERS_ENDPOINT = 1


async def handle(ctx, request) -> dict:
    image = ctx.broker.image
    endpoint_type = getattr(request, "endpoint_type", BROKERS_ENDPOINT)
    if endpoint_type != BROKERS_ENDPOINT:
        return {"error_code": ErrorCode.unsupported_endpoint_type, "error_message": "logbus brokers serve the brokers endpoint only", "endpoint_type": endpoint_type, "cluster_id": image.cluster_id, "controller_id": -1, "brokers": []}
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "endpoint_type": endpoint_type,
        "cluster_id": image.cluster_id,
        "controller_id": image.controller_id,
        "brokers": [{"broker_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack} for b in image.brokers.values()],
        "cluster_authorized_operations": -2147483648,
    }
