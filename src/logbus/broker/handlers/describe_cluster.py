"""DescribeCluster (60)."""

from logbus.protocol.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 60, 0, 1

BROKERS_ENDPOINT = 1


async def handle(ctx, request) -> dict:
    broker = ctx.broker
    endpoint_type = getattr(request, "endpoint_type", BROKERS_ENDPOINT)
    if endpoint_type != BROKERS_ENDPOINT:
        return {"error_code": ErrorCode.unsupported_endpoint_type, "error_message": "logbus brokers serve the brokers endpoint only", "endpoint_type": endpoint_type, "cluster_id": broker.cluster_id, "controller_id": -1, "brokers": []}
    host, port = broker.config.advertised_host_port
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "endpoint_type": endpoint_type,
        "cluster_id": broker.cluster_id,
        "controller_id": broker.config.broker_id,
        "brokers": [{"broker_id": broker.config.broker_id, "host": host, "port": port, "rack": broker.config.rack}],
        "cluster_authorized_operations": -2147483648,
    }
