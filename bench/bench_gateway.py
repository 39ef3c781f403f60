"""Gateway benchmark: write-session throughput against direct confluent-kafka produce in the same run, and
session-open time with a large partition.

    python bench/bench_gateway.py                    # 50 sources x 2000 chunks of 1 KiB; 1 GiB partition for opens
    python bench/bench_gateway.py --open-gib 0.25 --chunks 1000 --json
    python bench/bench_gateway.py --open-gib 0 --gateways 2       # two gateway processes share the sources
    python bench/bench_gateway.py --open-gib 0 --workers 2        # one gateway of two worker processes

1. Direct: one confluent-kafka producer (acks=all, idempotence, lz4, linger 5 ms — the gateway's settings), warmed
   up like the gateway's own producer (metadata, producer id, connection) before the clock starts, writes the same records the gateway would (1 KiB values, the seven lb.* headers, 50 sources) to a topic of 8 partitions.
2. Gateway: 50 sources, each a WebSocket write session sending batches of chunks (pipelined, a window of 8 batches),
   to another topic of 8 partitions (the clients encode and decode JSON with orjson, so that on a small machine
   the load generator takes less of the CPU the gateway needs). chunks/s and MB/s count data bytes of acknowledged
   chunks; the ratio is gateway / direct (target >= 0.5). 1 and 2 alternate for --rounds rounds; the best of each
   is kept, and the median of the rounds' own ratios is printed too (steadier when the machine's load drifts). CPU time per
   chunk of each process (gateway, broker, this process's clients) is printed too: it does not depend on the load.
3. Session open: a 1-partition topic is filled with --open-gib of records from 1000 sources (direct produce). The
   first open reads the whole partition (Logbroker's "up to 10 s"), which also writes the seqno index; then, while
   20 sources keep writing through the gateway, --opens sessions are opened for random sources (each takes a new
   generation, fences the previous session, and reads only the partition's tail past the index). p50/p99 of those
   (target p99 < 1 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson
from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from brokerproc import BrokerProcess  # noqa: E402
from gatewayproc import Api, GatewayProcess  # noqa: E402

CHUNK = 1024
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int | None = None) -> float:
    """CPU seconds (user + system) used so far by a process (default: this one), from /proc."""
    if pid is None:
        return time.process_time()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def headers(source: str, seqno: int) -> list:
    return [("lb.source", source.encode()), ("lb.seqno", str(seqno).encode()), ("lb.created", str(int(time.time() * 1000)).encode()),
            ("lb.host", b"bench-host"), ("lb.file", source.encode()), ("lb.type", b"bench"), ("lb.origin", b"dc1")]


def direct_produce(bootstrap: str, topic: str, sources: int, chunks: int, partitions: int, broker_pid: int) -> dict:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "compression.type": "lz4",
                  "linger.ms": 5, "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
                  "batch.size": 1_000_000})
    value = b"x" * CHUNK
    acked = [0]

    def cb(err, msg):
        if err is None:
            acked[0] += 1

    # Warm up as the gateway's producer is: metadata, producer id and a connection to the leader, before the clock.
    for part in range(partitions):
        p.produce(topic, b"warm-up", partition=part)
    assert p.flush(30) == 0
    t0, c0, b0 = time.monotonic(), cpu_s(), cpu_s(broker_pid)
    for q in range(1, chunks + 1):
        for s in range(sources):
            src = f"direct-{s:03d}"
            while True:
                try:
                    p.produce(topic, value, src.encode(), partition=s % partitions, headers=headers(src, q), on_delivery=cb)
                    break
                except BufferError:
                    p.poll(0.01)
        p.poll(0)
    left = p.flush(120)
    took = time.monotonic() - t0
    n = acked[0]
    assert left == 0 and n == sources * chunks, f"direct produce: {n} acknowledged, {left} left"
    return {"chunks": n, "seconds": took, "chunks_per_s": n / took, "mb_per_s": n * CHUNK / took / 1e6,
            "producer_cpu_us_per_chunk": (cpu_s() - c0) / n * 1e6, "broker_cpu_us_per_chunk": (cpu_s(broker_pid) - b0) / n * 1e6}


async def gateway_sessions(urls: list[str], token: str, topic: str, sources: int, chunks: int, pids: dict[str, int],
                           batch: int = 50, window: int = 8) -> dict:
    """All sessions are opened first (their open time is reported apart), then the clock runs while they write."""
    data = "x" * CHUNK
    counted = [0]
    opened_all = asyncio.Event()
    ready = [0]
    open_times: list[float] = []
    holders: list[str] = []
    run_id = time.monotonic_ns()

    async def one(i: int, http: aiohttp.ClientSession) -> None:
        async with http.ws_connect(urls[i % len(urls)] + "/v1/sessions/stream", headers={"Authorization": f"Bearer {token}"}, max_msg_size=0) as ws:
            t0 = time.monotonic()
            await ws.send_json({"topic": topic, "source_id": f"gw-{i:03d}-{run_id}", "host": "bench-host", "file": f"gw-{i:03d}", "type": "bench"})
            opened = await ws.receive_json(timeout=120)
            open_times.append(time.monotonic() - t0)
            assert opened["type"] == "session", opened
            holders.append(opened["session_id"].rsplit(".", 1)[1])   # the tag of the gateway process holding it
            ready[0] += 1
            if ready[0] == sources:
                opened_all.set()
            await opened_all.wait()
            nxt, outstanding, done = 1, 0, 0
            while done < chunks:
                while outstanding < window and nxt <= chunks:
                    hi = min(chunks, nxt + batch - 1)
                    await ws.send_str(orjson.dumps([{"seqno": q, "data": data} for q in range(nxt, hi + 1)]).decode())
                    nxt, outstanding = hi + 1, outstanding + 1
                msg = await ws.receive_json(timeout=60, loads=orjson.loads)
                assert msg["type"] == "ack", msg
                outstanding -= 1
                for r in msg["results"]:
                    assert r["status"] == "written", r
                done += len(msg["results"])
                counted[0] += len(msg["results"])

    async with aiohttp.ClientSession() as http:
        tasks = [asyncio.ensure_future(one(i, http)) for i in range(sources)]
        await asyncio.wait_for(opened_all.wait(), 300)
        t0, cpu0 = time.monotonic(), {name: cpu_s(pid) for name, pid in pids.items()}
        await asyncio.gather(*tasks)
        took = time.monotonic() - t0
        cpu = {f"{name}_cpu_us_per_chunk": (cpu_s(pid) - cpu0[name]) / counted[0] * 1e6 for name, pid in pids.items()}
        cpu["gateway_cpu_us_per_chunk"] = sum(v for k, v in cpu.items() if k.startswith("gateway"))
    n = counted[0]
    open_times.sort()
    split = sorted((holders.count(t) for t in set(holders)), reverse=True)
    return {"chunks": n, "seconds": took, "chunks_per_s": n / took, "mb_per_s": n * CHUNK / took / 1e6, **cpu,
            "sessions_per_process": split, "concurrent_opens_p50_s": statistics.median(open_times), "concurrent_opens_max_s": open_times[-1]}


def fill_partition(bootstrap: str, topic: str, gib: float, sources: int = 1000) -> dict:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "compression.type": "lz4",
                  "linger.ms": 20, "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
                  "batch.size": 1_000_000})
    rng = random.Random(1)
    # incompressible-ish values so the partition really holds about `gib` on disk
    values = [bytes(rng.getrandbits(8) for _ in range(CHUNK)) for _ in range(64)]
    records = int(gib * (1 << 30) / CHUNK)
    t0 = time.monotonic()
    for i in range(records):
        s, q = i % sources, i // sources + 1
        while True:
            try:
                p.produce(topic, values[i % 64], partition=0, headers=headers(f"old-{s:04d}", q))
                break
            except BufferError:
                p.poll(0.01)
        if i % 10000 == 0:
            p.poll(0)
    assert p.flush(600) == 0
    return {"records": records, "bytes": records * CHUNK, "seconds": time.monotonic() - t0, "last_seqno": records // sources}


async def open_times(url: str, token: str, topic: str, opens: int, writers: int, sources: int = 1000) -> dict:
    stop = asyncio.Event()
    written = [0]

    async def writer(i: int, http: aiohttp.ClientSession) -> None:
        api = Api(http, url, token)
        s = await api.ok("POST", "/v1/sessions", {"topic": topic, "source_id": f"live-{i:02d}"})
        q = (s["last_seqno"] or 0) + 1
        while not stop.is_set():
            await api.ok("POST", f"/v1/sessions/{s['session_id']}/write", {"chunks": [{"seqno": q + k, "data": "y" * CHUNK} for k in range(10)]})
            q += 10
            written[0] += 10
            await asyncio.sleep(0.05)

    async with aiohttp.ClientSession() as http:
        api = Api(http, url, token)
        t0 = time.monotonic()
        first = await api.ok("POST", "/v1/sessions", {"topic": topic, "source_id": "old-0000"}, timeout=600)
        cold = time.monotonic() - t0
        tasks = [asyncio.ensure_future(writer(i, http)) for i in range(writers)]
        await asyncio.sleep(2.0)
        rng = random.Random(2)
        times = []
        for _ in range(opens):
            src = f"old-{rng.randrange(sources):04d}"
            t1 = time.monotonic()
            s = await api.ok("POST", "/v1/sessions", {"topic": topic, "source_id": src})
            times.append(time.monotonic() - t1)
            assert s["last_seqno"] is not None
            await asyncio.sleep(0.02)
        stop.set()
        await asyncio.gather(*tasks)
    times.sort()
    return {"cold_open_s": cold, "cold_last_seqno": first["last_seqno"], "opens": len(times),
            "p50_s": statistics.median(times), "p99_s": times[min(len(times) - 1, int(len(times) * 0.99))],
            "max_s": times[-1], "written_meanwhile": written[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sources", type=int, default=50)
    ap.add_argument("--chunks", type=int, default=6000,
                    help="chunks per source in the throughput run (long enough that each phase takes seconds)")
    ap.add_argument("--open-gib", type=float, default=1.0, help="GiB in the partition for the open-time run (0: skip)")
    ap.add_argument("--opens", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3, help="throughput rounds (direct, then gateway); the best of each is kept")
    ap.add_argument("--gateways", type=int, default=1,
                    help="gateway processes sharing one state store; sources are spread over them (the throughput run)")
    ap.add_argument("--workers", type=int, default=1,
                    help="worker processes of each gateway (logbus gateway --workers): one address, about a core each")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out: dict = {"sources": args.sources, "chunk_bytes": CHUNK}
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as tmp:
        root = Path(tmp)
        broker = BrokerProcess(root / "broker").start()
        store = f"sqlite://{root / 'gateways.db'}"   # the gateways of one host share their state store
        gws = [GatewayProcess(root / f"gw{i}", broker.bootstrap, store=store, settings={"workers": args.workers}).start()
               for i in range(args.gateways)]
        gw = gws[0]
        try:
            async def setup() -> str:
                async with aiohttp.ClientSession() as http:
                    admin = Api(http, gw.url)
                    token = await admin.setup_topic("bench", "ns", "direct", partitions=8)
                    await admin.ok("POST", "/v1/topics", {"topic": "bench/ns/sessions", "partitions": 8})
                    await admin.ok("POST", "/v1/topics", {"topic": "bench/ns/big", "partitions": 1})
                    return token

            token = asyncio.run(setup())
            # Rounds alternate direct and gateway, and the best of each is kept: the machine's load varies.
            rounds = []
            for r in range(args.rounds):
                d = direct_produce(broker.bootstrap, "dc1.bench.ns.direct", args.sources, args.chunks, 8, broker.proc.pid)
                pids = {f"gateway{i}-{pid}": pid for i, g in enumerate(gws) for pid in [g.proc.pid, *g.worker_pids()]}
                g = asyncio.run(gateway_sessions([g.url for g in gws], token, "bench/ns/sessions", args.sources, args.chunks,
                                                 {**pids, "broker": broker.proc.pid, "client": os.getpid()}))
                rounds.append({"direct_chunks_per_s": round(d["chunks_per_s"]), "gateway_chunks_per_s": round(g["chunks_per_s"]),
                               "ratio": round(g["chunks_per_s"] / d["chunks_per_s"], 3)})
                if not args.json:
                    print(f"round {r + 1}: direct {d['chunks_per_s']:9.0f} chunks/s, gateway {g['chunks_per_s']:9.0f} chunks/s "
                          f"(×{g['chunks_per_s'] / d['chunks_per_s']:.2f}); gateway CPU {g['gateway_cpu_us_per_chunk']:.1f} µs/chunk; "
                          f"sessions per gateway process {'/'.join(map(str, g['sessions_per_process']))}",
                          flush=True)
                if "direct" not in out or d["chunks_per_s"] > out["direct"]["chunks_per_s"]:
                    out["direct"] = d
                if "gateway" not in out or g["chunks_per_s"] > out["gateway"]["chunks_per_s"]:
                    out["gateway"] = g
            out["rounds"] = rounds
            out["ratio"] = out["gateway"]["mb_per_s"] / out["direct"]["mb_per_s"]
            # Each round's own ratio compares two runs seconds apart, under about the same machine load.
            out["median_round_ratio"] = statistics.median(r["ratio"] for r in rounds)
            if not args.json:
                d, g = out["direct"], out["gateway"]
                print("best of each:")
                print(f"direct  : {d['chunks_per_s']:9.0f} chunks/s {d['mb_per_s']:7.1f} MB/s   CPU per chunk: producer "
                      f"{d['producer_cpu_us_per_chunk']:.1f} µs, broker {d['broker_cpu_us_per_chunk']:.1f} µs")
                print(f"gateway : {out['gateway']['chunks_per_s']:9.0f} chunks/s {out['gateway']['mb_per_s']:7.1f} MB/s"
                      f"   ratio {out['ratio']:.2f}, median of the rounds' ratios {out['median_round_ratio']:.2f} (target >= 0.5)")
                print(f"          {args.sources} sessions opened at once: "
                      f"p50 {out['gateway']['concurrent_opens_p50_s'] * 1000:.0f} ms, max {out['gateway']['concurrent_opens_max_s'] * 1000:.0f} ms")
                print(f"          CPU per chunk: gateway{'s' if len(gws) > 1 else ''} {g['gateway_cpu_us_per_chunk']:.1f} µs, broker {g['broker_cpu_us_per_chunk']:.1f} µs, "
                      f"WebSocket clients {g['client_cpu_us_per_chunk']:.1f} µs", flush=True)
            if args.open_gib > 0:
                out["fill"] = fill_partition(broker.bootstrap, "dc1.bench.ns.big", args.open_gib)
                out["open"] = asyncio.run(open_times(gw.url, token, "bench/ns/big", args.opens, 20))
                if not args.json:
                    f, o = out["fill"], out["open"]
                    print(f"partition: {f['bytes'] / (1 << 30):.2f} GiB, {f['records']} records from 1000 sources (filled in {f['seconds']:.0f}s)")
                    print(f"open    : cold (reads the whole partition, builds the index) {o['cold_open_s']:.2f}s; "
                          f"then {o['opens']} opens while 20 sources write: p50 {o['p50_s'] * 1000:.0f} ms, "
                          f"p99 {o['p99_s'] * 1000:.0f} ms, max {o['max_s'] * 1000:.0f} ms (target p99 < 1 s)")
        finally:
            for g in gws:
                g.stop()
            broker.stop()
    if args.json:
        print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
