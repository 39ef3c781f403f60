"""Kafka record batch v2 (magic 2): header-only validation and offset assignment.

A batch is opaque bytes on the broker hot path. These functions read and rewrite
only the 61-byte batch header; records are never parsed.

Layout (big endian)::

    offset  size  field
         0     8  baseOffset
         8     4  batchLength            (bytes after this field)
        12     4  partitionLeaderEpoch
        16     1  magic                  (2)
        17     4  crc                    (CRC-32C of bytes 21..end)
        21     2  attributes
        23     4  lastOffsetDelta
        27     8  baseTimestamp
        35     8  maxTimestamp
        43     8  producerId
        51     2  producerEpoch
        53     4  baseSequence
        57     4  recordCount
        61        records
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from crc32c import crc32c

__all__ = [
    "AssignedBatches",
    "BatchHeader",
    "CORRUPT_MESSAGE",
    "HEADER_SIZE",
    "INVALID_RECORD",
    "InvalidRecordError",
    "LOG_OVERHEAD",
    "MESSAGE_TOO_LARGE",
    "UNSUPPORTED_FOR_MESSAGE_FORMAT",
    "assign_offsets",
    "encode_batch",
    "parse_batches",
    "read_header",
    "scan_valid_prefix",
]

# Kafka error codes raised through InvalidRecordError.
CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
INVALID_RECORD = 87

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

COMPRESSION_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")

_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_unpack_header = HEADER.unpack_from
_pack_int64 = _INT64.pack_into
_pack_uint32 = _UINT32.pack_into
_pack_int16 = _INT16.pack_into
_pack_int32 = _INT32.pack_into


class InvalidRecordError(Exception):
    """A produce payload that a Kafka broker would reject; carries the Kafka error code."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


@dataclass(slots=True)
class BatchHeader:
    position: int  # where the batch starts in the buffer it was parsed from
    size: int  # total bytes of the batch (batchLength + 12)
    base_offset: int
    partition_leader_epoch: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return (self.attributes & TIMESTAMP_TYPE_BIT) >> 3

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1


class AssignedBatches(NamedTuple):
    data: bytearray
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int


def _parse_one(
    data: memoryview, pos: int, end: int, verify_crc: bool, max_batch_bytes: int | None
) -> BatchHeader:
    """Validate the batch starting at data[pos] (which must end by `end`) and return its header."""
    remaining = end - pos
    if remaining < LOG_OVERHEAD:
        raise InvalidRecordError(
            CORRUPT_MESSAGE, f"{remaining} trailing bytes at position {pos} are not a whole batch"
        )
    if remaining > MAGIC_OFFSET:
        magic = data[pos + MAGIC_OFFSET]
        if magic != 2:
            raise InvalidRecordError(
                UNSUPPORTED_FOR_MESSAGE_FORMAT,
                f"batch at position {pos} has magic {magic}; only record format v2 is supported",
            )
    if remaining < HEADER_SIZE:
        raise InvalidRecordError(
            CORRUPT_MESSAGE, f"{remaining} trailing bytes at position {pos} are not a whole batch"
        )
    (
        base_offset,
        batch_length,
        leader_epoch,
        _magic,
        crc,
        attributes,
        last_offset_delta,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    ) = _unpack_header(data, pos)
    size = batch_length + LOG_OVERHEAD
    if size < HEADER_SIZE:
        raise InvalidRecordError(
            CORRUPT_MESSAGE, f"batch at position {pos} has invalid length {batch_length}"
        )
    if max_batch_bytes is not None and size > max_batch_bytes:
        raise InvalidRecordError(
            MESSAGE_TOO_LARGE,
            f"batch at position {pos} is {size} bytes, larger than the maximum {max_batch_bytes}",
        )
    if size > remaining:
        raise InvalidRecordError(
            CORRUPT_MESSAGE,
            f"batch at position {pos} claims {size} bytes but only {remaining} remain",
        )
    if verify_crc and crc32c(data[pos + ATTRIBUTES_OFFSET : pos + size]) != crc:
        raise InvalidRecordError(CORRUPT_MESSAGE, f"batch at position {pos} fails its CRC-32C")
    if record_count <= 0 or last_offset_delta != record_count - 1:
        raise InvalidRecordError(
            INVALID_RECORD,
            f"batch at position {pos} has recordCount {record_count} "
            f"and lastOffsetDelta {last_offset_delta}",
        )
    return BatchHeader(
        pos,
        size,
        base_offset,
        leader_epoch,
        attributes,
        last_offset_delta,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    )


def parse_batches(
    data: bytes | bytearray | memoryview,
    *,
    verify_crc: bool = True,
    max_batch_bytes: int | None = None,
) -> list[BatchHeader]:
    """Validate a produce payload: every byte must belong to a whole, valid v2 batch.

    Raises InvalidRecordError (with the Kafka error code) on the first problem.
    """
    mv = data if isinstance(data, memoryview) else memoryview(data)
    end = len(mv)
    if end == 0:
        raise InvalidRecordError(CORRUPT_MESSAGE, "no record batches in the payload")
    out: list[BatchHeader] = []
    append = out.append
    unpack = _unpack_header
    limit = end - HEADER_SIZE
    max_size = max_batch_bytes if max_batch_bytes is not None else end
    pos = 0
    while pos < end:
        # Fast path for a good batch; any doubt falls through to _parse_one, which
        # re-checks in order and raises the precise error.
        if pos <= limit:
            (base, length, epoch, magic, crc, attrs, delta, base_ts, max_ts,
             pid, pepoch, bseq, count) = unpack(mv, pos)  # fmt: skip
            size = length + LOG_OVERHEAD
            if (
                magic == 2
                and HEADER_SIZE <= size <= max_size
                and pos + size <= end
                and count > 0
                and delta == count - 1
                and (not verify_crc or crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + size]) == crc)
            ):
                append(BatchHeader(pos, size, base, epoch, attrs, delta, base_ts, max_ts,
                                   pid, pepoch, bseq, count))  # fmt: skip
                pos += size
                continue
        _parse_one(mv, pos, end, verify_crc, max_batch_bytes)
        raise AssertionError("unreachable: _parse_one accepted a batch the fast path rejected")
    return out


