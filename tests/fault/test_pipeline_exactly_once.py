"""1,000,000 records with headers, failover repeats of the same (source, seqno) in other partitions, and batch
transactions with and without commit markers: logbus deliver, killed with SIGKILL twice while it runs and
restarted each time, leaves the lake with every (source, seqno) exactly once and no record of an uncommitted
transaction, counted by reading the lake back with Spark."""

from __future__ import annotations

import time

import pytest

from pipeline_data import create_topic, produce_dataset  # noqa: E402
from pipeline_helpers import DeliverProcess, spark_session  # noqa: E402

RECORDS = 1_000_000


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_one_million_records_exactly_once_across_two_sigkills(broker, tmp_path):
    topic = "dc1.acme.web.million"
    create_topic(broker.bootstrap, topic, 4)
    ds = produce_dataset(broker.bootstrap, topic, 4, RECORDS, sources=1000, repeat_every=50, txn_every=5000, txn_size=20,
                         malformed_every=100_000, timeout=180)
    assert len(ds.expected) >= RECORDS - 20 and ds.repeats > 20_000 and ds.uncommitted and ds.malformed == 10

    lake = tmp_path / "lake"
    args = ["--bootstrap-server", broker.bootstrap, "--subscribe", topic, "--lake", str(lake),
            "--max-offsets-per-trigger", "200000", "--trigger", "1 second"]
    # Run 1: killed while its second micro-batch is under way.
    job = DeliverProcess(args, tmp_path / "run1.log").start()
    job.wait_for("[lake] batch 0:", 1, timeout=180)
    time.sleep(4)
    job.kill()
    # Run 2: restarted on the same checkpoint, killed again in the middle.
    job = DeliverProcess(args, tmp_path / "run2.log").start()
    job.wait_for("[lake] batch", 1, timeout=180)
    time.sleep(3)
    job.kill()
    # Run 3: catches up with everything and stops.
    job = DeliverProcess(args + ["--available-now"], tmp_path / "run3.log").start()
    try:
        assert job.wait(360) == 0, job.log()[-3000:]
    finally:
        job.kill()
    killed_runs = [(tmp_path / f"run{i}.log").read_text() for i in (1, 2)]
    assert all("[lake] batch" in log for log in killed_runs)

    spark = spark_session()
    try:
        df = spark.read.parquet(str(lake))
        total = df.count()
        distinct = df.select("source", "seqno").distinct().count()
        pairs = {(r.source, r.seqno) for r in df.select("source", "seqno").collect()}
        quarantined = spark.read.parquet(str(tmp_path / "lake-quarantine")).count()
    finally:
        spark.stop()
    assert total == distinct, f"{total - distinct} repeated (source, seqno) pairs in the lake"
    assert not (ds.expected - pairs), f"{len(ds.expected - pairs)} records lost"
    assert not (pairs & ds.uncommitted), f"{len(pairs & ds.uncommitted)} records of uncommitted transactions in the lake"
    assert pairs == ds.expected and total == len(ds.expected)
    assert quarantined == ds.malformed
