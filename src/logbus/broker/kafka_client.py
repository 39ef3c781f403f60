"""A minimal Kafka protocol connection for broker-to-broker requests (replica fetching)."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from logbus.protocol.codec import decode_response, encode_request
from logbus.protocol.framing import read_frame

MAX_RESPONSE_BYTES = 1 << 30


class KafkaConnection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str) -> None:
        self.reader = reader
        self.writer = writer
        self.client_id = client_id
        self.correlation_id = 0

    @classmethod
    async def open(cls, host: str, port: int, client_id: str, timeout: float = 5.0) -> "KafkaConnection":
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, limit=1 << 20), timeout)
        return cls(reader, writer, client_id)

    async def request(self, api_key: int, version: int, body: dict, timeout: float) -> Any:
        self.correlation_id += 1
        self.writer.write(encode_request(api_key, version, self.correlation_id, body, client_id=self.client_id))
        await self.writer.drain()
        frame = await asyncio.wait_for(read_frame(self.reader, MAX_RESPONSE_BYTES), timeout)
        if frame is None:
            raise ConnectionError("the broker closed the connection")
        (correlation_id,) = struct.unpack_from(">i", frame)
        if correlation_id != self.correlation_id:
            raise ConnectionError(f"response for request {correlation_id}, expected {self.correlation_id}")
        return decode_response(frame, api_key, version)

    def close(self) -> None:
        self.writer.close()
