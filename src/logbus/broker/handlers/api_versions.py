"""ApiVersions (18): what this broker speaks."""

from logbus.protocol.errors import ErrorCode

API_KEY, MIN_VERSION, MAX_VERSION = 18, 0, 3


def _api_list() -> list[dict]:
    from logbus.broker.handlers import HANDLERS

    return [{"api_key": k, "min_version": e.min_version, "max_version": e.max_version} for k, e in sorted(HANDLERS.items())]


def unsupported_version_response() -> dict:
    return {"error_code": ErrorCode.unsupported_version, "api_keys": _api_list()}


async def handle(ctx, request) -> dict:
    return {"error_code": ErrorCode.none, "api_keys": _api_list(), "throttle_time": 0}
