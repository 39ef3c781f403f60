import gzip
import struct
from datetime import datetime, timezone

import pytest
from crc32c import crc32c
from kio.records.readers import read_batch
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_new_batch

from logbus.protocol.records import (
    CORRUPT_MESSAGE,
    HEADER_SIZE,
    INVALID_RECORD,
    MESSAGE_TOO_LARGE,
    UNSUPPORTED_FOR_MESSAGE_FORMAT,
    InvalidRecordError,
    assign_offsets,
    encode_batch,
    parse_batches,
    read_header,
    scan_valid_prefix,
)


def kio_batch(n: int, ts_ms: int = 1_700_000_000_000) -> bytes:
    import io

    ts = datetime.fromtimestamp(ts_ms / 1000, tz=timezone.utc)
    records = tuple(
        Record(attributes=0, timestamp=ts, offset=i, key=None, value=b"v%d" % i, headers=())
        for i in range(n)
    )
    buf = io.BytesIO()
    write_new_batch(
        buf,
        NewRecordBatch(
            producer_id=-1, producer_epoch=-1, base_sequence=-1, records=records, attributes=0
        ),
    )
    return buf.getvalue()


def fix_crc(batch: bytearray) -> None:
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))


def test_header_is_61_bytes():
    assert HEADER_SIZE == 61


def test_parse_kio_batch():
    data = kio_batch(3)
    [h] = parse_batches(data)
    assert h.position == 0 and h.size == len(data)
    assert h.record_count == 3 and h.last_offset_delta == 2
    assert h.compression == 0 and h.timestamp_type == 0
    assert not h.is_transactional and not h.is_control
    assert h.max_timestamp == 1_700_000_000_000


def test_encode_batch_round_trips_through_kio():
    data = encode_batch([b"a", None, b"ccc"], keys=[b"k", None, None], timestamps=[5, 9, 7])
    batch, size = read_batch(memoryview(data), 0)
    assert size == len(data)
    assert [r.value for r in batch.records] == [b"a", None, b"ccc"]
    assert batch.max_timestamp == 9


def test_parse_several_batches_positions():
    a, b, c = encode_batch([b"x"]), encode_batch([b"y"] * 4), encode_batch([b"z"] * 2)
    hs = parse_batches(a + b + c)
    assert [h.position for h in hs] == [0, len(a), len(a) + len(b)]
    assert [h.record_count for h in hs] == [1, 4, 2]


def test_flags():
    data = bytearray(encode_batch([b"x"], attributes=0x3 | 0x10 | 0x20))
    [h] = parse_batches(data)
    assert h.compression == 3 and h.is_transactional and h.is_control


@pytest.mark.parametrize("payload", [b"", b"\x00" * 5, b"\x00" * 11])
def test_empty_or_tiny_is_corrupt(payload):
    with pytest.raises(InvalidRecordError) as e:
        parse_batches(payload)
    assert e.value.error_code == CORRUPT_MESSAGE


def test_truncated_batch_is_corrupt():
    data = encode_batch([b"hello"] * 3)
    for cut in (13, 30, HEADER_SIZE, len(data) - 1):
        with pytest.raises(InvalidRecordError) as e:
            parse_batches(data[:cut])
        assert e.value.error_code == CORRUPT_MESSAGE, cut


def test_trailing_garbage_is_corrupt():
    data = encode_batch([b"hello"])
    with pytest.raises(InvalidRecordError) as e:
        parse_batches(data + b"\x01\x02\x03")
    assert e.value.error_code == CORRUPT_MESSAGE


def test_bad_crc():
    data = bytearray(encode_batch([b"hello"] * 3))
    data[-1] ^= 0xFF
    with pytest.raises(InvalidRecordError) as e:
        parse_batches(data)
    assert e.value.error_code == CORRUPT_MESSAGE
    assert len(parse_batches(data, verify_crc=False)) == 1


def test_bad_length():
    data = bytearray(encode_batch([b"hello"]))
    struct.pack_into(">i", data, 8, 10)
    with pytest.raises(InvalidRecordError) as e:
        parse_batches(data)
    assert e.value.error_code == CORRUPT_MESSAGE


@pytest.mark.parametrize("magic", [0, 1, 3])
def test_other_magic_unsupported(magic):
    data = bytearray(encode_batch([b"hello"]))
    data[16] = magic
    with pytest.raises(InvalidRecordError) as e:
        parse_batches(data)
    assert e.value.error_code == UNSUPPORTED_FOR_MESSAGE_FORMAT


