"""LeaveGroup (13): one member (v0-v2) or a batch of members, static ones by instance id (v3+)."""

from logbus.protocol.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 13, 0, 5


async def handle(ctx, request) -> dict:
    if ctx.api_version < 3:
        members = [(request.member_id, None)]
    else:
        members = [(m.member_id, m.group_instance_id) for m in request.members]
    error, results = ctx.broker.groups.leave(request.group_id, members)
    if ctx.api_version < 3:
        return {"throttle_time": 0, "error_code": results[0][2] if error == ErrorCode.none else error}
    return {
        "throttle_time": 0,
        "error_code": error,
        "members": [{"member_id": m, "group_instance_id": i, "error_code": e} for m, i, e in results],
    }
