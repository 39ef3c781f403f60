"""Kafka connections: read frames, dispatch to the API handlers, write responses in order.

Requests on one connection are handled one at a time and answered in order, as Kafka does.
A frame that cannot be parsed closes that connection only; everyone else keeps being served.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from logbus.broker.handlers import HANDLERS, RequestContext
from logbus.broker.handlers.api_versions import unsupported_version_response
from logbus.protocol.codec import API_VERSIONS_KEY, MalformedRequest, decode_request, encode_response, peek_header
from logbus.protocol.framing import FrameError, read_frame

if TYPE_CHECKING:
    from logbus.broker.broker import Broker

log = logging.getLogger(__name__)


class KafkaServer:
    def __init__(self, broker: "Broker") -> None:
        self.broker = broker
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        cfg = self.broker.config
        self._server = await asyncio.start_server(self._serve, cfg.listen_host, cfg.listen_port, limit=1 << 20)
        log.info("broker %d listening on %s", cfg.broker_id, cfg.listen)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._connections):
            writer.close()
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        self._connections.add(writer)
        max_bytes = self.broker.config.socket_request_max_bytes
        try:
            while True:
                frame = await read_frame(reader, max_bytes)
                if frame is None:
                    return
                response = await self._handle(frame, peer)
                if response is not None:
                    writer.write(response)
                    await writer.drain()
        except (FrameError, MalformedRequest, UnsupportedRequest) as e:
            log.warning("closing connection from %s: %s", peer, e)
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("closing connection from %s after an internal error", peer)
        finally:
            self._connections.discard(writer)
            writer.close()

    async def _handle(self, frame: bytes, peer: object) -> bytes | None:
        api_key, version, correlation_id = peek_header(frame)
        entry = HANDLERS.get(api_key)
        if entry is None:
            raise UnsupportedRequest(f"unknown API key {api_key} (correlation id {correlation_id})")
        if not entry.min_version <= version <= entry.max_version:
            if api_key == API_VERSIONS_KEY:
                # Kafka answers a too-new ApiVersions with v0 and UNSUPPORTED_VERSION so the client can downgrade.
                return encode_response(API_VERSIONS_KEY, 0, correlation_id, unsupported_version_response())
            raise UnsupportedRequest(
                f"{entry.name} v{version} is not supported (supported: v{entry.min_version}-v{entry.max_version})"
            )
        header, request = decode_request(frame, api_key, version)
        ctx = RequestContext(self.broker, header, version, peer)
        body = await entry.handle(ctx, request)
        if body is None:  # acks=0 produce: Kafka sends no response
            return None
        return encode_response(api_key, version, correlation_id, body)


class UnsupportedRequest(Exception):
    """An API key or version this broker does not serve; Kafka closes the connection."""
