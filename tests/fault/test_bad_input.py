"""Bad input gets the Kafka error or closes only that connection; the broker keeps serving everyone."""

import struct

import pytest

from kafkawire import WireConnection, make_batch
from logbus.protocol.codec import decode_response, encode_request
from logbus.protocol.errors import ErrorCode


def still_serving(bootstrap: str) -> None:
    conn = WireConnection(bootstrap)
    resp = conn.request(3, 12, {"topics": None, "allow_auto_topic_creation": False})
    assert resp.brokers and resp.brokers[0].port == int(bootstrap.rsplit(":", 1)[1])
    conn.close()


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(struct.pack(">i", 12) + b"\xde\xad\xbe\xef" * 3, id="garbage"),
        pytest.param(struct.pack(">i", -5), id="negative-length"),
        pytest.param(struct.pack(">i", 2**31 - 1) + b"x" * 100, id="huge-length"),
        pytest.param(struct.pack(">i", 3) + b"\x00\x03\x00", id="shorter-than-header"),
        pytest.param(struct.pack(">ihhi", 8, 9999, 0, 1), id="unknown-api-key"),
        pytest.param(struct.pack(">ihhi", 8, 0, 99, 1), id="unsupported-produce-version"),
        pytest.param(encode_request(3, 12, 1, {"topics": None})[:-3], id="truncated-inside-frame"),
    ],
)
def test_bad_frame_closes_only_that_connection(broker, frame):
    healthy = WireConnection(broker.bootstrap)
    bad = WireConnection(broker.bootstrap)
    bad.send_raw(frame)
    if frame.startswith(struct.pack(">i", len(frame) - 4 + 3)):
        bad.sock.shutdown(1)  # truncated: the rest never comes
    assert bad.closed_by_peer()
    bad.close()
    resp = healthy.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
    assert resp.error_code == ErrorCode.none
    healthy.close()
    still_serving(broker.bootstrap)
    assert broker.alive()


def test_connection_closed_mid_frame(broker):
    conn = WireConnection(broker.bootstrap)
    full = encode_request(3, 12, 1, {"topics": None})
    conn.send_raw(full[: len(full) // 2])
    conn.close()
    still_serving(broker.bootstrap)


def test_too_new_api_versions_gets_unsupported_version_and_the_list(broker):
    conn = WireConnection(broker.bootstrap)
    conn.send_raw(struct.pack(">ihhih", 10, 18, 77, 42, -1))
    frame = conn.recv_frame()
    assert struct.unpack_from(">i", frame)[0] == 42
    resp = decode_response(frame, 18, 0)
    assert resp.error_code == ErrorCode.unsupported_version
    keys = {a.api_key: (a.min_version, a.max_version) for a in resp.api_keys}
    assert keys[18] == (0, 3) and keys[0][0] == 3
    conn.close()


def test_record_errors_get_kafka_codes(broker):
    conn = WireConnection(broker.bootstrap)
    assert conn.create_topic("bad", 1, {"max.message.bytes": "2000"}).error_code == ErrorCode.none

    good = make_batch([b"a", b"b"])
    ok = conn.produce("bad", 0, good)
    assert ok.error_code == ErrorCode.none and ok.base_offset == 0

    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    assert conn.produce("bad", 0, bytes(corrupt)).error_code == ErrorCode.corrupt_message

    torn = good[:-4]
    assert conn.produce("bad", 0, torn).error_code == ErrorCode.corrupt_message

    big = make_batch([b"z" * 5000])
    assert conn.produce("bad", 0, big).error_code == ErrorCode.message_too_large

    assert conn.produce("nope", 0, good).error_code == ErrorCode.unknown_topic_or_partition
    assert conn.produce("bad", 7, good).error_code == ErrorCode.unknown_topic_or_partition

    again = conn.produce("bad", 0, good)
    assert again.error_code == ErrorCode.none and again.base_offset == 2, "rejected batches must not take offsets"
    fetched = conn.fetch("bad", 0, 0)
    assert fetched.high_watermark == 4
    conn.close()
    assert "rejected produce" in broker.log()


def test_bad_topic_requests(broker):
    conn = WireConnection(broker.bootstrap)
    assert conn.create_topic("bad name!").error_code == ErrorCode.invalid_topic_exception
    assert conn.create_topic("ok", 0).error_code == ErrorCode.invalid_partitions
    r = conn.create_topic("cfg", 1, {"retention.ms": "soon"})
    assert r.error_code == ErrorCode.invalid_config and "retention.ms" in r.error_message
    assert conn.create_topic("cfg", 1, {"no.such.config": "1"}).error_code == ErrorCode.invalid_config
    assert conn.create_topic("dup", 1).error_code == ErrorCode.none
    assert conn.create_topic("dup", 1).error_code == ErrorCode.topic_already_exists
    meta = conn.request(3, 12, {"topics": [{"name": "missing"}], "allow_auto_topic_creation": True})
    assert meta.topics[0].error_code == ErrorCode.unknown_topic_or_partition  # auto creation is off by default
    fetched = conn.fetch("missing", 0, 0)
    assert fetched.error_code == ErrorCode.unknown_topic_or_partition
    conn.close()


def test_internal_topic_is_protected(broker):
    conn = WireConnection(broker.bootstrap)
    found = conn.request(10, 4, {"key_type": 0, "coordinator_keys": ["g"]})  # creates __consumer_offsets
    assert found.coordinators[0].error_code == ErrorCode.none
    produced = conn.produce("__consumer_offsets", 0, make_batch([b"forged"]))
    assert produced.error_code == ErrorCode.invalid_topic_exception
    deleted = conn.request(20, 6, {"topics": [{"name": "__consumer_offsets", "topic_id": None}], "timeout": 5000})
    assert deleted.responses[0].error_code == ErrorCode.invalid_topic_exception
    grown = conn.request(37, 3, {"topics": [{"name": "__consumer_offsets", "count": 60, "assignments": None}], "timeout": 5000, "validate_only": False})
    assert grown.results[0].error_code == ErrorCode.invalid_partitions
    meta = conn.request(3, 12, {"topics": [{"name": "__consumer_offsets"}]})
    assert meta.topics[0].is_internal and len(meta.topics[0].partitions) == 50
    conn.close()
