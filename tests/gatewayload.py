"""A load of many write-session clients against one or more gateways, as a push client would behave:

each source opens a WebSocket session, resumes from the last seqno the gateway returns, sends its chunks in
pipelined batches, and on any failure (its own random disconnects, a gateway killed, a fenced session) reconnects
— to a random gateway when there are several — and resends everything above the new last seqno.
Used by the exactly-once tests and by bench/soak_gateway.py.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

import aiohttp


@dataclass
class LoadStats:
    opens: int = 0
    disconnects: int = 0
    failures: int = 0
    written: int = 0
    skipped: int = 0
    violations: list = field(default_factory=list)   # last_seqno below an acknowledged seqno, or above what was sent
    done_sources: int = 0
    acks: dict = field(default_factory=dict)          # source -> [(seqno, partition, offset)] of written answers


async def run_source(urls, token: str, topic: str, source: str, chunks: int, stats: LoadStats, *, batch: int = 20,
                     window: int = 4, chunk_bytes: int = 100, disconnect_p: float = 0.02, pace_s: float = 0.0,
                     keep_acks: bool = True, deadline: float, rng: random.Random) -> None:
    acked_max = 0      # highest seqno answered written or skipped
    sent_max = 0       # highest seqno ever sent
    payload_pad = "x" * max(0, chunk_bytes - 24)
    async with aiohttp.ClientSession() as http:
        while acked_max < chunks:
            if time.monotonic() > deadline:
                raise TimeoutError(f"source {source} stuck at {acked_max}/{chunks}")
            url = rng.choice(urls) if isinstance(urls, list) else urls()
            try:
                async with http.ws_connect(url + "/v1/sessions/stream", headers={"Authorization": f"Bearer {token}"},
                                           timeout=aiohttp.ClientWSTimeout(ws_close=2), heartbeat=None) as ws:
                    await ws.send_json({"topic": topic, "source_id": source, "host": "loadhost", "file": source, "type": "load"})
                    opened = await ws.receive_json(timeout=30)
                    if opened.get("type") != "session":
                        stats.failures += 1
                        await asyncio.sleep(0.2 + rng.random() * 0.3)
                        continue
                    stats.opens += 1
                    last = opened["last_seqno"] or 0
                    if last < acked_max or last > sent_max:
                        stats.violations.append((source, "last_seqno", last, acked_max, sent_max))
                    acked_max = max(acked_max, last)
                    nxt = last + 1
                    outstanding = 0
                    cut = False
                    while acked_max < chunks:
                        while outstanding < window and nxt <= chunks:
                            hi = min(chunks, nxt + batch - 1)
                            await ws.send_json([{"seqno": q, "data": f"{source}:{q}:{payload_pad}"} for q in range(nxt, hi + 1)])
                            sent_max = max(sent_max, hi)
                            nxt = hi + 1
                            outstanding += 1
                            if pace_s:
                                await asyncio.sleep(pace_s)
                        if disconnect_p and rng.random() < disconnect_p:
                            cut = True
                            break
                        msg = await ws.receive(timeout=30)
                        if msg.type != aiohttp.WSMsgType.TEXT:
                            break
                        body = msg.json()
                        if body.get("type") != "ack":
                            break  # fenced, broken, shutting down: reconnect
                        outstanding -= 1
                        failed = False
                        for r in body["results"]:
                            if r["status"] == "written":
                                stats.written += 1
                                if keep_acks:
                                    stats.acks.setdefault(source, []).append((r["seqno"], r["partition"], r["offset"]))
                                acked_max = max(acked_max, r["seqno"])
                            elif r["status"] == "skipped":
                                stats.skipped += 1
                                acked_max = max(acked_max, r["seqno"])
                            else:
                                failed = True  # not written: reconnect and resume from the last seqno
                        if failed:
                            stats.failures += 1
                            break
                    if cut:
                        stats.disconnects += 1
                        # an abrupt cut: drop the connection without a close handshake
                        conn = ws._response.connection if ws._response is not None else None
                        if conn is not None and conn.transport is not None:   # None: the peer closed it already
                            conn.transport.abort()
            except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError, OSError, ValueError, TypeError):
                stats.failures += 1
                await asyncio.sleep(0.1 + rng.random() * 0.4)
    stats.done_sources += 1


async def run_load(urls, token: str, topic: str, sources: int, chunks: int, *, seed: int = 7, timeout: float = 240.0,
                   **kw) -> LoadStats:
    stats = LoadStats()
    deadline = time.monotonic() + timeout
    rng = random.Random(seed)
    tasks = [run_source(urls, token, topic, f"src-{i:04d}", chunks, stats, deadline=deadline,
                        rng=random.Random(rng.random()), **kw) for i in range(sources)]
    await asyncio.gather(*tasks)
    return stats


def check_exactly_once(records, sources: int, chunks: int) -> dict:
    """records: (partition, offset, headers, value) in offset order per partition. Every (source, seqno) exactly once,
    in seqno order per source (within its partitions' offset order)."""
    per_source: dict[str, list[int]] = {}
    for p, off, h, v in sorted(records, key=lambda r: (r[0], r[1])):
        per_source.setdefault(h["lb.source"], []).append(int(h["lb.seqno"]))
    problems = {}
    for i in range(sources):
        s = f"src-{i:04d}"
        got = per_source.get(s, [])
        if got != list(range(1, chunks + 1)):
            seen = set()
            dups = sorted({q for q in got if q in seen or seen.add(q)})
            missing = sorted(set(range(1, chunks + 1)) - set(got))
            problems[s] = {"count": len(got), "duplicates": dups[:10], "missing": missing[:10],
                           "in_order": got == sorted(got)}
    return problems
