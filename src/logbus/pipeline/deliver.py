"""The delivery job (`logbus deliver`): topics of the bus into lake tables, exactly once.

    read topics (the `logbus` source, one per cluster by the DC prefix rules)
      -> malformed records (bad lb.* headers) to the quarantine table, with the reason
      -> batch transactions: keep records whose commit marker arrived within the window
      -> drop repeated (source, seqno) pairs, across partitions and clusters
      -> lake table partitioned by date (of lb.created, else the bus timestamp) and log type (lb.type)

Exactly once across restarts: offsets and state live in the Spark checkpoint; Parquet goes through Spark's file
sink, whose commit log (_spark_metadata) makes a re-run micro-batch replace, not add; Delta Lake goes through
delta-rs with a transaction marker (app id, version = batch id) in the same atomic commit as the data, so a
re-run micro-batch is skipped.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import sys
import time
from pathlib import Path

from logbus.pipeline.deliver_args import DeliverConfig, config_from_args

log = logging.getLogger("logbus.pipeline")

# The source name the quarantine query reads with (see logbus.pipeline.source.register).
QUARANTINE_SOURCE = "logbus_quarantine"


def run_deliver(args: argparse.Namespace) -> int:
    try:
        cfg = config_from_args(args)
    except (OSError, ValueError) as e:
        print(f"logbus deliver: {e}", file=sys.stderr)
        return 2
    return DeliveryJob(cfg).run()


# ------------------------------------------------------------------ what to read


def source_options(cfg: DeliverConfig) -> list[tuple[str, dict[str, str]]]:
    """(label, options of the logbus source) for each cluster to read, by the reading rules across DCs."""
    from logbus.pipeline.topics import plan_reads

    common: dict[str, str] = {
        "startingOffsets": cfg.starting_offsets,
        "failOnDataLoss": "true" if cfg.fail_on_data_loss else "false",
    }
    if cfg.max_offsets_per_trigger:
        common["maxOffsetsPerTrigger"] = str(cfg.max_offsets_per_trigger)
    if cfg.max_bytes_per_trigger:
        common["maxBytesPerTrigger"] = str(cfg.max_bytes_per_trigger)
    if cfg.client_rack:
        common["client.rack"] = cfg.client_rack
    report = _local_path(cfg.checkpoint_path)
    if report is not None:
        common["dataLossReport"] = str(report / "data_loss.jsonl")
    common.update(cfg.source_options)

    if cfg.clusters:
        out = []
        for read in plan_reads(cfg.clusters, cfg.local_dc):
            opts = dict(common)
            opts.update({"bootstrap.servers": read.bootstrap_servers, "topics": ",".join(cfg.topics),
                         "prefixes": ",".join(read.prefixes) if read.prefixes else "*"})
            label = f"{read.dc} ({'every prefix' if read.prefixes is None else 'prefix ' + ','.join(read.prefixes)})"
            out.append((label, opts))
        return out
    opts = dict(common)
    opts["bootstrap.servers"] = cfg.bootstrap_servers or ""
    if cfg.topics:
        opts.update({"topics": ",".join(cfg.topics), "prefixes": "*"})
    elif cfg.subscribe:
        opts["subscribe"] = cfg.subscribe
    else:
        opts["subscribePattern"] = cfg.subscribe_pattern or ""
    return [(opts["bootstrap.servers"], opts)]


def preflight(sources: list[tuple[str, dict[str, str]]]) -> list[str]:
    """Check every cluster and topic before Spark starts; clear errors for bad options, unknown topics, unreachable clusters."""
    from logbus.pipeline.kafka_io import OffsetReader, SourceError
    from logbus.pipeline.options import OptionError, parse_options

    problems = []
    for label, opts in sources:
        try:
            parsed = parse_options(opts, streaming=True)
            tps = OffsetReader(parsed).partitions()
            if not tps and (opts.get("topics") or opts.get("subscribePattern")):
                what = opts.get("topics") or opts.get("subscribePattern")
                problems.append(f"{label}: no topic matches {what} (prefixes {opts.get('prefixes', '*')}) on the cluster at {parsed.bootstrap_servers}")
        except (OptionError, SourceError) as e:
            problems.append(f"{label}: {e}")
    return problems


def _local_path(path: str) -> Path | None:
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", path) and not path.startswith("file://"):
        return None
    return Path(path.removeprefix("file://"))


# ------------------------------------------------------------------ the job


class DeliveryJob:
    def __init__(self, cfg: DeliverConfig) -> None:
        self.cfg = cfg
        self.sources = source_options(cfg)
        self._stop = False
        self._report_pos = 0

    def run(self) -> int:
        problems = preflight(self.sources)
        if problems:
            for p in problems:
                print(f"logbus deliver: {p}", file=sys.stderr)
            return 1
        spark = self.spark()
        try:
            queries = self.start(spark)
            return self.watch(queries)
        finally:
            spark.stop()

    def spark(self):
        from pyspark.sql import SparkSession

        from logbus.pipeline import prepare_spark_environment

        from logbus.pipeline.source import register

        prepare_spark_environment()
        b = (
            SparkSession.builder.master(self.cfg.master)
            .appName("logbus deliver")
            .config("spark.sql.shuffle.partitions", str(self.cfg.shuffle_partitions))
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.streaming.stateStore.maintenanceInterval", "30s")
            .config("spark.sql.execution.arrow.maxRecordsPerBatch", "20000")
            # Timeouts of the stateful step are handled in batches that carry data; without this, Spark would run
            # an empty batch at every trigger (and Trigger.AvailableNow would never end).
            .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        )
        for k, v in self.cfg.spark_conf.items():
            b = b.config(k, v)
        spark = b.getOrCreate()
        spark.sparkContext.setLogLevel(os.environ.get("LOGBUS_SPARK_LOG_LEVEL", "ERROR"))
        register(spark)
        register(spark, QUARANTINE_SOURCE)   # the quarantine query runs beside the lake query: its own registration
        return spark

    def read(self, spark, malformed_only: bool):
        df = None
        for _, opts in self.sources:
            r = spark.readStream.format(QUARANTINE_SOURCE if malformed_only else "logbus")
            for k, v in opts.items():
                r = r.option(k, v)
            if malformed_only:
                r = r.option("malformedOnly", "true")
            one = r.load()
            df = one if df is None else df.unionByName(one)
        return df

    def start(self, spark) -> list:
        from pyspark.sql import functions as F
        from pyspark.sql.streaming.state import GroupStateTimeout

        from logbus.pipeline.state import LAKE_COLUMNS, LAKE_SCHEMA, STATE_SCHEMA, GroupLogic

        cfg = self.cfg
        names = [n for n, _ in LAKE_COLUMNS]
        other_headers = F.filter("headers", lambda h: ~h["key"].startswith("lb."))
        headers_json = lambda col: F.when(F.size(col) > 0, F.to_json(col))  # noqa: E731

        raw = self.read(spark, malformed_only=False).filter(F.col("malformed").isNull())
        raw = raw.withColumn("headers", headers_json(other_headers))
        # One pass over the source (each branch of a plan would read the bus again): every record goes through
        # the stateful step, keyed by transaction, by source, or by topic-partition when it has neither.
        gkey = (
            F.when(F.col("txn").isNotNull(), F.concat(F.lit("t:"), F.col("txn")))
            .when(F.col("source").isNotNull(), F.concat(F.lit("s:"), F.col("source")))
            .otherwise(F.concat(F.lit("p:"), F.col("topic"), F.lit("-"), F.col("partition").cast("string")))
        )
        keyed = raw.withColumn("gkey", gkey).select("gkey", *names, "commit")
        logic = GroupLogic(cfg.commit_window_s * 1000, cfg.dedup_window_s * 1000)
        kept = keyed.groupBy("gkey").applyInPandasWithState(
            logic, LAKE_SCHEMA, STATE_SCHEMA, "append", GroupStateTimeout.ProcessingTimeTimeout
        )
        lake = kept.withColumn("date", F.to_date(F.coalesce(F.col("created"), F.col("timestamp"))))

        bad = self.read(spark, malformed_only=True).filter(F.col("malformed").isNotNull())
        bad = bad.withColumn("headers", headers_json(F.col("headers")))
        bad = bad.select(*names, F.col("malformed").alias("reason")).withColumn("date", F.to_date(F.col("timestamp")))

        ckpt = cfg.checkpoint_path.rstrip("/")
        trigger = {"availableNow": True} if cfg.available_now else {"processingTime": cfg.trigger}
        if cfg.format == "parquet":
            q_lake = (
                lake.writeStream.format("parquet").queryName("lake").outputMode("append")
                .option("path", cfg.lake).option("checkpointLocation", ckpt + "/lake")
                .partitionBy("date", "type").trigger(**trigger).start()
            )
            q_bad = (
                bad.writeStream.format("parquet").queryName("quarantine").outputMode("append")
                .option("path", cfg.quarantine_path).option("checkpointLocation", ckpt + "/quarantine")
                .partitionBy("date").trigger(**trigger).start()
            )
        else:
            writer = DeltaBatchWriter(cfg.lake, ["date", "type"], app_id="logbus-deliver-lake")
            q_lake = (
                lake.writeStream.queryName("lake").outputMode("append").foreachBatch(writer)
                .option("checkpointLocation", ckpt + "/lake").trigger(**trigger).start()
            )
            qwriter = DeltaBatchWriter(cfg.quarantine_path, ["date"], app_id="logbus-deliver-quarantine")
            q_bad = (
                bad.writeStream.queryName("quarantine").outputMode("append").foreachBatch(qwriter)
                .option("checkpointLocation", ckpt + "/quarantine").trigger(**trigger).start()
            )
        return [q_lake, q_bad]

    # -- progress on the terminal

    def watch(self, queries: list) -> int:
        def on_term(signum, frame):
            self._stop = True

        old = signal.signal(signal.SIGTERM, on_term)
        seen: dict[str, int] = {}
        started = time.monotonic()
        try:
            while True:
                active = [q for q in queries if q.isActive]
                for q in queries:
                    self._print_progress(q, seen)
                self._print_data_loss()
                failed = [q for q in queries if not q.isActive and q.exception() is not None]
                if failed:
                    for q in failed:
                        print(f"logbus deliver: query {q.name} failed: {concise_error(q.exception())}", file=sys.stderr, flush=True)
                    for q in active:
                        q.stop()
                    return 1
                if not active:
                    return 0
                if self._stop or (self.cfg.stop_after_s and time.monotonic() - started > self.cfg.stop_after_s):
                    for q in active:
                        q.stop()
                    for q in queries:
                        self._print_progress(q, seen)
                    return 0
                time.sleep(0.5)
        except KeyboardInterrupt:
            for q in queries:
                if q.isActive:
                    q.stop()
            return 130
        finally:
            signal.signal(signal.SIGTERM, old)

    def _print_progress(self, q, seen: dict[str, int]) -> None:
        for p in q.recentProgress:
            if p["batchId"] <= seen.get(q.name, -1):
                continue
            seen[q.name] = p["batchId"]
            rows = p.get("numInputRows", 0)
            info = {
                "query": q.name,
                "batch": p["batchId"],
                "input_rows": rows,
                "rows_per_s": round(p.get("processedRowsPerSecond") or 0.0, 1),
                "duration_ms": (p.get("durationMs") or {}).get("triggerExecution"),
                "lag": lag_per_topic(p),
                "state_rows": sum(op.get("numRowsTotal", 0) for op in p.get("stateOperators", [])),
                "output_rows": (p.get("sink") or {}).get("numOutputRows"),
            }
            if self.cfg.json:
                print(json.dumps(info), flush=True)
            else:
                lag = ", ".join(f"{t}={n}" for t, n in sorted(info["lag"].items())) or "-"
                print(
                    f"[{q.name}] batch {info['batch']}: {rows:,} rows in, {info['rows_per_s']:,.0f} rows/s, "
                    f"{(info['duration_ms'] or 0) / 1000:.2f} s; lag {lag}; state {info['state_rows']:,} rows",
                    flush=True,
                )

    def _print_data_loss(self) -> None:
        report = _local_path(self.cfg.checkpoint_path)
        if report is None:
            return
        path = report / "data_loss.jsonl"
        try:
            with open(path) as f:
                f.seek(self._report_pos)
                for line in f:
                    msg = json.loads(line).get("message", line.strip())
                    print(f"logbus deliver: data loss skipped (failOnDataLoss=false): {msg}", file=sys.stderr, flush=True)
                self._report_pos = f.tell()
        except (OSError, ValueError):
            pass


def lag_per_topic(progress: dict) -> dict[str, int]:
    """Records behind per topic: the newest offsets the source saw minus the offsets this batch read up to."""
    lag: dict[str, int] = {}
    for s in progress.get("sources", []):
        try:
            latest = s.get("latestOffset")
            end = s.get("endOffset")
            latest = json.loads(latest) if isinstance(latest, str) else latest
            end = json.loads(end) if isinstance(end, str) else end
        except ValueError:
            continue
        if not isinstance(latest, dict) or not isinstance(end, dict):
            continue
        for topic, parts in latest.items():
            done = end.get(topic, {})
            lag[topic] = lag.get(topic, 0) + sum(max(0, int(o) - int(done.get(p, 0))) for p, o in parts.items())
    return lag


def concise_error(exc) -> str:
    """The logbus source's own message out of a Spark exception, when there is one."""
    text = str(getattr(exc, "desc", None) or exc)
    found = re.findall(r"(?:SourceError|DataLossError|OptionError): (.+)", text)
    if found:
        return found[-1].strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[0][:500] if lines else repr(exc)


# ------------------------------------------------------------------ Delta Lake through delta-rs


class DeltaBatchWriter:
    """foreachBatch writer: appends a micro-batch to a Delta table at most once.

    The Delta commit carries a transaction action (app id, version = batch id) together with the data, so it is
    atomic; a micro-batch that Spark runs again after a crash finds its version already there and is skipped.
    """

    def __init__(self, path: str, partition_by: list[str], app_id: str) -> None:
        self.path = path
        self.partition_by = partition_by
        self.app_id = app_id

    def committed_version(self) -> int | None:
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            return DeltaTable(self.path).transaction_version(self.app_id)
        except TableNotFoundError:
            return None

    def __call__(self, df, batch_id: int) -> None:
        from deltalake import CommitProperties, Transaction, write_deltalake

        done = self.committed_version()
        if done is not None and done >= batch_id:
            log.info("delta %s: batch %d already committed (version %d), skipped", self.path, batch_id, done)
            return
        table = df.toArrow()
        write_deltalake(
            self.path,
            table,
            mode="append",
            partition_by=self.partition_by,
            commit_properties=CommitProperties(app_transactions=[Transaction(app_id=self.app_id, version=batch_id)]),
        )
