"""Fencing between gateway processes: the new owner of a source makes the previous owner's writes final before it
recovers — by a release call (the previous owner waits for its writes in flight), by a refused connection (the
previous owner is dead), or by the lease (the previous owner is unreachable). Each runs with the two gateways sharing
a SQLite store (one host) and a ZooKeeper store (several hosts)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid

import aiohttp
import pytest
from gatewayproc import Api, gateway_factory, read_topic, run  # noqa: F401  (fixture)
from zkserver import zookeeper  # noqa: F401  (fixture)

TOPIC = "acme/logs/web"
PHYS = "dc1.acme.logs.web"


@pytest.fixture(params=["sqlite", "zk"])
def shared_store(request, tmp_path) -> str:
    """URL of the store both gateways use."""
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'shared.db'}"
    return f"zk://{request.getfixturevalue('zookeeper')}/gw-fencing-{uuid.uuid4().hex[:8]}"


def _two(gateway_factory, broker, store, settings=None):
    a = gateway_factory(broker.bootstrap, store=store, gateway_id="gw-a", settings=settings)
    b = gateway_factory(broker.bootstrap, store=store, gateway_id="gw-b", settings=settings)
    return a, b


async def _setup(http, url) -> str:
    return await Api(http, url).setup_topic("acme", "logs", "web", partitions=1)


def test_release_waits_for_writes_in_flight_at_the_previous_owner(broker, gateway_factory, shared_store):
    a, b = _two(gateway_factory, broker, shared_store)

    async def scenario():
        async with aiohttp.ClientSession() as http:
            token = await _setup(http, a.url)
            api_a, api_b = Api(http, a.url, token), Api(http, b.url, token)
            s = await api_a.ok("POST", "/v1/sessions", {"topic": TOPIC, "source_id": "x"})
            await api_a.ok("POST", f"/v1/sessions/{s['session_id']}/write", {"chunks": [{"seqno": q, "data": "a"} for q in range(1, 101)]})
            # the broker pauses: A's next writes stay in flight
            os.kill(broker.proc.pid, signal.SIGSTOP)
            done_at = {}

            async def timed(name, coro):
                result = await coro
                done_at[name] = time.monotonic()
                return result

            try:
                pending = asyncio.ensure_future(timed("a", api_a.call("POST", f"/v1/sessions/{s['session_id']}/write",
                                                           {"chunks": [{"seqno": q, "data": "a"} for q in range(101, 121)]})))
                await asyncio.sleep(0.5)
                opening = asyncio.ensure_future(timed("b", api_b.call("POST", "/v1/sessions", {"topic": TOPIC, "source_id": "x"})))
                await asyncio.sleep(1.0)
                # A refuses new writes for the source at once
                status, body = await api_a.call("POST", f"/v1/sessions/{s['session_id']}/write", {"seqno": 121, "data": "late"})
                assert status == 409 and body["error"] == "fenced"
            finally:
                os.kill(broker.proc.pid, signal.SIGCONT)
            status, written = await pending
            status_b, opened = await opening
            assert done_at["a"] <= done_at["b"], "B answered before A's writes in flight were final"
            return written, status_b, opened

    written, status_b, opened = run(scenario())
    assert [r["status"] for r in written["results"]] == ["written"] * 20
    assert status_b == 201 and opened["last_seqno"] == 120, opened
    recs = read_topic(broker.bootstrap, PHYS)
    assert [int(h["lb.seqno"]) for _, _, h, _ in recs] == list(range(1, 121))


def test_dead_previous_owner_is_detected_at_once(broker, gateway_factory, shared_store):
    a, b = _two(gateway_factory, broker, shared_store)

    async def scenario():
        async with aiohttp.ClientSession() as http:
            token = await _setup(http, a.url)
            api_a, api_b = Api(http, a.url, token), Api(http, b.url, token)
            s = await api_a.ok("POST", "/v1/sessions", {"topic": TOPIC, "source_id": "y"})
            await api_a.ok("POST", f"/v1/sessions/{s['session_id']}/write", {"chunks": [{"seqno": q, "data": "a"} for q in range(1, 51)]})
            a.kill()
            t0 = time.monotonic()
            opened = await api_b.ok("POST", "/v1/sessions", {"topic": TOPIC, "source_id": "y"})
            return opened, time.monotonic() - t0

    opened, took = run(scenario())
    assert opened["last_seqno"] == 50 and opened["generation"] == 2
    assert took < 3.0, f"a refused connection means the owner is gone; no lease wait ({took:.1f}s)"


def test_unreachable_previous_owner_is_fenced_by_the_lease(broker, gateway_factory, shared_store):
    settings = {"lease_ms": 6000, "delivery_timeout_ms": 2000, "release_timeout_ms": 1500}
    a, b = _two(gateway_factory, broker, shared_store, settings)

    async def scenario():
        async with aiohttp.ClientSession() as http:
            token = await _setup(http, a.url)
            api_a, api_b = Api(http, a.url, token), Api(http, b.url, token)
            s = await api_a.ok("POST", "/v1/sessions", {"topic": TOPIC, "source_id": "z"})
            await api_a.ok("POST", f"/v1/sessions/{s['session_id']}/write", {"chunks": [{"seqno": q, "data": "a"} for q in range(1, 31)]})
            os.kill(a.proc.pid, signal.SIGSTOP)  # A still accepts TCP connections, but answers nothing
            try:
                t0 = time.monotonic()
                opened = await api_b.ok("POST", "/v1/sessions", {"topic": TOPIC, "source_id": "z"}, timeout=60)
                took = time.monotonic() - t0
            finally:
                os.kill(a.proc.pid, signal.SIGCONT)
            # A wakes up: its lease has lapsed, so its old session's writes are refused
            status, body = await api_a.call("POST", f"/v1/sessions/{s['session_id']}/write", {"seqno": 31, "data": "stale"})
            await asyncio.sleep(1.5)
            status2, body2 = await api_a.call("POST", f"/v1/sessions/{s['session_id']}/write", {"seqno": 32, "data": "stale"})
            r = await api_b.ok("POST", f"/v1/sessions/{opened['session_id']}/write", {"seqno": 31, "data": "b"})
            return opened, took, (status, body), (status2, body2), r

    opened, took, first, second, r = run(scenario())
    assert opened["last_seqno"] == 30
    assert 4.0 <= took < 20, f"B waited for A's lease to end ({took:.1f}s)"
    assert first[0] in (404, 409, 503) and second[0] in (404, 409, 503), (first, second)
    assert r["results"][0]["status"] == "written"
    recs = read_topic(broker.bootstrap, PHYS)
    assert [(int(h["lb.seqno"]), v) for _, _, h, v in recs][-2:] == [(30, b"a"), (31, b"b")]