def test_legacy_message_set_unsupported():
    # v1 message: offset, size, crc, magic=1, attributes, timestamp, key, value
    body = struct.pack(">bbqii", 1, 0, 0, -1, 1) + b"x"
    msg = struct.pack(">qiI", 0, len(body) + 4, 0) + body
    with pytest.raises(InvalidRecordError) as e:
        parse_batches(msg)
    assert e.value.error_code == UNSUPPORTED_FOR_MESSAGE_FORMAT


@pytest.mark.parametrize("count,delta", [(0, -1), (-1, -2), (3, 1), (2, 5)])
def test_inconsistent_counts_invalid(count, delta):
    data = bytearray(encode_batch([b"a", b"b", b"c"]))
    struct.pack_into(">i", data, 57, count)
    struct.pack_into(">i", data, 23, delta)
    fix_crc(data)
    with pytest.raises(InvalidRecordError) as e:
        parse_batches(data)
    assert e.value.error_code == INVALID_RECORD


def test_max_batch_bytes():
    data = encode_batch([b"x" * 100])
    assert parse_batches(data, max_batch_bytes=len(data))
    with pytest.raises(InvalidRecordError) as e:
        parse_batches(data, max_batch_bytes=len(data) - 1)
    assert e.value.error_code == MESSAGE_TOO_LARGE


def test_compressed_batch_is_opaque():
    # A gzip batch: the header says 2 records; the payload is never inspected.
    payload = gzip.compress(b"whatever")
    after_crc = struct.pack(">hiqqqhii", 1, 1, 10, 20, -1, -1, -1, 2) + payload
    data = struct.pack(">qiibI", 0, len(after_crc) + 9, 0, 2, crc32c(after_crc)) + after_crc
    [h] = parse_batches(data)
    assert h.compression == 1 and h.record_count == 2


def test_scan_valid_prefix_stops_at_torn_tail():
    a, b = encode_batch([b"x"] * 3), encode_batch([b"y"] * 2)
    hs, n = scan_valid_prefix(a + b + b[:20])
    assert n == len(a) + len(b) and len(hs) == 2
    hs, n = scan_valid_prefix(b"")
    assert (hs, n) == ([], 0)
    bad = bytearray(a + b)
    bad[len(a) + 40] ^= 1
    hs, n = scan_valid_prefix(bad)
    assert n == len(a) and len(hs) == 1
    hs, n = scan_valid_prefix(bad, verify_crc=False)
    assert n == len(bad)
    hs, n = scan_valid_prefix(b"\xff" * 100)
    assert (hs, n) == ([], 0)


def test_assign_offsets():
    a, b = encode_batch([b"x"] * 3, timestamps=[1, 2, 3]), encode_batch([b"y"] * 2, timestamps=[9, 4])
    data = a + b
    hs = parse_batches(data)
    out, last, max_ts, off_max = assign_offsets(data, hs, 100)
    assert (last, max_ts, off_max) == (104, 9, 103)
    assert data == a + b  # input untouched
    hs2 = parse_batches(out)  # CRC still valid: baseOffset is outside it
    assert [h.base_offset for h in hs2] == [100, 103]
    assert [h.base_offset for h in hs] == [100, 103]
    assert read_header(out, len(a)).base_offset == 103
    assert bytes(out[8:len(a)]) == data[8:len(a)]


def test_assign_offsets_log_append_time():
    data = kio_batch(2, ts_ms=1000) + kio_batch(1, ts_ms=5000)
    hs = parse_batches(data)
    out, last, max_ts, off_max = assign_offsets(data, hs, 7, log_append_time_ms=4242)
    assert (last, max_ts, off_max) == (9, 4242, 7)
    hs2 = parse_batches(out)  # CRC recomputed
    assert all(h.timestamp_type == 1 and h.max_timestamp == 4242 for h in hs2)
    assert [h.base_timestamp for h in hs2] == [1000, 5000]
    assert hs2 == hs
    batch, _ = read_batch(memoryview(bytes(out)), 0)
    assert batch.records[1].offset == 8


def test_read_header_matches_parse():
    data = encode_batch([b"a", b"b"], base_offset=42, timestamps=[3, 8], producer_id=9, base_sequence=4)
    assert read_header(data) == parse_batches(data)[0]
