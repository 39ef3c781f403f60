"""One gateway of two worker processes (`logbus gateway --workers 2`): one address, connections spread by the
kernel, sessions forwarded to the worker holding them, push subscriptions run by one worker, /metrics summed over
the workers, and a SIGKILLed worker started again while the writes stay exactly once."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import aiohttp
import pytest
from aiohttp import web
from gatewayload import check_exactly_once, run_load
from gatewayproc import Api, gateway_factory, http_endpoint, read_topic, run  # noqa: F401  (fixture)

from logbus.gateway.store import SqliteGatewayStore

TOPIC = "acme/logs/app"
PHYS = "dc1.acme.logs.app"
# a short lease makes the workers read each other's registrations every second
FAST = {"workers": 2, "lease_ms": 6000, "delivery_timeout_ms": 2500, "index_interval_ms": 1000}


def _registered(gw) -> list:
    store = SqliteGatewayStore(gw.data_dir / "gateway.db")
    try:
        return store.gateways()
    finally:
        store.close()


def _wait_for_both_workers(gw) -> list:
    deadline = time.monotonic() + 30
    while len(_registered(gw)) < 2:
        assert time.monotonic() < deadline, "the workers did not register"
        time.sleep(0.2)
    time.sleep(1.5)  # one more refresh: each worker now knows the other
    return _registered(gw)


def _started(gateway_factory, broker, partitions: int):
    """A gateway of two workers that know each other, and a tenant token for TOPIC."""
    gw = gateway_factory(broker.bootstrap, settings=FAST)
    _wait_for_both_workers(gw)

    async def setup():
        async with aiohttp.ClientSession() as http:
            return await Api(http, gw.url).setup_topic("acme", "logs", "app", partitions=partitions)
    return gw, run(setup())


def _metric(text: str, name: str, label: str = "") -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and label in line)


def test_workers_share_one_address_and_forward_sessions_they_do_not_hold(broker, gateway_factory):
    gw = gateway_factory(broker.bootstrap, settings=FAST)
    workers = _wait_for_both_workers(gw)
    assert {w.gateway_id.rsplit("-", 1)[1] for w in workers} == {"w0", "w1"}
    assert len(gw.worker_pids()) == 2

    async def fresh(token: str) -> tuple[aiohttp.ClientSession, Api]:
        # a new connection for every request: the kernel picks a worker each time
        http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))
        return http, Api(http, gw.url, token)

    async def scenario():
        async with aiohttp.ClientSession() as http:
            token = await Api(http, gw.url).setup_topic("acme", "logs", "app", partitions=4)
        holders, written = set(), 0
        http, api = await fresh(token)
        try:
            for i in range(16):
                s = await api.ok("POST", "/v1/sessions", {"topic": TOPIC, "source_id": f"src-{i:04d}"})
                holders.add(s["session_id"].rsplit(".", 1)[1])
                for q in range(1, 4):
                    r = await api.ok("POST", f"/v1/sessions/{s['session_id']}/write", {"seqno": q, "data": f"line {q}"})
                    assert r["results"][0]["status"] == "written", r
                    written += 1
                # a repeat through whichever worker is skipped by the one holding the session
                r = await api.ok("POST", f"/v1/sessions/{s['session_id']}/write", {"seqno": 2, "data": "again"})
                assert r["results"][0]["status"] == "skipped"
                await api.ok("DELETE", f"/v1/sessions/{s['session_id']}")
                status, body = await api.call("POST", f"/v1/sessions/{s['session_id']}/write", {"seqno": 9, "data": "x"})
                assert status == 404 and body["error"] == "unknown_session"
            # a read session's position lives on one worker; reads through either one continue from it
            rs = await api.ok("POST", "/v1/read-sessions", {"topic": TOPIC, "consumer": "reader"})
            seen = []
            for _ in range(40):
                body = await api.ok("GET", f"/v1/read-sessions/{rs['session_id']}/records?max_bytes=300")
                seen.extend((r["source"], r["seqno"]) for r in body["records"])
                if len(seen) >= written:
                    break
            assert sorted(seen) == sorted((f"src-{i:04d}", q) for i in range(16) for q in range(1, 4))
            await api.ok("POST", f"/v1/read-sessions/{rs['session_id']}/commit")
            # a wrong token is refused by the worker that got the request, before any forwarding
            status, _ = await api.call("GET", f"/v1/read-sessions/{rs['session_id']}/records", token="lbt_wrong")
            assert status == 401
            async with http.get(gw.url + "/metrics") as resp:
                metrics = await resp.text()
        finally:
            await http.close()
        return holders, metrics

    holders, metrics = run(scenario())
    assert len(holders) == 2, "sessions were opened on both workers"
    assert _metric(metrics, "logbus_gateway_forwarded_requests_total", 'status="200"') > 0, "no request was forwarded"
    # /metrics on one worker counts the chunks of both
    assert _metric(metrics, "logbus_gateway_chunks_total", 'outcome="written"') == 48
    records = read_topic(broker.bootstrap, PHYS)
    assert sorted((h["lb.source"], int(h["lb.seqno"])) for _, _, h, _ in records) == \
        sorted((f"src-{i:04d}", q) for i in range(16) for q in range(1, 4))


def test_a_push_subscription_runs_on_one_worker(broker, gateway_factory):
    gw = gateway_factory(broker.bootstrap, settings={**FAST, "push_backoff_ms": 100})
    workers = _wait_for_both_workers(gw)
    received: list[tuple[int, int]] = []

    async def endpoint(request: web.Request) -> web.Response:
        body = await request.json()
        received.extend((body["partition"], r["offset"]) for r in body["records"])
        return web.json_response({"ok": True})

    async def scenario():
        runner, hook = await http_endpoint("/hook", endpoint)
        try:
            async with aiohttp.ClientSession() as http:
                token = await Api(http, gw.url).setup_topic("acme", "logs", "app", partitions=2)
                api = Api(http, gw.url, token)
                push = await api.ok("POST", "/v1/push", {"topic": TOPIC, "consumer": "hook", "url": hook})
                for k in range(5):
                    w = await api.ok("POST", "/v1/write", {"topic": TOPIC, "records": [{"data": f"r-{k}-{i}"} for i in range(20)]})
                    assert [r["status"] for r in w["results"]] == ["written"] * 20
                deadline = time.monotonic() + 30
                while len(received) < 100:
                    assert time.monotonic() < deadline, f"{len(received)} of 100 pushed"
                    await asyncio.sleep(0.1)
                await asyncio.sleep(2.0)  # time for a second worker to repeat them, if it ran the subscription too
                # every worker names the same one as the subscription's gateway
                owners = set()
                for w in workers:
                    async with http.get(w.url + "/v1/push", headers={"Authorization": f"Bearer {token}"}) as resp:
                        owners.add((await resp.json())["push"][0]["gateway"])
                await api.ok("DELETE", f"/v1/push/{push['push_id']}")
                return owners
        finally:
            await runner.cleanup()

    owners = run(scenario())
    assert len(owners) == 1 and owners <= {w.gateway_id for w in workers}
    assert len(received) == 100 and len(set(received)) == 100, "each record pushed once"


def test_a_batch_transaction_goes_on_whichever_worker_gets_each_call(broker, gateway_factory):
    gw, token = _started(gateway_factory, broker, partitions=2)

    async def scenario():
        # every call on a new connection, the stores all at once: the workers share the transaction directory,
        # and its file lock numbers the chunks one by one
        async def call(method, path, body=None):
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
                return await Api(http, gw.url, token).ok(method, path, body)
        stored = await asyncio.gather(*(call("POST", "/v1/store", {"topic": TOPIC, "txn_id": "tx1", "data": f"chunk-{i}"})
                                        for i in range(12)))
        requested = await call("POST", "/v1/commit_request", {"txn_id": "tx1"})
        committed = await call("POST", "/v1/commit", {"txn_id": "tx1"})
        described = await call("GET", "/v1/transactions/tx1")
        return stored, requested, committed, described

    stored, requested, committed, described = run(scenario())
    assert sorted(r["chunk"] for r in stored) == list(range(1, 13))
    assert requested["chunks"] == 12 and committed["state"] == described["state"] == "committed"
    records = read_topic(broker.bootstrap, PHYS)
    data = [v for _, _, h, v in records if h.get("lb.txn") == "tx1" and "lb.commit" not in h]
    assert sorted(data) == sorted(f"chunk-{i}".encode() for i in range(12))
    assert sum(1 for _, _, h, _ in records if "lb.commit" in h) == 1


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_sigkilled_worker_is_started_again_and_writes_stay_exactly_once(broker, gateway_factory):
    gw, token = _started(gateway_factory, broker, partitions=4)
    sources, chunks = 40, 2000
    before = gw.worker_pids()
    killed: list[int] = []

    async def scenario():
        load = asyncio.ensure_future(run_load([gw.url], token, TOPIC, sources, chunks, disconnect_p=0.01, pace_s=0.02,
                                              timeout=200))
        await asyncio.sleep(1.5)
        assert not load.done()
        os.kill(before[0], signal.SIGKILL)   # in the middle of the writes
        killed.append(before[0])
        return await load

    stats = run(scenario())
    deadline = time.monotonic() + 30
    while len(gw.worker_pids()) < 2:
        assert time.monotonic() < deadline, "the supervisor did not start the worker again"
        time.sleep(0.2)
    after = gw.worker_pids()
    assert killed[0] not in after and before[1] in after and gw.alive()
    assert stats.violations == [], stats.violations[:5]
    assert stats.done_sources == sources
    records = read_topic(broker.bootstrap, PHYS)
    problems = check_exactly_once(records, sources, chunks)
    assert problems == {}, dict(list(problems.items())[:5])
    assert len(records) == sources * chunks
    assert "exited with -9" in gw.log()


def test_a_partition_both_workers_write_is_read_back_for_the_index_once(broker, gateway_factory):
    gw, token = _started(gateway_factory, broker, partitions=1)
    sources, chunks = 12, 1500
    stats = run(run_load([gw.url], token, TOPIC, sources, chunks, disconnect_p=0.0, pace_s=0.01, timeout=120))
    assert stats.done_sources == sources
    total = sources * chunks
    store = SqliteGatewayStore(gw.data_dir / "gateway.db")
    try:
        deadline = time.monotonic() + 30
        while (store.index_position(PHYS, 0) or 0) < total:
            assert time.monotonic() < deadline, f"the index stayed at {store.index_position(PHYS, 0)} of {total}"
            time.sleep(0.2)
    finally:
        store.close()
    metrics = run(_get(gw.url + "/metrics"))
    read_back = _metric(metrics, "logbus_gateway_index_records_total", 'how="read_back"')
    # both workers wrote the partition, so their own acknowledgements never filled it: it was read back, and by
    # one of them (each worker alone would have read all of it, twice the records in all)
    assert 0 < read_back <= total, f"{read_back} records read back for an index of {total}"


async def _get(url: str) -> str:
    async with aiohttp.ClientSession() as http:
        async with http.get(url) as r:
            return await r.text()
