"""JoinGroup (11)."""

API_KEY, MIN_VERSION, MAX_VERSION = 11, 0, 9


async def handle(ctx, request) -> dict:
    session_ms = int(request.session_timeout.total_seconds() * 1000)
    rebalance = getattr(request, "rebalance_timeout", None)
    result = await ctx.broker.groups.join(
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=ctx.header.client_id or "",
        client_host=f"/{ctx.peer[0]}" if isinstance(ctx.peer, tuple) else "",
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=int(rebalance.total_seconds() * 1000) if rebalance is not None else session_ms,
        protocol_type=request.protocol_type,
        protocols=[(p.name, p.metadata) for p in request.protocols],
        require_known_member_id=ctx.api_version >= 4,
    )
    return {
        "throttle_time": 0,
        "error_code": result.error,
        "generation_id": result.generation_id,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name if result.protocol_name is not None or ctx.api_version >= 7 else "",
        "leader": result.leader,
        "skip_assignment": False,
        "member_id": result.member_id,
        "members": [
            {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "metadata": m.metadata_for(result.protocol_name)}
            for m in result.members or []
        ],
    }
