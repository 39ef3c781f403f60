"""ListGroups (16), with the states filter (v4) and types filter (v5)."""

from logbus.protocol.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 16, 0, 5


async def handle(ctx, request) -> dict:
    states = {s.lower() for s in getattr(request, "states_filter", ()) or ()}
    types = {t.lower() for t in getattr(request, "types_filter", ()) or ()}
    groups = []
    for g in ctx.broker.groups.list_groups():
        if states and g.state.value.lower() not in states:
            continue
        if types and "classic" not in types:
            continue
        groups.append({"group_id": g.group_id, "protocol_type": g.protocol_type or "", "group_state": g.state.value, "group_type": "classic"})
    return {"throttle_time": 0, "error_code": ErrorCode.none, "groups": groups}
