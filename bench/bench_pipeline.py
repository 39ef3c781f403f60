"""Delivery pipeline benchmark: records/s from the bus into the lake with Spark local[2], and the latency from a
record's creation (lb.created) to its visibility in the lake (the file sink's commit), p50 and p99, with a 1 s
trigger. The baseline, measured in the same run on the same records: a plain confluent-kafka consumer writing
Parquet with pyarrow (no Spark, no dedup, no transactions, no exactly-once), and its own creation-to-read latency.

Run: python bench/bench_pipeline.py [--records N] [--rate R] [--seconds S] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from brokerproc import BrokerProcess  # noqa: E402
from pipeline_data import create_topic, produce_dataset  # noqa: E402

from logbus.pipeline.deliver import DeliveryJob  # noqa: E402
from logbus.pipeline.deliver_args import DeliverConfig  # noqa: E402

PARTITIONS = 4


def baseline_to_parquet(bootstrap: str, topic: str, total: int, out: Path) -> float:
    """records/s of a plain consumer: assign, consume, parse lb.* headers, write Parquet with pyarrow."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    t0 = time.perf_counter()
    n = 0
    part = 0
    cols: dict[str, list] = {k: [] for k in ("partition", "offset", "value", "source", "seqno", "created")}
    while n < total:
        for m in c.consume(10_000, 1.0):
            if m.error():
                continue
            h = dict(m.headers() or [])
            cols["partition"].append(m.partition())
            cols["offset"].append(m.offset())
            cols["value"].append(m.value())
            cols["source"].append((h.get("lb.source") or b"").decode())
            seq = h.get("lb.seqno") or b""
            cols["seqno"].append(int(seq) if seq.isdigit() else None)
            cr = h.get("lb.created") or b""
            cols["created"].append(int(cr) if cr.isdigit() else None)
            n += 1
        if len(cols["offset"]) >= 100_000 or n >= total:
            pq.write_table(pa.table(cols), out / f"part-{part}.parquet")
            part += 1
            cols = {k: [] for k in cols}
    elapsed = time.perf_counter() - t0
    c.close()
    return n / elapsed


def throughput(bootstrap: str, topic: str, records: int, work: Path) -> dict:
    cfg = DeliverConfig.load(None, env={}, bootstrap_servers=bootstrap, subscribe=topic, lake=str(work / "lake"),
                             master="local[2,4]", available_now=True, starting_offsets="earliest", max_offsets_per_trigger=250_000)
    job = DeliveryJob(cfg)
    t0 = time.perf_counter()
    spark = job.spark()
    startup = time.perf_counter() - t0
    try:
        t1 = time.perf_counter()
        queries = job.start(spark)
        for q in queries:
            q.awaitTermination()
        elapsed = time.perf_counter() - t1
        rows = spark.read.parquet(cfg.lake).count()
    finally:
        spark.stop()
    return {"records": records, "lake_rows": rows, "seconds": elapsed, "records_per_s": records / elapsed, "spark_startup_s": startup}


def metadata_commits(lake: Path, seen: set, visible: dict) -> None:
    meta = lake / "_spark_metadata"
    if not meta.is_dir():
        return
    now = time.time() * 1000
    for f in meta.iterdir():
        if f.name in seen or f.name.startswith(".") or f.suffix == ".tmp":
            continue
        seen.add(f.name)
        try:
            lines = f.read_text().splitlines()[1:]
        except OSError:
            continue
        for ln in lines:
            path = json.loads(ln)["path"]
            visible[path] = now


