"""The gateway process: the HTTP API on aiohttp, and its background work.

Background tasks: the heartbeat in the store (and the lease it gives this process to accept writes), the
partition health check that starts failovers, the seqno indexer, expiry of idle sessions, push subscriptions.
Shutdown (SIGTERM / SIGINT): writes are refused, writes in flight finish (bounded by the delivery timeout), the
producer is flushed, then the listener closes.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import concurrent.futures
import functools
import gc
import hashlib
import hmac
import json
import logging
import re
import secrets
import signal
import socket
import ssl
import struct
import time
from typing import Any

import aiohttp
import orjson
from aiohttp import WSMsgType, web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from logbus.gateway.batch import BatchTransactions
from logbus.gateway.config import GatewayConfig
from logbus.gateway.errors import GatewayError, bad_request, invalid
from logbus.gateway.kafka import (ClusterHealth, GatewayProducer, PartitionScanner, ProduceError, create_topic,
                                  make_sourceless_writer)
from logbus.gateway.metrics import GatewayMetrics
from logbus.gateway.openapi import openapi_document
from logbus.gateway.peers import Peers
from logbus.gateway.reader import PartitionReader, PushDelivery, ReadSessions, record_json
from logbus.gateway.sessions import Chunk, OwnWrites, SessionManager
from logbus.gateway.store import GatewayRecord, PushRecord, TopicRecord, open_store

log = logging.getLogger("logbus.gateway")

NAME = re.compile(r"^[A-Za-z0-9_-]{1,100}$")
PLACEMENT_CONFIG = "confluent.placement.constraints"


class Principal:
    __slots__ = ("tenant", "admin")

    def __init__(self, tenant: str | None, admin: bool) -> None:
        self.tenant = tenant
        self.admin = admin

    def may(self, tenant: str) -> None:
        if not self.admin and self.tenant != tenant:
            raise GatewayError(403, "forbidden", f"this token may not act for tenant {tenant!r}")

    @property
    def scope(self) -> str | None:
        """The tenant a session must belong to (None: any, for the administrator)."""
        return None if self.admin else self.tenant


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Gateway:
    def __init__(self, config: GatewayConfig, worker: int | None = None) -> None:
        self.config = config
        self.worker = worker        # the index of this worker process (logbus.gateway.workers), None when alone
        self.url = config.url       # where the other gateways reach this one
        self.gateway_id = config.id
        self.incarnation = secrets.token_hex(8)
        self.metrics = GatewayMetrics()
        self.closing = False
        self.lease_ok_until = 0.0
        self._store_pool = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="gateway-store")
        self._pool = concurrent.futures.ThreadPoolExecutor(16, thread_name_prefix="gateway-io")
        self._token_cache: dict[str, str] = {}
        self._topic_cache: dict[tuple[str, str, str], TopicRecord] = {}
        self._tasks: list[asyncio.Task] = []
        self._index_locks: dict[tuple[str, int], asyncio.Lock] = {}
        self.ssl_context: ssl.SSLContext | None = None
        self.client_ssl: ssl.SSLContext | bool | None = None

    # -- start and stop ---------------------------------------------------------------------------------------
    async def start(self) -> web.AppRunner:
        cfg = self.config
        self._lock_file = cfg.lock_data_dir()
        self.loop = asyncio.get_running_loop()
        self.store = open_store(cfg.store_url)
        self.producer = GatewayProducer(cfg.bootstrap_servers, cfg.delivery_timeout_ms, cfg.linger_ms, cfg.compression, cfg.producer_config)
        self.producer.start(self.loop)
        self.health = ClusterHealth(cfg.bootstrap_servers)
        self.scanner = PartitionScanner(cfg.bootstrap_servers)
        self.sourceless = make_sourceless_writer(self.producer, self.health, cfg.bootstrap_servers, cfg.delivery_timeout_ms, cfg.linger_ms)
        self.sessions = SessionManager(self)
        self.batch = BatchTransactions(self)
        self.reader = PartitionReader(self)
        self.reads = ReadSessions(self)
        self.pushes = PushDelivery(self)
        self.peers = Peers(self)
        self.admin_client = self.health.admin
        if cfg.tls:
            self.ssl_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self.ssl_context.load_cert_chain(cfg.tls_cert, cfg.tls_key)
            # gateway-to-gateway calls: the peers' certificates are the deployment's own
            self.client_ssl = ssl.create_default_context(cafile=cfg.tls_cert)
        self.http = aiohttp.ClientSession()
        runner = web.AppRunner(self.make_app(), access_log=None, handle_signals=False)
        await runner.setup()
        self.runner = runner
        if self.worker is not None:
            # Workers share the listen address; each also has a port of its own where the others reach it.
            own = socket.create_server((cfg.listen_host, 0), reuse_port=False)
            await web.SockSite(runner, own, ssl_context=self.ssl_context).start()
            host = cfg.listen_host if cfg.listen_host not in ("", "0.0.0.0", "::") else socket.gethostname()
            self.url = f"{'https' if cfg.tls else 'http'}://{host}:{own.getsockname()[1]}"
        now_ms = int(time.time() * 1000)
        t0 = time.monotonic()
        await self.run_store(self.store.register_gateway, GatewayRecord(self.gateway_id, self.incarnation, self.url, now_ms))
        self.lease_ok_until = t0 + cfg.lease_ms / 2000
        await self.peers.refresh()
        site = web.TCPSite(runner, cfg.listen_host, cfg.listen_port, ssl_context=self.ssl_context, reuse_address=True,
                           reuse_port=self.worker is not None)
        await site.start()
        for coro in (self._heartbeat_loop(), self._health_loop(), self._index_loop(), self._expiry_loop(), self._push_loop()):
            self._tasks.append(asyncio.ensure_future(coro))
        log.info("gateway %s (incarnation %s) listening on %s (own address %s), writing to %s as %s", self.gateway_id,
                 self.incarnation, cfg.url, self.url, cfg.bootstrap_servers, cfg.dc)
        return runner

    async def stop(self) -> None:
        self.closing = True
        await self.sessions.drain(self.config.delivery_timeout_ms / 1000 + 1)
        await self.pushes.stop_all()
        for t in self._tasks:
            t.cancel()
        await self.producer.close(self.config.delivery_timeout_ms / 1000)
        await self.runner.cleanup()
        await self.http.close()
        self.sourceless.close()
        self.scanner.close()
        self.store.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._store_pool.shutdown(wait=False, cancel_futures=True)

    # -- helpers used by the parts ----------------------------------------------------------------------------
    async def run_store(self, fn, *args):
        return await self.loop.run_in_executor(self._store_pool, functools.partial(fn, *args))

    async def run_blocking(self, fn, *args):
        return await self.loop.run_in_executor(self._pool, functools.partial(fn, *args))

    def check_writable(self) -> None:
        if self.closing:
            raise GatewayError(503, "shutting_down", "the gateway is shutting down; reconnect to another one")
        if time.monotonic() > self.lease_ok_until:
            raise GatewayError(503, "store_unavailable", "the gateway cannot reach its state store; writes are refused until it can")

    def health_offline(self, topic: str, partition: int) -> bool:
        th = self.health.health(topic)
        return th is not None and bool(th.partitions) and not th.online(partition)

    def internal_headers(self) -> dict:
        return {"Authorization": f"Bearer {self.config.admin_token}"}

    # -- background -------------------------------------------------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        cfg = self.config
        while True:
            await asyncio.sleep(cfg.lease_ms / 6000)
            t0 = time.monotonic()
            try:
                ok = await self.run_store(self.store.heartbeat, self.gateway_id, self.incarnation, int(time.time() * 1000))
            except Exception as e:  # noqa: BLE001
                log.warning("heartbeat failed: %s", e)
                continue
            if ok and t0 > self.lease_ok_until:
                # The lease lapsed (store unreachable, or this process was paused): another gateway may have taken
                # any source meanwhile without asking us. Forget every session; clients reopen and recover.
                log.warning("the lease lapsed; closing all write sessions")
                self.sessions.drop_all()
            if ok:
                self.lease_ok_until = t0 + cfg.lease_ms / 2000
            else:
                log.error("this gateway's registration was replaced by another process; refusing writes")
                self.lease_ok_until = 0.0
            try:
                await self.peers.refresh()
            except Exception as e:  # noqa: BLE001
                log.warning("reading the other gateways failed: %s", e)

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.metadata_interval_ms / 1000)
            self.update_gauges()
            topics = self.sessions.active_topics()
            if not topics:
                continue
            try:
                await self.run_blocking(self.health.refresh, topics)
            except Exception as e:  # noqa: BLE001
                log.warning("partition health check failed: %s", e)
                continue
            self.sessions.check_partitions()

    def update_gauges(self) -> None:
        m = self.metrics
        m.write_sessions.set(len(self.sessions.sessions))
        m.read_sessions.set(len(self.reads.sessions))
        m.in_flight.set(self.producer.in_flight())

    async def _index_loop(self) -> None:
        watch: dict[tuple[str, int], list[int]] = {}   # see index_partition
        while True:
            await asyncio.sleep(self.config.index_interval_ms / 1000)
            todo, self.sessions.own_writes = self.sessions.own_writes, {}
            for topic, p in sorted(set(todo) | set(watch)):
                try:
                    await self.index_partition(topic, p, todo.get((topic, p)), watch)
                except Exception as e:  # noqa: BLE001
                    log.warning("indexing %s[%d] failed: %s", topic, p, e)
                    self.sessions.own_writes.setdefault((topic, p), OwnWrites())   # the next run reads it back

    def index_lock(self, topic: str, partition: int) -> asyncio.Lock:
        return self._index_locks.setdefault((topic, partition), asyncio.Lock())

    async def index_partition(self, topic: str, p: int, own: OwnWrites | None = None,
                              watch: dict[tuple[str, int], list[int]] | None = None) -> int:
        """Bring the seqno index of a partition up to its high watermark, reading only what is past the position;
        when this gateway's own acknowledged writes fill everything past the position, from those alone.

        When other gateways write the partition too (workers, or gateways behind one load balancer), only its
        rendezvous owner among the live gateways reads it back; with `watch` (the index loop's), any other gateway
        only watches the position: `watch[(topic, p)]` = [highest offset it wrote, position seen, runs without
        progress]. It is done once the position passes its writes, and reads back itself after two runs without
        progress (the owner may not write the partition, or may be gone)."""
        async with self.index_lock(topic, p):
            pos = await self.run_store(self.store.index_position, topic, p) or 0
            end = own.covered_end(pos) if own is not None else None
            if end is not None:
                await self.run_store(self.store.save_index, topic, p, end, own.entries)
                self.metrics.index_records.labels("own_writes").inc(end - pos)
                return end - pos
            if watch is not None and not self.peers.owns(f"index {topic}/{p}"):
                w = watch.setdefault((topic, p), [-1, -1, 0])
                if own is not None and own.offsets:
                    w[0] = max(w[0], own.offsets[-1])
                w[1], w[2] = pos, (0 if pos > w[1] else w[2] + 1)
                if pos > w[0]:
                    del watch[(topic, p)]       # indexed past everything this gateway wrote
                    return 0
                if w[2] < 2:
                    return 0
            if watch is not None:
                watch.pop((topic, p), None)
            low, high = await self.run_blocking(self.scanner.watermarks, topic, p)
            start = max(pos, low)
            if high <= start:
                return 0
            found = await self.run_blocking(self.scanner.scan_sources, topic, p, start, high)
            await self.run_store(self.store.save_index, topic, p, high, found)
            self.metrics.index_records.labels("read_back").inc(high - start)
            return high - start

    async def _expiry_loop(self) -> None:
        while True:
            await asyncio.sleep(30)
            self.sessions.expire(600)
            now = time.monotonic()
            for sid, rs in list(self.reads.sessions.items()):
                if now - rs.used > 600:
                    self.reads.close(sid)

    async def _push_loop(self) -> None:
        while True:
            try:
                # Each subscription runs on one live gateway: its rendezvous owner.
                recs = [r for r in await self.run_store(self.store.pushes) if self.peers.owns(r.push_id)]
                ids = {r.push_id for r in recs}
                for r in recs:
                    self.pushes.start(r)
                for pid in list(self.pushes.tasks):
                    if pid not in ids:
                        self.pushes.stop(pid)
            except Exception as e:  # noqa: BLE001
                log.warning("loading push subscriptions failed: %s", e)
            await asyncio.sleep(5)

    # -- auth and lookups ------------------------------------------------------------------------------------
    async def principal(self, request: web.Request, internal: bool = False) -> Principal:
        auth = request.headers.get("Authorization", "")
        token = auth[7:].strip() if auth.lower().startswith("bearer ") else request.query.get("access_token", "")
        if not token:
            raise GatewayError(401, "unauthorized", "a bearer token is required (Authorization: Bearer <token>)")
        if self.config.admin_token and hmac.compare_digest(token.encode(), self.config.admin_token.encode()):
            return Principal(None, True)
        if internal:
            raise GatewayError(401, "unauthorized", "gateway-to-gateway calls need the administrator token")
        h = token_hash(token)
        tenant = self._token_cache.get(h)
        if tenant is None:
            tenant = await self.run_store(self.store.token_tenant, h)
            if tenant is None:
                raise GatewayError(401, "unauthorized", "unknown token")
            self._token_cache[h] = tenant
        return Principal(tenant, False)

    async def resolve_topic(self, who: Principal, logical: Any) -> TopicRecord:
        if not isinstance(logical, str):
            raise invalid("topic must be a string tenant/namespace/topic")
        parts = logical.strip("/").split("/")
        if len(parts) != 3 or not all(NAME.match(p) for p in parts):
            raise invalid(f"topic must be tenant/namespace/topic (letters, digits, '_' or '-'), not {logical!r}")
        who.may(parts[0])
        key = tuple(parts)
        rec = self._topic_cache.get(key)
        if rec is None:
            rec = await self.run_store(self.store.topic, *parts)
            if rec is None:
                raise GatewayError(404, "unknown_topic", f"topic {logical!r} does not exist")
            self._topic_cache[key] = rec
        return rec

    def physical_for(self, rec: TopicRecord, dc: str | None) -> str:
        if dc is None or dc == self.config.dc:
            return rec.physical
        if not NAME.match(dc):
            raise invalid("dc must be letters, digits, '_' or '-'")
        return f"{dc}.{rec.tenant}.{rec.namespace}.{rec.name}"

    # -- the app ---------------------------------------------------------------------------------------------
    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.max_request_bytes, middlewares=[self._middleware])
        h = Handlers(self)
        r = app.router
        r.add_get("/healthz", h.healthz)
        r.add_get("/metrics", h.metrics)
        r.add_get("/openapi.json", h.openapi)
        r.add_post("/v1/tenants", h.create_tenant)
        r.add_post("/v1/tenants/{tenant}/tokens", h.create_token)
        r.add_post("/v1/tenants/{tenant}/namespaces", h.create_namespace)
        r.add_get("/v1/tenants/{tenant}/namespaces", h.list_namespaces)
        r.add_get("/v1/tenants/{tenant}/topics", h.list_topics)
        r.add_post("/v1/topics", h.create_topic)
        r.add_get("/v1/topics/{tenant}/{namespace}/{topic}", h.describe_topic)
        r.add_get("/v1/topics/{tenant}/{namespace}/{topic}/partitions/{partition}/records", h.pull)
        r.add_post("/v1/sessions", h.open_session)
        r.add_post("/v1/sessions/{session_id}/write", h.write)
        r.add_delete("/v1/sessions/{session_id}", h.close_session)
        r.add_get("/v1/sessions/stream", h.stream)
        r.add_post("/v1/write", h.write_sourceless)
        r.add_post("/v1/store", h.store)
        r.add_post("/v1/commit_request", h.commit_request)
        r.add_post("/v1/commit", h.commit)
        r.add_get("/v1/transactions/{txn_id}", h.describe_txn)
        r.add_delete("/v1/transactions/{txn_id}", h.abort_txn)
        r.add_post("/v1/read-sessions", h.open_read_session)
        r.add_get("/v1/read-sessions/{session_id}/records", h.read_session_records)
        r.add_post("/v1/read-sessions/{session_id}/commit", h.read_session_commit)
        r.add_delete("/v1/read-sessions/{session_id}", h.close_read_session)
        r.add_post("/v1/push", h.create_push)
        r.add_get("/v1/push", h.list_push)
        r.add_delete("/v1/push/{push_id}", h.delete_push)
        r.add_post("/internal/v1/release", h.release)
        return app

    @web.middleware
    async def _middleware(self, request: web.Request, handler):
        route = request.match_info.route.resource.canonical if request.match_info.route.resource else "unmatched"
        try:
            resp = await handler(request)
        except GatewayError as e:
            resp = web.json_response(e.body(), status=e.status)
        except web.HTTPRequestEntityTooLarge as e:
            resp = web.json_response({"error": "too_large", "message": f"request body larger than {self.config.max_request_bytes} bytes: {e.text}"}, status=413)
        except web.HTTPException as e:
            if e.status >= 400:
                resp = web.json_response({"error": e.reason.lower().replace(" ", "_"), "message": e.text or e.reason}, status=e.status)
            else:
                raise
        except ProduceError as e:
            resp = web.json_response({"error": "not_written", "message": str(e)}, status=503)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - bad input never takes the process down
            log.exception("%s %s failed", request.method, request.path)
            resp = web.json_response({"error": "internal", "message": f"{type(e).__name__}: {e}"}, status=500)
        self.metrics.http.labels(route, request.method, str(resp.status)).inc()
        return resp


# Marks a request one gateway forwarded to the gateway holding its session (the value: the forwarder's id).
FORWARDED_BY = "X-Logbus-Forwarded-By"


def dumps_json(obj: Any) -> str:
    """JSON text of an answer on the write path (orjson: several times faster than json for per-chunk results)."""
    return orjson.dumps(obj).decode()


async def read_json(request: web.Request) -> dict:
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise
    try:
        data = orjson.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise bad_request(f"malformed JSON: {e}") from None
    if not isinstance(data, dict):
        raise bad_request("the body must be a JSON object")
    return data


def _str(body: dict, name: str, default: str | None = None, required: bool = True, pattern: re.Pattern | None = None) -> str | None:
    v = body.get(name, default)
    if v is None:
        if required:
            raise invalid(f"{name} is required")
        return None
    if not isinstance(v, str):
        raise invalid(f"{name} must be a string")
    if pattern is not None and not pattern.match(v):
        raise invalid(f"{name} must be 1-100 letters, digits, '_' or '-', not {v!r}")
    return v


def _int(body: dict, name: str, default: int | None = None, lo: int | None = None, hi: int | None = None) -> int | None:
    v = body.get(name, default)
    if v is None:
        if default is None and name in body:
            raise invalid(f"{name} must be an integer")
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise invalid(f"{name} must be an integer")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise invalid(f"{name} must be in [{lo}, {hi}]")
    return v


def _qint(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    text = request.query.get(name)
    if text is None:
        return default
    try:
        v = int(text)
    except ValueError:
        raise invalid(f"query parameter {name} must be an integer") from None
    if v < lo or v > hi:
        raise invalid(f"query parameter {name} must be in [{lo}, {hi}]")
    return v


def _data(obj: dict, max_bytes: int) -> bytes:
    if "data" in obj and obj["data"] is not None:
        if not isinstance(obj["data"], str):
            raise invalid("data must be a string (UTF-8 text); use data_b64 for bytes")
        data = obj["data"].encode()
    elif "data_b64" in obj:
        if not isinstance(obj["data_b64"], str):
            raise invalid("data_b64 must be a base64 string")
        try:
            data = base64.b64decode(obj["data_b64"], validate=True)
        except (binascii.Error, ValueError):
            raise invalid("data_b64 is not valid base64") from None
    else:
        raise invalid("a chunk needs data (text) or data_b64")
    if len(data) > max_bytes:
        raise GatewayError(413, "chunk_too_large", f"chunk of {len(data)} bytes is larger than max_chunk_bytes={max_bytes}")
    return data


_SEQNO_END = 2**63


def parse_chunk(obj: Any, max_bytes: int, now_ms: int | None = None) -> Chunk:
    """One chunk object; `created` defaults to `now_ms` (the time the request arrived)."""
    if type(obj) is dict and len(obj) == 2:   # the common {seqno, data}: checked in one go
        seqno, data = obj.get("seqno"), obj.get("data")
        if type(seqno) is int and 0 <= seqno < _SEQNO_END and type(data) is str:
            value = data.encode()
            if len(value) <= max_bytes:
                return Chunk(seqno, value, now_ms if now_ms is not None else int(time.time() * 1000))
    if not isinstance(obj, dict):
        raise invalid("a chunk must be a JSON object with seqno and data")
    seqno = obj.get("seqno")
    if isinstance(seqno, bool) or not isinstance(seqno, int) or seqno < 0 or seqno >= _SEQNO_END:
        raise invalid("seqno must be an integer in [0, 2^63)")
    created = obj.get("created")
    if created is None:
        created = now_ms if now_ms is not None else int(time.time() * 1000)
    elif isinstance(created, bool) or not isinstance(created, int) or created < 0:
        raise invalid("created must be a time in ms since the epoch")
    return Chunk(seqno, _data(obj, max_bytes), created)


def parse_chunks(body: Any, max_bytes: int) -> list[Chunk]:
    items = body.get("chunks") if isinstance(body, dict) and "chunks" in body else ([body] if isinstance(body, dict) else body)
    if not isinstance(items, list) or not items:
        raise invalid("give a chunk object, or chunks: a non-empty list of them")
    now_ms = int(time.time() * 1000)
    return [parse_chunk(c, max_bytes, now_ms) for c in items]


def parse_binary_chunk(data: bytes, max_bytes: int) -> Chunk:
    if len(data) < 4:
        raise bad_request("a binary frame is a 4-byte big-endian header length, a JSON header, then the data")
    (n,) = struct.unpack(">I", data[:4])
    if n > len(data) - 4:
        raise bad_request("binary frame header length exceeds the frame")
    try:
        header = json.loads(data[4:4 + n])
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise bad_request(f"malformed JSON header: {e}") from None
    payload = data[4 + n:]
    if not isinstance(header, dict):
        raise bad_request("the binary frame header must be a JSON object")
    if len(payload) > max_bytes:
        raise GatewayError(413, "chunk_too_large", f"chunk of {len(payload)} bytes is larger than max_chunk_bytes={max_bytes}")
    hdr = {k: v for k, v in header.items() if k not in ("data", "data_b64")}
    ch = parse_chunk({**hdr, "data": ""}, max_bytes)
    return Chunk(ch.seqno, payload, ch.created_ms)


class Handlers:
    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self.cfg = gw.config

    # -- plain ------------------------------------------------------------------------------------------------
    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "gateway_id": self.gw.gateway_id, "incarnation": self.gw.incarnation,
                                  "dc": self.cfg.dc, "writable": not self.gw.closing and time.monotonic() < self.gw.lease_ok_until})

    async def metrics(self, request: web.Request) -> web.Response:
        self.gw.update_gauges()
        return web.Response(body=generate_latest(self.gw.metrics.collected()), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def openapi(self, request: web.Request) -> web.Response:
        return web.json_response(openapi_document(self.cfg))

    # -- tenants, namespaces, topics ------------------------------------------------------------------------
    async def create_tenant(self, request: web.Request) -> web.Response:
        who = await self.gw.principal(request)
        if not who.admin:
            raise GatewayError(403, "forbidden", "only the administrator creates tenants")
        body = await read_json(request)
        name = _str(body, "name", pattern=NAME)
        if not await self.gw.run_store(self.gw.store.create_tenant, name):
            raise GatewayError(409, "exists", f"tenant {name!r} exists")
        token = "lbt_" + secrets.token_urlsafe(24)
        await self.gw.run_store(self.gw.store.add_token, name, token_hash(token))
        return web.json_response({"tenant": name, "token": token}, status=201)

    async def create_token(self, request: web.Request) -> web.Response:
        who = await self.gw.principal(request)
        tenant = request.match_info["tenant"]
        who.may(tenant)
        if not await self.gw.run_store(self.gw.store.tenant_exists, tenant):
            raise GatewayError(404, "unknown_tenant", f"tenant {tenant!r} does not exist")
        token = "lbt_" + secrets.token_urlsafe(24)
        await self.gw.run_store(self.gw.store.add_token, tenant, token_hash(token))
        return web.json_response({"tenant": tenant, "token": token}, status=201)

    async def _tenant(self, request: web.Request) -> tuple[Principal, str]:
        who = await self.gw.principal(request)
        tenant = request.match_info["tenant"]
        who.may(tenant)
        if not await self.gw.run_store(self.gw.store.tenant_exists, tenant):
            raise GatewayError(404, "unknown_tenant", f"tenant {tenant!r} does not exist")
        return who, tenant

    async def create_namespace(self, request: web.Request) -> web.Response:
        who, tenant = await self._tenant(request)
        body = await read_json(request)
        name = _str(body, "name", pattern=NAME)
        if not await self.gw.run_store(self.gw.store.create_namespace, tenant, name):
            raise GatewayError(409, "exists", f"namespace {tenant}/{name} exists")
        return web.json_response({"tenant": tenant, "namespace": name}, status=201)

    async def list_namespaces(self, request: web.Request) -> web.Response:
        who, tenant = await self._tenant(request)
        return web.json_response({"tenant": tenant, "namespaces": await self.gw.run_store(self.gw.store.namespaces, tenant)})

    async def list_topics(self, request: web.Request) -> web.Response:
        who, tenant = await self._tenant(request)
        recs = await self.gw.run_store(self.gw.store.topics, tenant)
        return web.json_response({"tenant": tenant, "topics": [_topic_json(r) for r in recs]})

    async def create_topic(self, request: web.Request) -> web.Response:
        gw = self.gw
        who = await gw.principal(request)
        body = await read_json(request)
        logical = _str(body, "topic")
        parts = logical.strip("/").split("/")
        if len(parts) != 3 or not all(NAME.match(p) for p in parts):
            raise invalid(f"topic must be tenant/namespace/topic (letters, digits, '_' or '-'), not {logical!r}")
        tenant, ns, name = parts
        who.may(tenant)
        partitions = _int(body, "partitions", 1, 1, 10000)
        rf = _int(body, "replication_factor", 1, 1, 100)
        placement = body.get("placement")
        if placement is not None:
            if isinstance(placement, dict):
                placement = json.dumps(placement)
            elif not isinstance(placement, str):
                raise invalid("placement must be Confluent's placement JSON (an object or its text)")
        config = body.get("config") or {}
        if not isinstance(config, dict) or not all(isinstance(k, str) and isinstance(v, (str, int)) for k, v in config.items()):
            raise invalid("config must be an object of Kafka topic configs")
        config = {k: str(v) for k, v in config.items()}
        if placement is not None:
            config[PLACEMENT_CONFIG] = placement
        if not await gw.run_store(gw.store.tenant_exists, tenant):
            raise GatewayError(404, "unknown_tenant", f"tenant {tenant!r} does not exist")
        if ns not in await gw.run_store(gw.store.namespaces, tenant):
            raise GatewayError(404, "unknown_namespace", f"namespace {tenant}/{ns} does not exist")
        if await gw.run_store(gw.store.topic, tenant, ns, name) is not None:
            raise GatewayError(409, "exists", f"topic {logical} exists")
        physical = f"{self.cfg.dc}.{tenant}.{ns}.{name}"
        try:
            await gw.run_blocking(create_topic, gw.admin_client, physical, partitions, rf, config)
        except Exception as e:  # noqa: BLE001 - the cluster's answer, passed on
            text = str(e)
            if "TOPIC_ALREADY_EXISTS" not in text and "already exists" not in text:
                raise GatewayError(422, "cluster_refused", f"the cluster refused topic {physical}: {text}") from None
        rec = TopicRecord(tenant, ns, name, physical, partitions, rf, placement, int(time.time() * 1000))
        await gw.run_store(gw.store.create_topic, rec)
        return web.json_response(_topic_json(rec), status=201)

    async def describe_topic(self, request: web.Request) -> web.Response:
        gw = self.gw
        who = await gw.principal(request)
        m = request.match_info
        rec = await gw.resolve_topic(who, f"{m['tenant']}/{m['namespace']}/{m['topic']}")
        out = _topic_json(rec)
        try:
            await gw.run_blocking(gw.health.refresh, [rec.physical])
            th = gw.health.health(rec.physical)
            if th:
                out["partition_state"] = [{"partition": p, "leader": li[0], "isr": list(li[1]), "online": th.online(p)}
                                          for p, li in sorted(th.partitions.items())]
                out["min_insync_replicas"] = th.min_isr
        except Exception as e:  # noqa: BLE001
            out["partition_state_error"] = str(e)
        return web.json_response(out)

    # -- write sessions -------------------------------------------------------------------------------------
    async def _open_args(self, who: Principal, body: dict) -> tuple:
        rec = await self.gw.resolve_topic(who, body.get("topic"))
        source = _str(body, "source_id")
        if not source or len(source) > 1024:
            raise invalid("source_id must be a non-empty string of at most 1024 characters")
        host = _str(body, "host", "", required=False)
        file = _str(body, "file", "", required=False)
        type_ = _str(body, "type", "", required=False)
        return rec, source, host, file, type_

    async def open_session(self, request: web.Request) -> web.Response:
        who = await self.gw.principal(request)
        body = await read_json(request)
        rec, source, host, file, type_ = await self._open_args(who, body)
        res = await self.gw.sessions.open(rec.tenant, rec, source, host, file, type_)
        return web.json_response(res, status=201)

    async def _held_elsewhere(self, request: web.Request, local: dict) -> web.Response | None:
        """For a session id naming a session that lives on another live gateway (behind a load balancer, or on
        another worker of this one): that gateway's answer to the same request, which checks the token again.
        None when it is this gateway's to answer. A forwarded request is never forwarded again."""
        gw = self.gw
        sid = request.match_info["session_id"]
        if sid in local or FORWARDED_BY in request.headers:
            return None
        peer = await gw.peers.holder_of(sid)
        if peer is None:
            return None
        headers = {k: request.headers[k] for k in ("Authorization", "Content-Type") if k in request.headers}
        headers[FORWARDED_BY] = gw.gateway_id
        body = await request.read() if request.can_read_body else None
        timeout = aiohttp.ClientTimeout(total=self.cfg.read_max_wait_ms / 1000 + self.cfg.delivery_timeout_ms / 1000 + 30)
        try:
            async with gw.http.request(request.method, peer.url + request.rel_url.path_qs, data=body, headers=headers,
                                       ssl=gw.client_ssl, timeout=timeout) as resp:
                data = await resp.read()
                gw.metrics.forwarded.labels(str(resp.status)).inc()
                return web.Response(body=data, status=resp.status, content_type=resp.content_type)
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            gw.metrics.forwarded.labels("unreachable").inc()
            raise GatewayError(503, "holder_unreachable", f"the session lives on gateway {peer.gateway_id}, which cannot "
                                                          f"be reached ({type(e).__name__}); open a new session") from None

    async def write(self, request: web.Request) -> web.Response:
        who = await self.gw.principal(request)
        if (elsewhere := await self._held_elsewhere(request, self.gw.sessions.sessions)) is not None:
            return elsewhere
        sess = self.gw.sessions.session(request.match_info["session_id"], who.scope)
        try:
            body = orjson.loads(await request.read())
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise bad_request(f"malformed JSON: {e}") from None
        chunks = parse_chunks(body, self.cfg.max_chunk_bytes)
        results = await self.gw.sessions.write(sess, chunks)
        return web.json_response({"session_id": sess.session_id, "results": results}, dumps=dumps_json)

    async def close_session(self, request: web.Request) -> web.Response:
        who = await self.gw.principal(request)
        if (elsewhere := await self._held_elsewhere(request, self.gw.sessions.sessions)) is not None:
            return elsewhere
        sess = self.gw.sessions.session(request.match_info["session_id"], who.scope)
        self.gw.sessions.close(sess.session_id)
        return web.json_response({"closed": True})

    async def stream(self, request: web.Request) -> web.StreamResponse:
        """WebSocket form: first message opens the session, then each message is a chunk, a list of chunks, or a
        binary chunk; answers come in order as {"type": "ack", "results": [...]}."""
        gw = self.gw
        who = await gw.principal(request)
        ws = web.WebSocketResponse(max_msg_size=self.cfg.max_request_bytes, heartbeat=30)
        await ws.prepare(request)
        answers: asyncio.Queue = asyncio.Queue(maxsize=4096)

        async def send_error(e: GatewayError) -> None:
            if not ws.closed:
                await ws.send_json({"type": "error", **e.body()})
                await ws.close(code=4000 + (e.status % 1000), message=e.code.encode()[:120])

        async def responder() -> None:
            while True:
                item = await answers.get()
                if item is None:
                    return
                try:
                    results = await item
                except GatewayError as e:
                    await send_error(e)
                    return
                if ws.closed:
                    return
                await ws.send_str(dumps_json({"type": "ack", "results": results}))

        resp_task = None
        try:
            first = await ws.receive(timeout=30)
            if first.type != WSMsgType.TEXT:
                await send_error(bad_request("the first message must be JSON: {topic, source_id, host, file, type}"))
                return ws
            try:
                body = json.loads(first.data)
                if not isinstance(body, dict):
                    raise bad_request("the first message must be a JSON object")
            except json.JSONDecodeError as e:
                await send_error(bad_request(f"malformed JSON: {e}"))
                return ws
            try:
                rec, source, host, file, type_ = await self._open_args(who, body)
                opened = await gw.sessions.open(rec.tenant, rec, source, host, file, type_)
            except GatewayError as e:
                await send_error(e)
                return ws
            await ws.send_str(json.dumps({"type": "session", **opened}))
            sess = gw.sessions.session(opened["session_id"], None)
            resp_task = asyncio.ensure_future(responder())
            async for msg in ws:
                try:
                    if msg.type == WSMsgType.TEXT:
                        try:
                            body = orjson.loads(msg.data)
                        except json.JSONDecodeError as e:
                            raise bad_request(f"malformed JSON: {e}") from None
                        chunks = parse_chunks(body, self.cfg.max_chunk_bytes)
                    elif msg.type == WSMsgType.BINARY:
                        chunks = [parse_binary_chunk(msg.data, self.cfg.max_chunk_bytes)]
                    else:
                        break
                    async with sess.lock:
                        waits = await gw.sessions.accept(sess, chunks)
                except GatewayError as e:
                    await answers.put(None)
                    await resp_task
                    await send_error(e)
                    return ws
                await answers.put(asyncio.ensure_future(gw.sessions.collect(waits)))
            await answers.put(None)
            await resp_task
        except asyncio.TimeoutError:
            await send_error(bad_request("no open message within 30 s"))
        finally:
            if resp_task is not None and not resp_task.done():
                resp_task.cancel()
            if not ws.closed:
                await ws.close()
        return ws

    async def write_sourceless(self, request: web.Request) -> web.Response:
        gw = self.gw
        who = await gw.principal(request)
        body = await read_json(request)
        rec = await gw.resolve_topic(who, body.get("topic"))
        items = body.get("records")
        if items is None:
            items = [body]
        if not isinstance(items, list) or not items:
            raise invalid("records must be a non-empty list")
        prepared = []
        for it in items:
            if not isinstance(it, dict):
                raise invalid("each record must be an object")
            data = _data(it, self.cfg.max_chunk_bytes)
            created = _int(it, "created", int(time.time() * 1000), 0)
            headers = [("lb.created", str(created).encode()), ("lb.host", (_str(it, "host", body.get("host", "") or "", False) or "").encode()),
                       ("lb.file", (_str(it, "file", body.get("file", "") or "", False) or "").encode()),
                       ("lb.type", (_str(it, "type", body.get("type", "") or "", False) or "").encode()),
                       ("lb.origin", self.cfg.dc.encode())]
            prepared.append((data, headers))
        gw.check_writable()
        now = int(time.time() * 1000)
        results = await asyncio.gather(*(gw.sourceless.send(rec.physical, d, h, now) for d, h in prepared), return_exceptions=True)
        out = []
        for r in results:
            if isinstance(r, BaseException):
                out.append({"status": "error", "error": "not_written", "message": str(r)})
            else:
                gw.metrics.sourceless.inc()
                out.append({"status": "written", "partition": r[0], "offset": r[1]})
        return web.json_response({"results": out})

    # -- batch transactions ---------------------------------------------------------------------------------
    async def store(self, request: web.Request) -> web.Response:
        gw = self.gw
        who = await gw.principal(request)
        body = await read_json(request)
        rec = await gw.resolve_topic(who, body.get("topic"))
        txn = _str(body, "txn_id", required=False)
        data = _data(body, self.cfg.max_chunk_bytes)
        source = _str(body, "source_id", required=False)
        seqno = _int(body, "seqno", None, 0)
        if (source is None) != (seqno is None):
            raise invalid("source_id and seqno go together")
        created = _int(body, "created", int(time.time() * 1000), 0)
        res = await gw.batch.store(rec.tenant, rec, txn, data, source, seqno, created,
                                   _str(body, "host", "", False), _str(body, "file", "", False), _str(body, "type", "", False))
        return web.json_response(res, status=201)

    async def _txn_body(self, request: web.Request) -> tuple[Principal, str]:
        who = await self.gw.principal(request)
        body = await read_json(request)
        return who, _str(body, "txn_id")

    async def commit_request(self, request: web.Request) -> web.Response:
        who, txn = await self._txn_body(request)
        self.gw.check_writable()
        return web.json_response(await self.gw.batch.commit_request(who.scope, txn))

    async def commit(self, request: web.Request) -> web.Response:
        who, txn = await self._txn_body(request)
        self.gw.check_writable()
        return web.json_response(await self.gw.batch.commit(who.scope, txn))

    async def describe_txn(self, request: web.Request) -> web.Response:
        who = await self.gw.principal(request)
        return web.json_response(self.gw.batch.describe(who.scope, request.match_info["txn_id"]))

    async def abort_txn(self, request: web.Request) -> web.Response:
        who = await self.gw.principal(request)
        return web.json_response(await self.gw.batch.abort(who.scope, request.match_info["txn_id"]))

    # -- reading ---------------------------------------------------------------------------------------------
    async def pull(self, request: web.Request) -> web.Response:
        gw = self.gw
        who = await gw.principal(request)
        m = request.match_info
        rec = await gw.resolve_topic(who, f"{m['tenant']}/{m['namespace']}/{m['topic']}")
        physical = gw.physical_for(rec, request.query.get("dc"))
        try:
            partition = int(m["partition"])
        except ValueError:
            raise invalid("partition must be an integer") from None
        th = await gw.run_blocking(gw.health.ensure, physical)
        if partition not in th.partitions:
            raise GatewayError(404, "unknown_partition", f"{rec.logical} has no partition {partition}")
        offset = _qint(request, "offset", 0, 0, 2**63 - 1)
        max_bytes = _qint(request, "max_bytes", 1024 * 1024, 1, self.cfg.read_max_bytes)
        wait_ms = _qint(request, "wait_ms", 0, 0, self.cfg.read_max_wait_ms)
        b64 = request.query.get("encoding") == "base64"
        res = await gw.run_blocking(gw.reader.read, physical, partition, offset, max_bytes, wait_ms / 1000)
        return web.json_response({"topic": rec.logical, "physical_topic": physical, "partition": partition,
                                  "records": [record_json(r, partition, b64) for r in res["records"]],
                                  "next_offset": res["next_offset"], "high_watermark": res["high_watermark"]})

    async def open_read_session(self, request: web.Request) -> web.Response:
        gw = self.gw
        who = await gw.principal(request)
        body = await read_json(request)
        rec = await gw.resolve_topic(who, body.get("topic"))
        consumer = _str(body, "consumer", pattern=NAME)
        physical = gw.physical_for(rec, _str(body, "dc", required=False))
        return web.json_response(await gw.reads.open(rec.tenant, rec, physical, consumer), status=201)

    async def read_session_records(self, request: web.Request) -> web.Response:
        gw = self.gw
        who = await gw.principal(request)
        if (elsewhere := await self._held_elsewhere(request, gw.reads.sessions)) is not None:
            return elsewhere
        rs = gw.reads.get(request.match_info["session_id"], who.scope)
        max_bytes = _qint(request, "max_bytes", 1024 * 1024, 1, self.cfg.read_max_bytes)
        wait_ms = _qint(request, "wait_ms", 0, 0, self.cfg.read_max_wait_ms)
        res = await gw.reads.read(rs, max_bytes, wait_ms / 1000, request.query.get("encoding") == "base64")
        return web.json_response({"session_id": rs.session_id, **res})

    async def read_session_commit(self, request: web.Request) -> web.Response:
        gw = self.gw
        who = await gw.principal(request)
        if (elsewhere := await self._held_elsewhere(request, gw.reads.sessions)) is not None:
            return elsewhere
        rs = gw.reads.get(request.match_info["session_id"], who.scope)
        body = await read_json(request) if request.can_read_body else {}
        offsets = body.get("offsets")
        if offsets is not None:
            if not isinstance(offsets, dict):
                raise invalid("offsets must be an object partition -> offset")
            try:
                offsets = {int(p): int(o) for p, o in offsets.items()}
            except (TypeError, ValueError):
                raise invalid("offsets must map partition numbers to integer offsets") from None
        return web.json_response(await gw.reads.commit_offsets(rs, offsets))

    async def close_read_session(self, request: web.Request) -> web.Response:
        who = await self.gw.principal(request)
        if (elsewhere := await self._held_elsewhere(request, self.gw.reads.sessions)) is not None:
            return elsewhere
        rs = self.gw.reads.get(request.match_info["session_id"], who.scope)
        self.gw.reads.close(rs.session_id)
        return web.json_response({"closed": True})

    async def create_push(self, request: web.Request) -> web.Response:
        gw = self.gw
        who = await gw.principal(request)
        body = await read_json(request)
        rec = await gw.resolve_topic(who, body.get("topic"))
        consumer = _str(body, "consumer", pattern=NAME)
        url = _str(body, "url")
        if not url.startswith(("http://", "https://")):
            raise invalid("url must be an http:// or https:// URL")
        push = PushRecord(secrets.token_hex(8), rec.tenant, rec.logical, consumer, url, int(time.time() * 1000))
        await gw.run_store(gw.store.create_push, push)
        gw.pushes.start(push)
        return web.json_response(_push_json(push, gw), status=201)

    async def list_push(self, request: web.Request) -> web.Response:
        gw = self.gw
        who = await gw.principal(request)
        recs = [r for r in await gw.run_store(gw.store.pushes) if who.admin or r.tenant == who.tenant]
        return web.json_response({"push": [_push_json(r, gw) for r in recs]})

    async def delete_push(self, request: web.Request) -> web.Response:
        gw = self.gw
        who = await gw.principal(request)
        pid = request.match_info["push_id"]
        rec = next((r for r in await gw.run_store(gw.store.pushes) if r.push_id == pid), None)
        if rec is None:
            raise GatewayError(404, "unknown_push", f"no push subscription {pid!r}")
        who.may(rec.tenant)
        await gw.run_store(gw.store.delete_push, pid)
        gw.pushes.stop(pid)
        return web.json_response({"deleted": pid})

    # -- gateway to gateway ------------------------------------------------------------------------------------
    async def release(self, request: web.Request) -> web.Response:
        gw = self.gw
        await gw.principal(request, internal=True)
        body = await read_json(request)
        if body.get("incarnation") != gw.incarnation:
            raise GatewayError(410, "gone", "that gateway process is gone; this is a newer one")
        topic = _str(body, "topic")
        source = _str(body, "source")
        generation = _int(body, "generation", None, 1)
        if generation is None:
            raise invalid("generation is required")
        return web.json_response(await gw.sessions.release(topic, source, generation))


def _topic_json(r: TopicRecord) -> dict:
    return {"topic": r.logical, "physical_topic": r.physical, "partitions": r.partitions,
            "replication_factor": r.replication_factor, "placement": json.loads(r.placement) if r.placement else None}


def _push_json(r: PushRecord, gw: Gateway) -> dict:
    """`gateway`: the gateway that runs the subscription; `status` is known on that gateway only (else null)."""
    return {"push_id": r.push_id, "topic": r.topic, "consumer": r.consumer, "url": r.url,
            "gateway": gw.peers.owner(r.push_id), "status": gw.pushes.status.get(r.push_id)}


async def run_gateway(config: GatewayConfig, worker: int | None = None) -> None:
    gw = Gateway(config, worker)
    await gw.start()
    # Every chunk allocates a handful of short-lived objects, none of them in reference cycles: with the default
    # thresholds the cyclic collector ran every few hundred chunks and walked everything alive. What start-up
    # built is frozen out of its walks, and it runs a hundred times less often.
    gc.freeze()
    gc.set_threshold(70_000, 20, 20)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if worker is None:
        print(f"logbus gateway listening on {config.url}", flush=True)
    else:
        print(f"logbus gateway worker {worker} listening on {config.url} and {gw.url}", flush=True)
    await stop.wait()
    log.info("shutting down")
    await gw.stop()


__all__ = ["Gateway", "run_gateway"]
