"""Batch transactions and the read API through a real gateway: pull with long poll and byte limits, read sessions
with Kafka group offsets, push delivery with retries, writes without a source."""

from __future__ import annotations

import asyncio
import time

import aiohttp
from aiohttp import web
from confluent_kafka import Consumer, TopicPartition
from gatewayproc import Api, gateway_factory, http_endpoint, read_topic, run  # noqa: F401  (fixture)

TOPIC = "acme/batch/events"
PHYS = "dc1.acme.batch.events"
RECORDS = "/v1/topics/acme/batch/events/partitions/{p}/records"


async def _all_delivered(api: Api, partitions: int, wait_ms: int = 0) -> list[dict]:
    out = []
    for p in range(partitions):
        offset = 0
        while True:
            body = await api.ok("GET", RECORDS.format(p=p) + f"?offset={offset}&wait_ms={wait_ms}")
            out.extend(body["records"])
            if body["next_offset"] == offset:
                break
            offset = body["next_offset"]
    return out


def test_batch_transactions_only_committed_ones_are_delivered(broker, gateway_factory):
    # a short window, so the uncommitted transaction is decided (dropped) within the test
    gw = gateway_factory(broker.bootstrap, settings={"txn_window_ms": 5000})

    async def scenario():
        async with aiohttp.ClientSession() as http:
            token = await Api(http, gw.url).setup_topic("acme", "batch", "events", partitions=2)
            api = Api(http, gw.url, token)
            # transaction 1: stored, requested, committed
            r = await api.ok("POST", "/v1/store", {"topic": TOPIC, "txn_id": "t1", "data": "one-a", "host": "h", "type": "tsv"})
            assert r == {"txn_id": "t1", "chunk": 1, "state": "open"}
            await api.ok("POST", "/v1/store", {"topic": TOPIC, "txn_id": "t1", "data": "one-b"})
            status, body = await api.call("POST", "/v1/commit", {"txn_id": "t1"})
            assert status == 409 and body["error"] == "conflict", "commit before commit_request is refused"
            req = await api.ok("POST", "/v1/commit_request", {"txn_id": "t1"})
            assert req["state"] == "requested" and req["chunks"] == 2
            assert (await api.ok("POST", "/v1/commit_request", {"txn_id": "t1"})) == req, "a repeated commit_request is answered, not rewritten"
            status, body = await api.call("POST", "/v1/store", {"topic": TOPIC, "txn_id": "t1", "data": "late"})
            assert status == 409
            # transaction 2: written to the bus but never committed
            t2 = (await api.ok("POST", "/v1/store", {"topic": TOPIC, "data": "two-a", "source_id": "s2", "seqno": 7}))["txn_id"]
            await api.ok("POST", "/v1/commit_request", {"txn_id": t2})
            # records after an undecided transaction wait for it (offset order is kept)
            other = await api.ok("POST", "/v1/sessions", {"topic": TOPIC, "source_id": "plain"})
            await api.ok("POST", f"/v1/sessions/{other['session_id']}/write", {"seqno": 1, "data": "plain-1"})
            com = await api.ok("POST", "/v1/commit", {"txn_id": "t1"})
            assert com["state"] == "committed" and com["commit_offset"] > req["last_offset"]
            assert (await api.ok("POST", "/v1/commit", {"txn_id": "t1"}))["commit_offset"] == com["commit_offset"]
            early = await _all_delivered(api, 2)
            assert [r["data"] for r in early if r.get("txn") == "t1"] == ["one-a", "one-b"]
            assert not any(r.get("txn") == t2 for r in early)
            # after the window, t2 is decided: dropped; the plain record behind it is delivered
            await asyncio.sleep(5000 / 1000 + 5.5)
            late = await _all_delivered(api, 2)
            assert sorted(r["data"] for r in late) == ["one-a", "one-b", "plain-1"]
            one = [r for r in late if r["data"] == "one-a"][0]
            assert one["txn"] == "t1" and one["source"] == "txn:t1" and one["seqno"] == 1 and one["host"] == "h" and one["type"] == "tsv"
            state = await api.ok("GET", f"/v1/transactions/{t2}")
            assert state["state"] == "requested"
            status, body = await api.call("POST", "/v1/commit", {"txn_id": t2})
            assert status == 409 and body["error"] == "window_passed"
            # abort of an open transaction drops its chunks; unknown transactions are 404
            t3 = (await api.ok("POST", "/v1/store", {"topic": TOPIC, "data": "three"}))["txn_id"]
            assert (await api.ok("DELETE", f"/v1/transactions/{t3}"))["state"] == "aborted"
            status, body = await api.call("POST", "/v1/commit_request", {"txn_id": t3})
            assert status == 404 and body["error"] == "unknown_transaction"
            return t2

    t2 = run(scenario())
    recs = read_topic(broker.bootstrap, PHYS)
    markers = [h for _, _, h, _ in recs if "lb.commit" in h]
    assert markers == [{"lb.txn": "t1", "lb.commit": "", "lb.origin": "dc1"}]
    assert sorted(v for _, _, h, v in recs if h.get("lb.txn") == t2) == [b"two-a"]
    assert [h["lb.source"] + "/" + h["lb.seqno"] for _, _, h, _ in recs if h.get("lb.txn") == t2] == ["s2/7"]


