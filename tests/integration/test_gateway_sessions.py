"""Write sessions through a real gateway process: plain and WebSocket forms, skipping, fencing, recovery."""

from __future__ import annotations

import asyncio
import json
import struct
import time

import aiohttp
from gatewayproc import Api, gateway_factory, read_topic, run  # noqa: F401  (fixture)

TOPIC = "acme/logs/web"
PHYS = "dc1.acme.logs.web"


def _metric(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_plain_session_writes_skips_and_fences(broker, gateway_factory):
    gw = gateway_factory(broker.bootstrap)

    async def scenario():
        async with aiohttp.ClientSession() as http:
            token = await Api(http, gw.url).setup_topic("acme", "logs", "web", partitions=4)
            api = Api(http, gw.url, token)
            s1 = await api.ok("POST", "/v1/sessions", {"topic": TOPIC, "source_id": "h1:/var/log/a", "host": "h1",
                                                      "file": "/var/log/a", "type": "nginx"})
            assert s1["last_seqno"] is None and s1["generation"] == 1 and 0 <= s1["partition"] < 4
            r = await api.ok("POST", f"/v1/sessions/{s1['session_id']}/write",
                             {"chunks": [{"seqno": q, "data": f"line {q}", "created": 1000 + q} for q in (1, 2, 5)]})
            assert [x["status"] for x in r["results"]] == ["written"] * 3
            assert [x["offset"] for x in r["results"]] == [0, 1, 2]
            # a resend of written seqnos, and seqnos going backwards, are skipped and not written
            r = await api.ok("POST", f"/v1/sessions/{s1['session_id']}/write",
                             {"chunks": [{"seqno": q, "data": "again"} for q in (2, 5, 3, 7)]})
            assert [x["status"] for x in r["results"]] == ["skipped", "skipped", "skipped", "written"]
            assert all(x.get("already_written") for x in r["results"][:3])
            # a newer session fences the older one and resumes from the last seqno
            s2 = await api.ok("POST", "/v1/sessions", {"topic": TOPIC, "source_id": "h1:/var/log/a"})
            assert s2["last_seqno"] == 7 and s2["generation"] == 2 and s2["partition"] == s1["partition"]
            status, body = await api.call("POST", f"/v1/sessions/{s1['session_id']}/write", {"seqno": 8, "data": "late"})
            assert status == 409 and body["error"] == "fenced"
            r = await api.ok("POST", f"/v1/sessions/{s2['session_id']}/write", {"seqno": 8, "data": "line 8"})
            assert r["results"][0]["status"] == "written"
            return s1["partition"]

    partition = run(scenario())
    recs = read_topic(broker.bootstrap, PHYS)
    assert [(p, h["lb.seqno"], v) for p, _, h, v in recs] == [
        (partition, "1", b"line 1"), (partition, "2", b"line 2"), (partition, "5", b"line 5"),
        (partition, "7", b"again"), (partition, "8", b"line 8")]
    h = recs[0][2]
    assert h == {"lb.source": "h1:/var/log/a", "lb.seqno": "1", "lb.created": "1001", "lb.host": "h1",
                 "lb.file": "/var/log/a", "lb.type": "nginx", "lb.origin": "dc1"}


def test_websocket_session_in_order_with_binary_frames(broker, gateway_factory):
    gw = gateway_factory(broker.bootstrap)

    async def scenario():
        async with aiohttp.ClientSession() as http:
            token = await Api(http, gw.url).setup_topic("acme", "logs", "web", partitions=2)
            async with http.ws_connect(gw.url + "/v1/sessions/stream", headers={"Authorization": f"Bearer {token}"}) as ws:
                await ws.send_json({"topic": TOPIC, "source_id": "src-ws", "host": "h2", "type": "app"})
                opened = await ws.receive_json(timeout=10)
                assert opened["type"] == "session" and opened["last_seqno"] is None
                # pipelined: lists of chunks, single chunks and binary frames, answered in order
                for base in range(0, 300, 10):
                    await ws.send_json([{"seqno": base + i + 1, "data": f"c{base + i + 1}"} for i in range(10)])
                await ws.send_json({"seqno": 150, "data": "old"})
                header = json.dumps({"seqno": 301}).encode()
                await ws.send_bytes(struct.pack(">I", len(header)) + header + b"\x00\xffbinary")
                results = []
                while len(results) < 302:
                    msg = await ws.receive_json(timeout=20)
                    assert msg["type"] == "ack", msg
                    results.extend(msg["results"])
                assert [r["seqno"] for r in results] == list(range(1, 301)) + [150, 301]
                assert all(r["status"] == "written" for r in results[:300]) and results[301]["status"] == "written"
                assert results[300] == {"seqno": 150, "status": "skipped", "already_written": True}
                offsets = [r["offset"] for r in results if r["status"] == "written"]
                assert offsets == sorted(offsets) and len(set(offsets)) == 301
                # a newer session (plain form) fences the stream: the next chunk is refused and the socket closed
                api = Api(http, gw.url, token)
                s2 = await api.ok("POST", "/v1/sessions", {"topic": TOPIC, "source_id": "src-ws"})
                assert s2["last_seqno"] == 301
                await ws.send_json({"seqno": 302, "data": "fenced"})
                msg = await ws.receive_json(timeout=10)
                assert msg["type"] == "error" and msg["error"] == "fenced"

    run(scenario())
    recs = read_topic(broker.bootstrap, PHYS)
    assert [int(h["lb.seqno"]) for _, _, h, _ in recs] == list(range(1, 302))
    assert recs[-1][3] == b"\x00\xffbinary"


def test_recovery_after_sigkill_reads_only_past_the_index(broker, gateway_factory, tmp_path):
    gw = gateway_factory(broker.bootstrap, settings={"index_interval_ms": 300})

    async def write(n_from: int, n_to: int, token: str, source: str) -> dict:
        async with aiohttp.ClientSession() as http:
            api = Api(http, gw.url, token)
            s = await api.ok("POST", "/v1/sessions", {"topic": TOPIC, "source_id": source})
            for base in range(n_from, n_to, 100):
                await api.ok("POST", f"/v1/sessions/{s['session_id']}/write",
                             {"chunks": [{"seqno": q, "data": "x" * 100} for q in range(base, min(base + 100, n_to))]})
            return s

    async def setup():
        async with aiohttp.ClientSession() as http:
            return await Api(http, gw.url).setup_topic("acme", "logs", "web", partitions=1)

    token = run(setup())
    run(write(1, 2001, token, "a"))
    run(write(1, 501, token, "b"))
    time.sleep(1.5)  # the indexer runs every 300 ms

    async def metrics_text() -> str:
        async with aiohttp.ClientSession() as http:
            return (await Api(http, gw.url, token).call("GET", "/metrics"))[1]

    # The gateway was the partition's only writer: its own acknowledged writes filled the index, the indexer read
    # nothing back
    before = run(metrics_text())
    # (records past the index when source b's session opened were read then, by its recovery)
    assert _metric(before, 'logbus_gateway_index_records_total{how="own_writes"}') \
        + _metric(before, "logbus_gateway_recovery_records_total") == 2500
    assert _metric(before, 'logbus_gateway_index_records_total{how="read_back"}') == 0
    gw.kill()
    gw.start()

    async def reopen():
        async with aiohttp.ClientSession() as http:
            api = Api(http, gw.url, token)
            t0 = time.monotonic()
            sa = await api.ok("POST", "/v1/sessions", {"topic": TOPIC, "source_id": "a"})
            took = time.monotonic() - t0
            sb = await api.ok("POST", "/v1/sessions", {"topic": TOPIC, "source_id": "b"})
            sc = await api.ok("POST", "/v1/sessions", {"topic": TOPIC, "source_id": "c"})
            status, metrics = await api.call("GET", "/metrics")
            return sa, sb, sc, took, metrics

    sa, sb, sc, took, metrics = run(reopen())
    assert (sa["last_seqno"], sb["last_seqno"], sc["last_seqno"]) == (2000, 500, None)
    assert sa["generation"] == 2
    assert _metric(metrics, "logbus_gateway_recovery_records_total") == 0, "the index covered the whole partition"
    assert took < 2.0
    # records written after the last index save are found by reading the tail
    run(write(501, 601, token, "b"))
    gw.kill()
    gw.start()
    sa, sb, sc, took, metrics = run(reopen())
    assert (sa["last_seqno"], sb["last_seqno"]) == (2000, 600)
    assert 0 <= _metric(metrics, "logbus_gateway_recovery_records_total") <= 100


def test_index_reads_back_what_other_writers_put_into_the_partition(broker, gateway_factory):
    """A record of another writer between the gateway's own: the index cannot be built from the gateway's
    acknowledgements alone, so it reads the partition back, and the foreign source's seqno is in it."""
    from confluent_kafka import Producer

    gw = gateway_factory(broker.bootstrap, settings={"index_interval_ms": 300})

    async def scenario():
        async with aiohttp.ClientSession() as http:
            token = await Api(http, gw.url).setup_topic("acme", "logs", "web", partitions=1)
            api = Api(http, gw.url, token)
            s = await api.ok("POST", "/v1/sessions", {"topic": TOPIC, "source_id": "own"})
            await api.ok("POST", f"/v1/sessions/{s['session_id']}/write", {"chunks": [{"seqno": q, "data": "x"} for q in range(1, 51)]})
            p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
            p.produce(PHYS, b"foreign", partition=0, headers=[("lb.source", b"elsewhere"), ("lb.seqno", b"7")])
            assert p.flush(10) == 0
            await api.ok("POST", f"/v1/sessions/{s['session_id']}/write", {"chunks": [{"seqno": q, "data": "x"} for q in range(51, 101)]})
            # An index run may fall between the writes (every 300 ms): the ranges of the gateway's own writes alone
            # come from its acknowledgements, but the one holding the foreign record is read back.
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                text = (await api.call("GET", "/metrics"))[1]
                if _metric(text, "logbus_gateway_index_records_total") >= 101:
                    break
                await asyncio.sleep(0.2)
            assert _metric(text, "logbus_gateway_index_records_total") == 101, text
            assert _metric(text, 'logbus_gateway_index_records_total{how="read_back"}') >= 1, text
            return token

    token = run(scenario())
    gw.kill()
    gw.start()

    async def reopen():
        async with aiohttp.ClientSession() as http:
            api = Api(http, gw.url, token)
            foreign = await api.ok("POST", "/v1/sessions", {"topic": TOPIC, "source_id": "elsewhere"})
            own = await api.ok("POST", "/v1/sessions", {"topic": TOPIC, "source_id": "own"})
            return foreign, own, (await api.call("GET", "/metrics"))[1]

    foreign, own, text = run(reopen())
    assert (foreign["last_seqno"], own["last_seqno"]) == (7, 100)
    assert _metric(text, "logbus_gateway_recovery_records_total") == 0, "the index covered the whole partition"


def test_openapi_served_and_metrics(broker, gateway_factory):
    gw = gateway_factory(broker.bootstrap)

    async def scenario():
        async with aiohttp.ClientSession() as http:
            api = Api(http, gw.url, token="")
            status, doc = await api.call("GET", "/openapi.json")
            assert status == 200 and doc["openapi"].startswith("3.") and "/v1/sessions" in doc["paths"]
            status, text = await api.call("GET", "/metrics")
            assert status == 200 and "logbus_gateway_chunks_total" in text
            status, body = await api.call("GET", "/healthz")
            assert status == 200 and body["writable"] is True

    run(scenario())
