"""Request decoding and response encoding on kio's generated message types.

Handlers answer with plain nested dicts; `build` turns them into the kio entity of the
negotiated version, filling fields that version lacks or that the handler left out with
Kafka's defaults. One handler thus serves every version of its API.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Mapping
from dataclasses import MISSING, fields
from datetime import datetime, timedelta, timezone
from functools import cache
from typing import Any

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, get_schema_field_type, is_optional
from kio.static.constants import EntityType

API_VERSIONS_KEY = 18
_HEADER_PREFIX = struct.Struct(">hhi")  # api key, api version, correlation id: common to every header version


class MalformedRequest(Exception):
    """Bytes that do not decode as the request they claim to be."""


@cache
def request_class(api_key: int, version: int) -> type:
    module = load_payload_module(api_key, version, EntityType.request)
    return next(v for v in vars(module).values() if isinstance(v, type) and getattr(v, "__type__", None) == EntityType.request)


@cache
def response_class(api_key: int, version: int) -> type:
    module = load_payload_module(api_key, version, EntityType.response)
    return next(v for v in vars(module).values() if isinstance(v, type) and getattr(v, "__type__", None) == EntityType.response)


@cache
def _reader(cls: type):
    return entity_reader(cls)


@cache
def _writer(cls: type):
    return entity_writer(cls)


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of any request, known or not."""
    if len(frame) < _HEADER_PREFIX.size:
        raise MalformedRequest(f"request of {len(frame)} bytes is shorter than a request header")
    return _HEADER_PREFIX.unpack_from(frame)


def decode_request(frame: bytes, api_key: int, version: int) -> tuple[Any, Any]:
    """Decode header and body of a request whose API and version are supported."""
    cls = request_class(api_key, version)
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    try:
        header, header_size = _reader(header_cls)(frame, 0)
        body, _ = _reader(cls)(frame, header_size)
    except Exception as e:  # kio raises several types for short or inconsistent input
        raise MalformedRequest(f"cannot decode {cls.__name__} v{version}: {e}") from None
    # Bytes after the body are ignored, as Apache Kafka does: librdkafka 2.x sends some
    # Metadata v12 requests with three extra bytes.
    return header, body


def encode_response(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    """Frame a response; ApiVersions always uses response header v0 (librdkafka relies on it)."""
    cls = response_class(api_key, version)
    entity = body if isinstance(body, cls) else build(cls, body)
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    if cls.__flexible__ and api_key != API_VERSIONS_KEY:
        _writer(ResponseHeaderV1)(buf, ResponseHeaderV1(correlation_id=correlation_id))
    else:
        _writer(ResponseHeaderV0)(buf, ResponseHeaderV0(correlation_id=correlation_id))
    _writer(cls)(buf, entity)
    out = buf.getbuffer()
    struct.pack_into(">i", out, 0, len(out) - 4)
    return bytes(out)


def encode_request(api_key: int, version: int, correlation_id: int, body: Mapping, client_id: str = "logbus") -> bytes:
    """Frame a request (used by tests and tools that talk to the broker without a client library)."""
    cls = request_class(api_key, version)
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    _writer(header_cls)(buf, header_cls(request_api_key=api_key, request_api_version=version, correlation_id=correlation_id, client_id=client_id))
    _writer(cls)(buf, build(cls, body))
    out = buf.getbuffer()
    struct.pack_into(">i", out, 0, len(out) - 4)
    return bytes(out)


def decode_response(frame: bytes, api_key: int, version: int) -> Any:
    cls = response_class(api_key, version)
    header_cls = ResponseHeaderV1 if cls.__flexible__ and api_key != API_VERSIONS_KEY else ResponseHeaderV0
    _, header_size = _reader(header_cls)(frame, 0)
    body, _ = _reader(cls)(frame, header_size)
    return body


# --- dict -> entity -------------------------------------------------------------------------

_ZERO_BY_KAFKA_TYPE = {
    "int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0, "uint32": 0, "float64": 0.0,
    "bool": False, "string": "", "bytes": b"", "records": None, "error_code": ErrorCode.none,
    "timedelta_i32": timedelta(0), "timedelta_i64": timedelta(0),
}


@cache
def _plan(cls: type) -> tuple:
    """Per field: (name, nested entity class or None, is_array, conversion, default)."""
    plan = []
    for f in fields(cls):
        kind = classify_field(f)
        nested = kind.type_ if isinstance(kind, (EntityField, EntityTupleField)) else None
        is_array = kind.is_array
        kafka_type = None if nested else get_schema_field_type(f)
        if f.default is not MISSING:
            default = f.default
        elif f.default_factory is not MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        elif is_array:
            default = ()
        elif nested is not None or is_optional(f):
            default = None
        else:
            default = _ZERO_BY_KAFKA_TYPE.get(kafka_type, 0)
        plan.append((f.name, nested, is_array, kafka_type, default))
    return tuple(plan)


def _convert(kafka_type: str | None, value: Any) -> Any:
    if kafka_type == "error_code" and not isinstance(value, ErrorCode):
        return ErrorCode(int(value))
    if kafka_type in ("timedelta_i32", "timedelta_i64") and not isinstance(value, timedelta):
        return timedelta(milliseconds=value)
    if kafka_type == "datetime_i64" and isinstance(value, int):
        return None if value < 0 else datetime.fromtimestamp(value / 1000, timezone.utc)
    return value


def build(cls: type, values: Mapping) -> Any:
    """Build a kio entity from a dict, ignoring keys the version does not have."""
    kwargs = {}
    for name, nested, is_array, kafka_type, default in _plan(cls):
        if name not in values:
            kwargs[name] = default
            continue
        value = values[name]
        if nested is not None and value is not None:
            if is_array:
                value = tuple(v if isinstance(v, nested) else build(nested, v) for v in value)
            elif not isinstance(value, nested):
                value = build(nested, value)
        elif is_array and value is not None:
            value = tuple(_convert(kafka_type, v) for v in value)
        else:
            value = _convert(kafka_type, value)
        kwargs[name] = value
    return cls(**kwargs)