def test_pull_long_poll_byte_limit_and_read_sessions(broker, gateway_factory):
    gw = gateway_factory(broker.bootstrap)

    async def scenario():
        async with aiohttp.ClientSession() as http:
            token = await Api(http, gw.url).setup_topic("acme", "batch", "events", partitions=1)
            api = Api(http, gw.url, token)
            s = await api.ok("POST", "/v1/sessions", {"topic": TOPIC, "source_id": "r1", "host": "hh"})
            await api.ok("POST", f"/v1/sessions/{s['session_id']}/write", {"chunks": [{"seqno": q, "data": "d" * 1000} for q in range(1, 11)]})
            # byte limit: about 3 records of ~1 KiB
            body = await api.ok("GET", RECORDS.format(p=0) + "?offset=0&max_bytes=3300")
            assert 1 <= len(body["records"]) <= 3 and body["next_offset"] == len(body["records"])
            assert body["high_watermark"] == 10 and body["records"][0]["seqno"] == 1 and body["records"][0]["host"] == "hh"
            # long poll: nothing at offset 10 until a write arrives
            t0 = time.monotonic()
            empty = await api.ok("GET", RECORDS.format(p=0) + "?offset=10&wait_ms=500")
            assert empty["records"] == [] and empty["next_offset"] == 10 and time.monotonic() - t0 >= 0.45

            async def write_later():
                await asyncio.sleep(0.7)
                await api.ok("POST", f"/v1/sessions/{s['session_id']}/write", {"seqno": 11, "data": "eleven"})

            t0 = time.monotonic()
            polled, _ = await asyncio.gather(api.ok("GET", RECORDS.format(p=0) + "?offset=10&wait_ms=10000"), write_later())
            assert [r["data"] for r in polled["records"]] == ["eleven"] and 0.6 < time.monotonic() - t0 < 8
            # read sessions: positions start at the committed offsets of the consumer's group
            rs = await api.ok("POST", "/v1/read-sessions", {"topic": TOPIC, "consumer": "etl"})
            assert rs["offsets"] == {"0": 0}
            got = await api.ok("GET", f"/v1/read-sessions/{rs['session_id']}/records?max_bytes=4000")
            first = [r["seqno"] for r in got["records"]]
            assert first and first == list(range(1, len(first) + 1))
            c = await api.ok("POST", f"/v1/read-sessions/{rs['session_id']}/commit")
            assert c["committed"] == {"0": len(first)}
            # a new read session for the same consumer resumes at the committed offset and replaces the old one
            rs2 = await api.ok("POST", "/v1/read-sessions", {"topic": TOPIC, "consumer": "etl"})
            assert rs2["offsets"] == {"0": len(first)}
            status, body = await api.call("GET", f"/v1/read-sessions/{rs['session_id']}/records")
            assert status == 404 and body["error"] == "unknown_session"
            rest = await api.ok("GET", f"/v1/read-sessions/{rs2['session_id']}/records?max_bytes=100000")
            assert [r["seqno"] for r in rest["records"]] == list(range(len(first) + 1, 12))
            await api.ok("POST", f"/v1/read-sessions/{rs2['session_id']}/commit", {"offsets": {"0": 11}})
            return rs2

    run(scenario())
    # the committed offsets are Kafka group offsets: any Kafka client sees them
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lb.acme.etl"})
    try:
        assert c.committed([TopicPartition(PHYS, 0)], timeout=10)[0].offset == 11
    finally:
        c.close()


def test_push_delivery_retries_with_backoff_and_sourceless_writes(broker, gateway_factory):
    gw = gateway_factory(broker.bootstrap, settings={"push_backoff_ms": 100, "push_backoff_max_ms": 400})

    def _committed(group: str) -> int:
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
        try:
            return sum(tp.offset for tp in c.committed([TopicPartition(PHYS, p) for p in range(2)], timeout=10) if tp.offset > 0)
        finally:
            c.close()
    received: list[dict] = []
    attempts: list[float] = []

    async def endpoint(request: web.Request) -> web.Response:
        attempts.append(time.monotonic())
        if len(attempts) <= 3:
            return web.json_response({"error": "not yet"}, status=503)  # the first three attempts fail
        received.append(await request.json())
        return web.json_response({"ok": True})

    async def scenario():
        runner, hook = await http_endpoint("/hook", endpoint)
        try:
            async with aiohttp.ClientSession() as http:
                token = await Api(http, gw.url).setup_topic("acme", "batch", "events", partitions=2)
                api = Api(http, gw.url, token)
                w = await api.ok("POST", "/v1/write", {"topic": TOPIC, "records": [{"data": f"free-{i}"} for i in range(6)], "host": "h9"})
                assert [r["status"] for r in w["results"]] == ["written"] * 6
                push = await api.ok("POST", "/v1/push", {"topic": TOPIC, "consumer": "hook", "url": hook})
                deadline = time.monotonic() + 30
                while sum(len(b["records"]) for b in received) < 6:
                    assert time.monotonic() < deadline, f"push delivered {received}"
                    await asyncio.sleep(0.1)
                listed = await api.ok("GET", "/v1/push")
                assert listed["push"][0]["status"]["failures"] >= 3
                # the gateway commits a batch's offsets after the endpoint's 2xx: wait for that before deleting
                deadline = time.monotonic() + 15
                while _committed("lb.acme.hook") < 6:
                    assert time.monotonic() < deadline, "push offsets were not committed"
                    await asyncio.sleep(0.2)
                await api.ok("DELETE", f"/v1/push/{push['push_id']}")
        finally:
            await runner.cleanup()

    run(scenario())
    data = sorted(r["data"] for b in received for r in b["records"])
    assert data == [f"free-{i}" for i in range(6)], "each record pushed once (no failure after a 2xx)"
    assert all(r["host"] == "h9" and r["origin"] == "dc1" and "seqno" not in r for b in received for r in b["records"])
    gaps = [b - a for a, b in zip(attempts, attempts[1:4])]
    assert gaps[0] >= 0.09 and gaps[1] >= 0.18 and gaps[2] >= 0.36, f"exponential backoff: {gaps}"
    assert _committed("lb.acme.hook") == 6, "the group offsets follow the deliveries"
