"""DescribeGroups (15): state, protocol, and members with their metadata and assignment."""

from logbus.broker.group.model import GroupState
from logbus.protocol.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 15, 0, 5


async def handle(ctx, request) -> dict:
    coordinator = ctx.broker.groups
    results = []
    for group_id in request.groups:
        if not coordinator.owns(group_id):
            results.append({"error_code": ErrorCode.not_coordinator, "group_id": group_id, "group_state": "", "protocol_type": "", "protocol_data": "", "members": [], "authorized_operations": -2147483648})
            continue
        g = coordinator.groups.get(group_id)
        if g is None:
            results.append({"error_code": ErrorCode.none, "group_id": group_id, "group_state": GroupState.DEAD.value, "protocol_type": "", "protocol_data": "", "members": [], "authorized_operations": -2147483648})
            continue
        stable = g.state == GroupState.STABLE
        results.append(
            {
                "error_code": ErrorCode.none,
                "group_id": group_id,
                "group_state": g.state.value,
                "protocol_type": g.protocol_type or "",
                "protocol_data": g.protocol_name or "" if stable else "",
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata_for(g.protocol_name) if stable else b"",
                        "member_assignment": m.assignment if stable else b"",
                    }
                    for m in g.members.values()
                ],
                "authorized_operations": -2147483648,
            }
        )
    return {"throttle_time": 0, "groups": results}
