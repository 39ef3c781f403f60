"""Soak: the issue's full-scale exactly-once scenario through write sessions.

    python bench/soak_gateway.py                      # 200 sources x 10,000 chunks, 3 SIGKILLs of the gateway
    python bench/soak_gateway.py --gateways 2         # sources hop between two gateways (shared SQLite store)
    python bench/soak_gateway.py --workers 2          # one gateway of two workers; each kill SIGKILLs a worker
    python bench/soak_gateway.py --sources 50 --chunks 2000 --kills 3 --json

Many concurrent sources each open a WebSocket write session, send 100-byte chunks in pipelined batches, cut their
connection at random (--disconnect-p per batch) and resume from the last seqno the gateway returns; the gateway
(gateway A when there are two) is SIGKILLed --kills times at even steps of progress and restarted; with --workers,
one of its workers is SIGKILLed each time and its supervisor starts it again. At the end the
topic is read back: every (source, seqno) must be there exactly once and in seqno order per source; every open's
last seqno must lie between the highest acknowledged and the highest sent seqno. Exits 0 only if all holds.
The pass/fail test suite runs the same scenario at the same scale (tests/fault/test_gateway_exactly_once.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import aiohttp
from confluent_kafka import Consumer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from brokerproc import BrokerProcess  # noqa: E402
from gatewayload import check_exactly_once, run_load  # noqa: E402
from gatewayproc import Api, GatewayProcess, read_topic  # noqa: E402

TOPIC = "acme/logs/soak"
PHYS = "dc1.acme.logs.soak"


def progress(bootstrap: str, partitions: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "soak-progress"})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(PHYS, p), timeout=5, cached=False)[1] for p in range(partitions))
    finally:
        c.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sources", type=int, default=200)
    ap.add_argument("--chunks", type=int, default=10_000)
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--gateways", type=int, default=1, choices=(1, 2))
    ap.add_argument("--workers", type=int, default=1, help="worker processes of each gateway")
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--disconnect-p", type=float, default=0.01)
    ap.add_argument("--timeout", type=float, default=7200)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    total = args.sources * args.chunks
    with tempfile.TemporaryDirectory(prefix="soak-gateway-") as tmp:
        root = Path(tmp)
        broker = BrokerProcess(root / "broker").start()
        store = f"sqlite://{root / 'gateway.db'}"
        gws = [GatewayProcess(root / f"gw{i}", broker.bootstrap, store=store, gateway_id=f"gw-{i}",
                              settings={"workers": args.workers}).start()
               for i in range(args.gateways)]
        try:
            async def setup() -> str:
                async with aiohttp.ClientSession() as http:
                    return await Api(http, gws[0].url).setup_topic("acme", "logs", "soak", partitions=args.partitions)

            token = asyncio.run(setup())
            result: dict = {}

            def load() -> None:
                try:
                    result["stats"] = asyncio.run(run_load([g.url for g in gws], token, TOPIC, args.sources, args.chunks,
                                                           disconnect_p=args.disconnect_p, timeout=args.timeout,
                                                           keep_acks=False))
                except BaseException as e:  # noqa: BLE001
                    result["error"] = e

            t0 = time.monotonic()
            t = threading.Thread(target=load, daemon=True)
            t.start()
            kills = []
            for k in range(1, args.kills + 1):
                target = total * k / (args.kills + 1)
                while progress(broker.bootstrap, args.partitions) < target and t.is_alive():
                    time.sleep(0.5)
                if not t.is_alive():
                    break
                if args.workers > 1:
                    victim = gws[0].worker_pids()[k % args.workers]
                    os.kill(victim, signal.SIGKILL)   # the supervisor starts it again
                else:
                    victim = gws[0].proc.pid
                    gws[0].kill()
                kills.append(round(time.monotonic() - t0, 1))
                if not args.json:
                    print(f"SIGKILL {k} of pid {victim} at {kills[-1]}s ({progress(broker.bootstrap, args.partitions)}/{total} records)",
                          flush=True)
                time.sleep(0.3)
                if args.workers == 1:
                    gws[0].start()
            t.join(args.timeout)
            took = time.monotonic() - t0
            if "error" in result:
                raise result["error"]
            stats = result["stats"]
            records = read_topic(broker.bootstrap, PHYS, timeout=1800)
            problems = check_exactly_once(records, args.sources, args.chunks)
        finally:
            for g in gws:
                g.stop()
            broker.stop()
    ok = not problems and not stats.violations and len(records) == total and len(kills) == args.kills
    out = {"sources": args.sources, "chunks": args.chunks, "records": len(records), "expected": total,
           "seconds": round(took, 1), "chunks_per_s": round(total / took), "kills_at_s": kills, "opens": stats.opens,
           "disconnects": stats.disconnects, "failures": stats.failures, "violations": stats.violations[:10],
           "problems": dict(list(problems.items())[:10]), "ok": ok}
    print(json.dumps(out, indent=None if args.json else 2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