def latency(bootstrap: str, topic: str, rate: int, seconds: float, work: Path) -> dict:
    """Produce at `rate` records/s for `seconds`; the job runs with a 1 s trigger; latency = commit time - lb.created."""
    lake = work / "lat-lake"
    cfg = DeliverConfig.load(None, env={}, bootstrap_servers=bootstrap, subscribe=topic, lake=str(lake), master="local[2,4]",
                             trigger="1 second", starting_offsets="latest")
    job = DeliveryJob(cfg)
    spark = job.spark()
    queries = job.start(spark)
    # Wait for the first (empty) batch so that startup is not counted.
    deadline = time.monotonic() + 120
    while not queries[0].recentProgress and time.monotonic() < deadline:
        time.sleep(0.2)
    stop = threading.Event()
    consumed: list[float] = []  # baseline: a plain consumer's creation-to-read latency on the same stream

    def baseline_reader():
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-lat", "enable.auto.commit": False, "fetch.wait.max.ms": 10})
        c.assign([TopicPartition(topic, p, -1) for p in range(PARTITIONS)])  # latest
        while not stop.is_set():
            for m in c.consume(1000, 0.1):
                if m.error() is None:
                    cr = dict(m.headers() or []).get("lb.created")
                    if cr:
                        consumed.append(time.time() * 1000 - int(cr))
        c.close()

    reader = threading.Thread(target=baseline_reader)
    reader.start()
    time.sleep(1)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    seen: set = set()
    visible: dict = {}
    t0 = time.monotonic()
    sent = 0
    while time.monotonic() - t0 < seconds:
        due = int((time.monotonic() - t0) * rate)
        while sent < due:
            now = str(int(time.time() * 1000)).encode()
            p.produce(topic, value=b"x" * 100, partition=sent % PARTITIONS,
                      headers=[("lb.source", b"lat-%d" % (sent % 100)), ("lb.seqno", str(sent).encode()), ("lb.created", now), ("lb.type", b"access")])
            sent += 1
        p.poll(0)
        metadata_commits(lake, seen, visible)
        time.sleep(0.01)
    p.flush(30)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        metadata_commits(lake, seen, visible)
        rows = sum(pq.read_metadata(path.removeprefix("file:")).num_rows for path in visible)
        if rows >= sent:
            break
        time.sleep(0.05)
    stop.set()
    reader.join()
    for q in queries:
        q.stop()
    spark.stop()
    lat = []
    for path, when in visible.items():
        created = pq.read_table(path.removeprefix("file:"), columns=["created"]).column("created").to_pylist()
        lat.extend(when - c.timestamp() * 1000 for c in created if c is not None)
    return {"sent": sent, "seen": len(lat), **pct("lake", lat), **pct("baseline_consumer", consumed)}


def pct(name: str, values: list[float]) -> dict:
    if not values:
        return {f"{name}_p50_ms": None, f"{name}_p99_ms": None}
    v = sorted(values)
    q = lambda f: v[min(len(v) - 1, int(f * len(v)))]  # noqa: E731
    return {
        f"{name}_p50_ms": round(q(0.50), 1),
        f"{name}_p99_ms": round(q(0.99), 1),
        f"{name}_within_1s": round(sum(x <= 1000 for x in v) / len(v), 3),
        f"{name}_within_5s": round(sum(x <= 5000 for x in v) / len(v), 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=300_000, help="records for the throughput run (default 300000)")
    ap.add_argument("--rate", type=int, default=2000, help="records/s produced during the latency run (default 2000)")
    ap.add_argument("--seconds", type=float, default=30, help="length of the latency run (default 30)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        broker = BrokerProcess(work / "data").start()
        try:
            topic = "dc1.bench.web.access"
            create_topic(broker.bootstrap, topic, PARTITIONS)
            ds = produce_dataset(broker.bootstrap, topic, PARTITIONS, a.records, sources=1000, repeat_every=50, txn_every=5000)
            (work / "base").mkdir()
            base = baseline_to_parquet(broker.bootstrap, topic, ds.produced, work / "base")
            thr = throughput(broker.bootstrap, topic, ds.produced, work)
            create_topic(broker.bootstrap, "dc1.bench.web.latency", PARTITIONS)
            lat = latency(broker.bootstrap, "dc1.bench.web.latency", a.rate, a.seconds, work)
        finally:
            broker.stop()
    result = {"throughput": thr, "baseline_consumer_to_parquet_records_per_s": base,
              "ratio_to_baseline": thr["records_per_s"] / base, "latency": lat,
              "anchor": "Logbroker: 88% of chunks within 1 s and 99% within 5 s from creation to the reader"}
    if a.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"throughput: {thr['records']:,} records into the lake in {thr['seconds']:.1f} s = {thr['records_per_s']:,.0f} records/s "
          f"(Spark local[2]; Spark startup {thr['spark_startup_s']:.1f} s not counted)")
    print(f"baseline:   plain confluent-kafka consumer -> pyarrow Parquet: {base:,.0f} records/s; ratio {result['ratio_to_baseline']:.2f}")
    print(f"latency (1 s trigger, {a.rate} records/s for {a.seconds:.0f} s): creation -> visible in the lake "
          f"p50 {lat['lake_p50_ms']} ms, p99 {lat['lake_p99_ms']} ms, within 1 s {lat.get('lake_within_1s')}, within 5 s {lat.get('lake_within_5s')}")
    print(f"baseline:   creation -> read by a plain consumer p50 {lat['baseline_consumer_p50_ms']} ms, p99 {lat['baseline_consumer_p99_ms']} ms")
    print(f"anchor:     {result['anchor']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
