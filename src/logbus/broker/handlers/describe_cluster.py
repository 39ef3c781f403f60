"""DescribeCluster (60).

As in KRaft-mode Kafka, any live broker can serve admin requests (they go through the metadata
store), so the brokers endpoint names the answering broker as "controller": clients never wait
on a controller that just died. The controllers endpoint (v1, KIP-919) names the broker that
holds the controller lease, the one that elects leaders.
"""

from logbus.protocol.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 60, 0, 1

BROKERS_ENDPOINT, CONTROLLERS_ENDPOINT = 1, 2


async def handle(ctx, request) -> dict:
    image = ctx.broker.image
    endpoint_type = getattr(request, "endpoint_type", BROKERS_ENDPOINT)
    if endpoint_type == CONTROLLERS_ENDPOINT:
        holder = image.brokers.get(image.controller_id)
        nodes = [holder] if holder is not None else []
        controller_id = image.controller_id if holder is not None else -1
    elif endpoint_type == BROKERS_ENDPOINT:
        nodes = list(image.brokers.values())
        controller_id = ctx.broker.config.broker_id
    else:
        return {"error_code": ErrorCode.unsupported_endpoint_type, "error_message": f"unknown endpoint type {endpoint_type}",
                "endpoint_type": endpoint_type, "cluster_id": image.cluster_id, "controller_id": -1, "brokers": []}
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "endpoint_type": endpoint_type,
        "cluster_id": image.cluster_id,
        "controller_id": controller_id,
        "brokers": [{"broker_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack} for b in nodes],
        "cluster_authorized_operations": -2147483648,
    }
