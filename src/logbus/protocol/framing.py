"""Kafka framing: every request and response is an int32 size followed by that many bytes."""

import asyncio
import struct

SIZE = struct.Struct(">i")


class FrameError(Exception):
    """A frame that cannot be read: the connection must be closed."""


async def read_frame(reader: asyncio.StreamReader, max_bytes: int) -> bytes | None:
    """Read one frame; None at a clean end of stream between frames."""
    try:
        head = await reader.readexactly(4)
    except asyncio.IncompleteReadError as e:
        if not e.partial:
            return None
        raise FrameError(f"connection closed inside a frame size ({len(e.partial)} of 4 bytes)") from None
    (size,) = SIZE.unpack(head)
    if size < 0:
        raise FrameError(f"negative frame size {size}")
    if size > max_bytes:
        raise FrameError(f"frame of {size} bytes is larger than socket.request.max.bytes ({max_bytes})")
    try:
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError as e:
        raise FrameError(f"connection closed after {len(e.partial)} of {size} frame bytes") from None


def frame(payload: bytes | bytearray) -> bytes:
    return SIZE.pack(len(payload)) + payload
