"""DeleteGroups (42): only groups without members, with their committed offsets."""

API_KEY, MIN_VERSION, MAX_VERSION = 42, 0, 2


async def handle(ctx, request) -> dict:
    return {"throttle_time": 0, "results": [{"group_id": g, "error_code": await ctx.broker.groups.delete_group(g)} for g in request.groups_names]}
