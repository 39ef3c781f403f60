"""The kio-based codec: one handler dict serves every version; headers follow Kafka's rules."""

import struct

import pytest

from logbus.protocol.codec import MalformedRequest, build, decode_request, decode_response, encode_request, encode_response, peek_header, response_class
from logbus.protocol.errors import ErrorCode

METADATA = {
    "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": "r1"}],
    "cluster_id": "c",
    "controller_id": 1,
    "topics": [{"error_code": 0, "name": "t", "partitions": [{"partition_index": 0, "leader_id": 1, "leader_epoch": 3, "replica_nodes": [1], "isr_nodes": [1]}]}],
}


@pytest.mark.parametrize("version", range(0, 13))
def test_metadata_response_every_version(version):
    frame = encode_response(3, version, 9, METADATA)
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    resp = decode_response(frame[4:], 3, version)
    part = resp.topics[0].partitions[0]
    assert (part.leader_id, part.replica_nodes, part.isr_nodes) == (1, (1,), (1,))
    if version >= 7:
        assert part.leader_epoch == 3
    if version >= 1:
        assert resp.brokers[0].rack == "r1"


def test_api_versions_response_uses_header_v0_even_when_flexible():
    frame = encode_response(18, 3, 5, {"error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 3}]})
    # size, correlation id, then straight to error_code: no tagged-field byte after the correlation id
    assert frame[4:8] == struct.pack(">i", 5)
    assert frame[8:10] == b"\x00\x00"


def test_flexible_response_has_header_tag_buffer():
    frame = encode_response(3, 12, 5, METADATA)
    assert frame[8] == 0  # empty tagged fields of response header v1


def test_request_round_trip_trailing_bytes_ignored_short_input_rejected():
    req = encode_request(0, 9, 77, {"acks": -1, "timeout": 1500, "topic_data": [{"name": "t", "partition_data": [{"index": 2, "records": b"abc"}]}]})
    assert peek_header(req[4:]) == (0, 9, 77)
    header, body = decode_request(req[4:], 0, 9)
    assert header.correlation_id == 77 and body.acks == -1 and body.topic_data[0].partition_data[0].records == b"abc"
    assert decode_request(req[4:] + b"\x00\x00\x00", 0, 9)[1] == body  # as Apache Kafka does
    with pytest.raises(MalformedRequest):
        decode_request(req[4:-2], 0, 9)
    with pytest.raises(MalformedRequest):
        peek_header(b"\x00\x01")


def test_build_converts_plain_values():
    cls = response_class(0, 9)
    resp = build(cls, {"responses": [{"name": "t", "partition_responses": [{"index": 0, "error_code": 19, "base_offset": 5, "log_append_time": -1}]}], "throttle_time": 0})
    p = resp.responses[0].partition_responses[0]
    assert p.error_code == ErrorCode.not_enough_replicas and p.log_append_time is None and p.log_start_offset == -1  # the schema default