def scan_valid_prefix(
    data: bytes | bytearray | memoryview, *, verify_crc: bool = True
) -> tuple[list[BatchHeader], int]:
    """Return the whole valid batches at the start of `data` and the byte length they cover.

    Stops at the first torn, corrupt or invalid batch; never raises on bad data.
    """
    mv = data if isinstance(data, memoryview) else memoryview(data)
    end = len(mv)
    out: list[BatchHeader] = []
    pos = 0
    while pos < end:
        try:
            h = _parse_one(mv, pos, end, verify_crc, None)
        except InvalidRecordError:
            break
        out.append(h)
        pos += h.size
    return out, pos


def read_header(data: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Decode a batch header without validating it (for data already known to be good)."""
    f = _unpack_header(data, pos)
    return BatchHeader(pos, f[1] + LOG_OVERHEAD, f[0], f[2], f[5], f[6], f[7], f[8], f[9], f[10], f[11], f[12])


def assign_offsets(
    data: bytes | bytearray | memoryview,
    batches: list[BatchHeader],
    base_offset: int,
    *,
    log_append_time_ms: int | None = None,
    partition_leader_epoch: int | None = None,
) -> AssignedBatches:
    """Copy `data` with consecutive offsets assigned from `base_offset`.

    `batches` must be the headers parse_batches returned for `data`; they are updated in
    place to describe the returned bytes (base_offset, and for LogAppendTime the
    attributes and max_timestamp).

    With log_append_time_ms, each batch gets the LogAppendTime timestamp type and its
    maxTimestamp set to that time (the CRC is recomputed), as Kafka's in-place validation
    does; consumers then report maxTimestamp for every record of the batch.

    With partition_leader_epoch, each batch is stamped with the leader's epoch (outside the
    CRC), which followers and OffsetForLeaderEpoch rely on.

    Returns (data, last_offset, max_timestamp, offset_of_max_timestamp); the offset of the
    max timestamp is the base offset of the first batch holding it.
    """
    out = bytearray(data)
    if partition_leader_epoch is not None:
        for b in batches:
            _pack_int32(out, b.position + PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)
            b.partition_leader_epoch = partition_leader_epoch
    offset = base_offset
    max_ts = -1
    offset_of_max = -1
    if log_append_time_ms is None:
        for b in batches:
            pos = b.position
            _pack_int64(out, pos, offset)
            b.base_offset = offset
            if b.max_timestamp > max_ts:
                max_ts = b.max_timestamp
                offset_of_max = offset
            offset += b.last_offset_delta + 1
    else:
        mv = memoryview(out)
        ts = log_append_time_ms
        for b in batches:
            pos = b.position
            _pack_int64(out, pos, offset)
            b.base_offset = offset
            attributes = b.attributes | TIMESTAMP_TYPE_BIT
            b.attributes = attributes
            b.max_timestamp = ts
            _pack_int16(out, pos + ATTRIBUTES_OFFSET, attributes)
            _pack_int64(out, pos + MAX_TIMESTAMP_OFFSET, ts)
            _pack_uint32(out, pos + CRC_OFFSET, crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + b.size]))
            offset += b.last_offset_delta + 1
        if batches:
            max_ts = ts
            offset_of_max = base_offset
        mv.release()
    return AssignedBatches(out, offset - 1, max_ts, offset_of_max)


def _varint(value: int, out: bytearray) -> None:
    v = (value << 1) ^ (value >> 63)  # zigzag
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def encode_batch(
    values: list[bytes | None],
    *,
    base_offset: int = 0,
    timestamps: list[int] | None = None,
    keys: list[bytes | None] | None = None,
    attributes: int = 0,
    partition_leader_epoch: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """Build one uncompressed v2 batch (no record headers). For tests and tools, not the hot path."""
    if not values:
        raise ValueError("a batch needs at least one record")
    if timestamps is None:
        timestamps = [0] * len(values)
    base_ts = timestamps[0]
    body = bytearray()
    for i, value in enumerate(values):
        rec = bytearray(b"\x00")  # record attributes
        _varint(timestamps[i] - base_ts, rec)
        _varint(i, rec)
        key = keys[i] if keys else None
        for field in (key, value):
            if field is None:
                _varint(-1, rec)
            else:
                _varint(len(field), rec)
                rec += field
        _varint(0, rec)  # no headers
        _varint(len(rec), body)
        body += rec
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            attributes,
            len(values) - 1,
            base_ts,
            max(timestamps),
            producer_id,
            producer_epoch,
            base_sequence,
            len(values),
        )
        + body
    )
    head = struct.pack(
        ">qiibI", base_offset, len(after_crc) + 9, partition_leader_epoch, 2, crc32c(after_crc)
    )
    return head + after_crc
