"""logbus deliver as a real subprocess against a real broker: the lake and the quarantine table, read back with
Spark, hold every (source, seqno) once, no uncommitted transaction, and the malformed records with a reason;
Delta Lake as an option; clear errors at start."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pipeline_data import create_topic, produce_dataset  # noqa: E402
from pipeline_helpers import DeliverProcess, spark_session  # noqa: E402

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def spark():
    s = spark_session()
    yield s
    s.stop()


def check_lake(spark, lake_df, ds):
    pairs = [(r.source, r.seqno) for r in lake_df.select("source", "seqno").collect()]
    got = set(pairs)
    assert len(pairs) == len(got), f"{len(pairs) - len(got)} repeated (source, seqno) pairs in the lake"
    assert not (ds.expected - got), f"{len(ds.expected - got)} records missing from the lake"
    assert not (got & ds.uncommitted), f"{len(got & ds.uncommitted)} records of uncommitted transactions in the lake"
    assert got == ds.expected


def test_deliver_parquet_available_now(broker, spark, tmp_path):
    topic = "dc1.acme.web.events"
    create_topic(broker.bootstrap, topic, 4)
    ds = produce_dataset(broker.bootstrap, topic, 4, 20_000, sources=40, repeat_every=20, txn_every=1500, txn_size=10, malformed_every=2500)
    lake = tmp_path / "lake"
    job = DeliverProcess(["--bootstrap-server", broker.bootstrap, "--topic", "acme/web/events", "--lake", str(lake),
                          "--available-now", "--max-offsets-per-trigger", "8000"], tmp_path / "deliver.log").start()
    assert job.wait(240) == 0, job.log()[-3000:]
    log = job.log()
    assert "[lake] batch" in log and "lag dc1.acme.web.events=0" in log
    assert "without a commit marker" not in log  # uncommitted ones wait in state; they are simply never emitted
    assert "more than 60000 ms before the commit marker were dropped" in log
    df = spark.read.parquet(str(lake))
    check_lake(spark, df, ds)
    assert {r.type for r in df.select("type").distinct().collect()} == {"access", "error", "batch"}
    assert (lake / "_spark_metadata").is_dir() and any(p.name.startswith("date=") for p in lake.iterdir())
    q = spark.read.parquet(str(tmp_path / "lake-quarantine")).collect()
    assert len(q) == ds.malformed and all("lb.seqno is not a decimal number" in r.reason for r in q)
    # Run again on the same checkpoint: nothing new, nothing repeated.
    again = DeliverProcess(job.user_args, tmp_path / "deliver2.log").start()
    assert again.wait(240) == 0, again.log()[-3000:]
    check_lake(spark, spark.read.parquet(str(lake)), ds)


def test_deliver_delta(broker, tmp_path):
    import deltalake
    topic = "dc1.acme.web.delta"
    create_topic(broker.bootstrap, topic, 2)
    ds = produce_dataset(broker.bootstrap, topic, 2, 3000, sources=10, repeat_every=10, txn_every=1000, txn_size=5, malformed_every=1000)
    lake = tmp_path / "lake"
    job = DeliverProcess(["--bootstrap-server", broker.bootstrap, "--subscribe", topic, "--lake", str(lake), "--format", "delta",
                          "--available-now", "--max-offsets-per-trigger", "1500"], tmp_path / "deliver.log").start()
    assert job.wait(240) == 0, job.log()[-3000:]
    table = deltalake.DeltaTable(str(lake))
    data = table.to_pyarrow_table(columns=["source", "seqno"]).to_pylist()
    pairs = [(r["source"], r["seqno"]) for r in data]
    assert len(pairs) == len(set(pairs)) and set(pairs) == ds.expected
    assert table.metadata().partition_columns == ["date", "type"]
    assert table.transaction_version("logbus-deliver-lake") is not None
    q = deltalake.DeltaTable(str(tmp_path / "lake-quarantine")).to_pyarrow_table(columns=["reason"]).to_pylist()
    assert len(q) == ds.malformed


def test_deliver_help_and_clear_errors_at_start(broker, tmp_path):
    out = subprocess.run([sys.executable, "-m", "logbus.cli", "deliver", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    for flag in ("--bootstrap-server", "--cluster", "--local-dc", "--topic", "--subscribe", "--subscribe-pattern", "--lake",
                 "--quarantine", "--checkpoint", "--format", "--trigger", "--available-now", "--commit-window", "--dedup-window",
                 "--starting-offsets", "--max-offsets-per-trigger", "--max-bytes-per-trigger", "--fail-on-data-loss",
                 "--client-rack", "--master", "--conf", "--json"):
        assert flag in out.stdout, flag
    run = lambda *a: subprocess.run([sys.executable, "-m", "logbus.cli", "deliver", *a], capture_output=True, text=True, timeout=120)  # noqa: E731
    r = run("--bootstrap-server", broker.bootstrap, "--subscribe", "no.such.topic", "--lake", str(tmp_path / "l"))
    assert r.returncode == 1 and "unknown topic(s) no.such.topic" in r.stderr
    r = run("--bootstrap-server", broker.bootstrap, "--topic", "acme/none/here", "--lake", str(tmp_path / "l"))
    assert r.returncode == 1 and "no topic matches acme/none/here" in r.stderr
    r = run("--bootstrap-server", "127.0.0.1:1", "--subscribe", "t", "--lake", str(tmp_path / "l"),
            "--source-option", "requestTimeoutMs=1500", "--source-option", "fetchOffset.numRetries=0")
    assert r.returncode == 1 and "failed against the cluster at 127.0.0.1:1" in r.stderr
    r = run("--bootstrap-server", broker.bootstrap, "--subscribe", "t")
    assert r.returncode == 2 and "--lake is required" in r.stderr
