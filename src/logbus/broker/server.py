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

MAX_IN_FLIGHT = 16  # requests of one connection handled at once (answers still go in order)
RESPONSE_DRAIN_S = 60.0  # longest wait for answers owed when a connection ends


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
        """Read requests as they come and answer them strictly in order.

        Up to MAX_IN_FLIGHT requests of a connection are handled at once, so a produce waiting
        for its acks=all replication does not hold back the next one (librdkafka pipelines up
        to five). Handlers do their appends before their first await and tasks start in
        creation order, so records still reach each log in request order.
        """
        peer = writer.get_extra_info("peername")
        self._connections.add(writer)
        max_bytes = self.broker.config.socket_request_max_bytes
        in_flight: asyncio.Queue = asyncio.Queue()
        slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        responder = asyncio.create_task(self._respond_in_order(in_flight, slots, writer))
        try:
            try:
                while not responder.done():
                    frame = await read_frame(reader, max_bytes)
                    if frame is None:
                        break
                    await slots.acquire()
                    in_flight.put_nowait(asyncio.create_task(self._handle(frame, peer)))
            except FrameError as e:
                log.warning("closing connection from %s: %s", peer, e)
            # answer what was read before the end (or the bad frame), then close
            in_flight.put_nowait(None)
            await asyncio.wait_for(responder, RESPONSE_DRAIN_S)
        except (ConnectionError, asyncio.CancelledError, asyncio.TimeoutError):
            pass
        except Exception:
            log.exception("closing connection from %s after an internal error", peer)
        finally:
            responder.cancel()
            while not in_flight.empty():
                task = in_flight.get_nowait()
                if task is not None:
                    task.cancel()
            self._connections.discard(writer)
            writer.close()

    async def _respond_in_order(self, in_flight: asyncio.Queue, slots: asyncio.Semaphore, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        try:
            while (task := await in_flight.get()) is not None:
                response = await task
                slots.release()
                if response is not None:
                    writer.write(response)
                    await writer.drain()
        except (MalformedRequest, UnsupportedRequest) as e:
            log.warning("closing connection from %s: %s", peer, e)
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("closing connection from %s after an internal error", peer)
        writer.close()  # ends the reading side too: a connection that failed a request is closed
        for _ in range(MAX_IN_FLIGHT):
            slots.release()  # a reader waiting for a slot sees the end instead

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
