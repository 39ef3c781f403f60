"""A bare Kafka wire connection for tests that send what no client library would."""

from __future__ import annotations

import socket
import struct

from logbus.protocol.codec import decode_response, encode_request
from logbus.protocol.records import encode_batch


def make_batch(values: list[bytes], key: bytes | None = None, timestamp_ms: int = 1_700_000_000_000) -> bytes:
    return encode_batch(values, keys=[key] * len(values), timestamps=[timestamp_ms] * len(values))


class WireConnection:
    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes | None:
        """One response frame, or None if the broker closed the connection."""
        head = self._recv_exact(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._recv_exact(size)

    def _recv_exact(self, n: int) -> bytes | None:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def request(self, api_key: int, version: int, body: dict):
        self.correlation_id += 1
        self.send_raw(encode_request(api_key, version, self.correlation_id, body))
        frame = self.recv_frame()
        assert frame is not None, "broker closed the connection"
        (cid,) = struct.unpack_from(">i", frame)
        assert cid == self.correlation_id
        return decode_response(frame, api_key, version)

    def closed_by_peer(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def produce(self, topic: str, partition: int, records: bytes, acks: int = 1, version: int = 9):
        resp = self.request(0, version, {"acks": acks, "timeout": 5000, "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]})
        return resp.responses[0].partition_responses[0]

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20, max_wait_ms: int = 0, min_bytes: int = 1, version: int = 12):
        resp = self.request(1, version, {
            "replica_id": -1, "max_wait": max_wait_ms, "min_bytes": min_bytes, "max_bytes": max_bytes, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{"partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                                                         "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": "",
        })
        return resp.responses[0].partitions[0]

    def create_topic(self, name: str, partitions: int = 1, configs: dict[str, str] | None = None):
        resp = self.request(19, 7, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                                                 "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}], "timeout": 10000, "validate_only": False})
        return resp.topics[0]
