"""SyncGroup (14)."""

API_KEY, MIN_VERSION, MAX_VERSION = 14, 0, 5


async def handle(ctx, request) -> dict:
    error, assignment = await ctx.broker.groups.sync(
        group_id=request.group_id,
        generation_id=request.generation_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
        assignments={a.member_id: a.assignment for a in request.assignments},
    )
    group = ctx.broker.groups.groups.get(request.group_id)
    return {
        "throttle_time": 0,
        "error_code": error,
        "protocol_type": group.protocol_type if group else None,
        "protocol_name": group.protocol_name if group else None,
        "assignment": assignment,
    }
