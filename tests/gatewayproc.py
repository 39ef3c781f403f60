"""Start real `logbus gateway` processes on free loopback ports, and a small aiohttp client for the tests."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from brokerproc import ServiceProcess, free_port

ADMIN = "admin-secret-token"


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(str(value))


class GatewayProcess(ServiceProcess):
    """One `logbus gateway` process."""

    def __init__(self, data_dir: Path, bootstrap: str, store: str | None = None, port: int | None = None,
                 gateway_id: str | None = None, settings: dict | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.bootstrap = bootstrap
        self.settings = {"admin_token": ADMIN, "dc": "dc1", **(settings or {})}
        if store:
            self.settings["store"] = store
        if gateway_id:
            self.settings["gateway_id"] = gateway_id
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir.parent / f"gateway-{self.port}.log"

    def worker_pids(self) -> list[int]:
        """The worker processes of a gateway started with workers > 1 (none for a single process)."""
        pid = self.proc.pid
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]

    @property
    def url(self) -> str:
        scheme = "https" if "tls_cert" in self.settings else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "GatewayProcess":
        cfg = self.data_dir.parent / f"gateway-{self.port}.toml"
        cfg.write_text("".join(f"{k} = {_toml(v)}\n" for k, v in self.settings.items()))
        args = [sys.executable, "-m", "logbus.cli", "gateway", "--config", str(cfg), "--listen", f"127.0.0.1:{self.port}",
                "--bootstrap-server", self.bootstrap, "--data-dir", str(self.data_dir)]
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited with {self.proc.returncode}:\n{self.log()}")
            if "tls_cert" in self.settings:
                if "listening on" in self.log():
                    return self
            else:
                try:
                    with urllib.request.urlopen(self.url + "/healthz", timeout=1) as r:
                        if r.status == 200:
                            return self
                except OSError:
                    pass
            time.sleep(0.1)
        self.kill()
        raise TimeoutError(f"gateway did not answer within {timeout}s:\n{self.log()}")


@pytest.fixture
def gateway_factory(tmp_path):
    """gateway_factory(bootstrap, store=None, settings={...}) -> a started GatewayProcess; all stopped at the end."""
    started: list[GatewayProcess] = []

    def make(bootstrap: str, store: str | None = None, settings: dict | None = None, gateway_id: str | None = None,
             data_dir: Path | None = None, port: int | None = None, start: bool = True) -> GatewayProcess:
        g = GatewayProcess(data_dir or tmp_path / f"gw{len(started)}", bootstrap, store, port, gateway_id, settings)
        started.append(g)
        return g.start() if start else g

    yield make
    for g in started:
        g.stop(timeout=15)


class Api:
    """Async JSON calls to a gateway: `await api.call("POST", "/v1/...", json, token=...)` -> (status, body)."""

    def __init__(self, session, base: str, token: str = ADMIN) -> None:
        self.http = session
        self.base = base
        self.token = token

    async def call(self, method: str, path: str, body=None, token: str | None = None, raw: bytes | None = None,
                   timeout: float = 30.0, base: str | None = None):
        import aiohttp

        headers = {}
        tok = self.token if token is None else token
        if tok:
            headers["Authorization"] = f"Bearer {tok}"
        kwargs = {"headers": headers, "timeout": aiohttp.ClientTimeout(total=timeout)}
        if raw is not None:
            kwargs["data"] = raw
            headers["Content-Type"] = "application/json"
        elif body is not None:
            kwargs["json"] = body
        async with self.http.request(method, (base or self.base) + path, **kwargs) as resp:
            text = await resp.text()
            try:
                data = json.loads(text)
            except json.JSONDecodeError:
                data = text
            return resp.status, data

    async def ok(self, method: str, path: str, body=None, **kw):
        status, data = await self.call(method, path, body, **kw)
        assert status < 300, f"{method} {path} -> {status} {data}"
        return data

    async def setup_topic(self, tenant: str, namespace: str, topic: str, partitions: int = 4, **extra) -> str:
        """Create tenant (if new), namespace (if new) and topic; returns the tenant's token."""
        status, data = await self.call("POST", "/v1/tenants", {"name": tenant})
        if status == 201:
            token = data["token"]
        else:
            token = (await self.ok("POST", f"/v1/tenants/{tenant}/tokens"))["token"]
        await self.call("POST", f"/v1/tenants/{tenant}/namespaces", {"name": namespace})
        await self.ok("POST", "/v1/topics", {"topic": f"{tenant}/{namespace}/{topic}", "partitions": partitions, **extra})
        return token


async def http_endpoint(path: str, handler):
    """A small HTTP server on a free loopback port that answers POST `path` with `handler` (a push target);
    returns (runner, url). Stop it with `await runner.cleanup()`."""
    from aiohttp import web

    app = web.Application()
    app.router.add_post(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}{path}"


def read_topic(bootstrap: str, topic: str, timeout: float = 60.0) -> list:
    """Every record of every partition up to the high watermarks: (partition, offset, headers dict, value)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    parts = sorted(md.topics[topic].partitions)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-reader", "enable.auto.commit": False,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    out = []
    try:
        ends = {}
        for p in parts:
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
            if hi > lo:
                ends[p] = hi
        c.assign([TopicPartition(topic, p, 0) for p in ends])
        done = set()
        deadline = time.monotonic() + timeout
        while len(done) < len(ends):
            assert time.monotonic() < deadline, f"reading {topic} did not finish in {timeout}s"
            for m in c.consume(10000, 0.5):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        if m.offset() >= ends[m.partition()]:
                            done.add(m.partition())
                        continue
                    raise RuntimeError(m.error())
                if m.offset() >= ends[m.partition()]:
                    done.add(m.partition())
                    continue
                h = {k: (v.decode() if v is not None else "") for k, v in (m.headers() or [])}
                out.append((m.partition(), m.offset(), h, m.value()))
                if m.offset() == ends[m.partition()] - 1:
                    done.add(m.partition())
    finally:
        c.close()
    return out


def run(coro, timeout: float = 280.0):
    return asyncio.run(asyncio.wait_for(coro, timeout))
