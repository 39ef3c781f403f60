"""Heartbeat (12)."""

API_KEY, MIN_VERSION, MAX_VERSION = 12, 0, 4


async def handle(ctx, request) -> dict:
    error = ctx.broker.groups.heartbeat(request.group_id, request.generation_id, request.member_id, getattr(request, "group_instance_id", None))
    return {"throttle_time": 0, "error_code": error}
