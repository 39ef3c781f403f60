"""Settings of the delivery job `logbus deliver`: defaults < TOML file < LOGBUS_DELIVER_* environment < flags.

Kept free of Spark imports so that `logbus --help` and `logbus deliver --help` stay fast.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from logbus.settings import coerce_scalar, load_layered

# name -> help text (also used for `logbus deliver --help` and the README).
DELIVER_SETTINGS_DOC: dict[str, str] = {
    "bootstrap_servers": "Cluster to read (host:port[,host:port]); used when no --cluster is given.",
    "clusters": "Clusters by data centre, DC=host:port[,host:port] (repeatable); with --topic they decide where each DC prefix is read.",
    "local_dc": "The data centre this job runs in. If it has a cluster, every prefix is read there; otherwise each prefix is read from the cluster of the data centre where it originated.",
    "topics": "Logical topics tenant/namespace/topic (repeatable; `*` matches any one part); read as {dc}.{tenant}.{namespace}.{topic}.",
    "subscribe": "Physical topics to read, comma-separated (Spark's Kafka `subscribe`).",
    "subscribe_pattern": "Regular expression of physical topics to read (Spark's Kafka `subscribePattern`).",
    "lake": "Path of the lake table (a directory, or any Hadoop-compatible filesystem URL).",
    "quarantine": "Path of the quarantine table for malformed records (default: <lake>-quarantine).",
    "checkpoint": "Spark checkpoint directory: source offsets, state and the sink's commit log (default: <lake>/_checkpoint).",
    "format": "Lake table format: parquet (Spark's file sink) or delta (Delta Lake through delta-rs, idempotent by batch id).",
    "trigger": "Micro-batch interval, e.g. '1 second', '30 seconds' (processing-time trigger).",
    "available_now": "Catch up with everything available at start, then stop (Spark's Trigger.AvailableNow).",
    "commit_window_s": "Records of a batch transaction are kept only if its commit marker arrives within this many seconds (bus time) of them.",
    "dedup_window_s": "How long a (source, seqno) pair is remembered to drop its repeats, in seconds (of bus time and of processing time).",
    "starting_offsets": "Where a new query starts: earliest, latest or per-partition JSON {\"topic\":{\"0\":23,\"1\":-2}} (-2 earliest, -1 latest).",
    "max_offsets_per_trigger": "Most records read per micro-batch, split over partitions by lag (Spark's maxOffsetsPerTrigger).",
    "max_bytes_per_trigger": "Most bytes read per micro-batch, estimated from sampled record sizes.",
    "fail_on_data_loss": "Fail the query when offsets it must read are gone (retention, deleted topics); when false, skip and report them.",
    "client_rack": "Rack of this reader (client.rack), so that a cluster with follower fetching serves it from a replica in its rack.",
    "master": "Spark master: local[N,F] (N threads, F attempts per task) or a cluster URL (spark://..., yarn, k8s://...).",
    "shuffle_partitions": "spark.sql.shuffle.partitions for the dedup and transaction state (fixed for the life of a checkpoint).",
    "source_options": "Extra options for the logbus source, KEY=VALUE (repeatable); kafka.* options go to the Kafka consumer.",
    "spark_conf": "Extra Spark settings, KEY=VALUE (repeatable).",
    "json": "Print progress as JSON lines instead of text.",
    "stop_after_s": "Stop the job cleanly after this many seconds (0: run until stopped).",
}


@dataclass
class DeliverConfig:
    bootstrap_servers: str | None = None
    clusters: dict[str, str] = field(default_factory=dict)
    local_dc: str | None = None
    topics: list[str] = field(default_factory=list)
    subscribe: str | None = None
    subscribe_pattern: str | None = None
    lake: str = ""
    quarantine: str | None = None
    checkpoint: str | None = None
    format: str = "parquet"
    trigger: str = "1 second"
    available_now: bool = False
    commit_window_s: float = 60.0
    dedup_window_s: float = 600.0
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    client_rack: str | None = None
    master: str = "local[*,4]"   # a failed task is retried, as on a cluster (spark.task.maxFailures)
    shuffle_partitions: int = 4
    source_options: dict[str, str] = field(default_factory=dict)
    spark_conf: dict[str, str] = field(default_factory=dict)
    json: bool = False
    stop_after_s: float = 0.0

    @property
    def quarantine_path(self) -> str:
        return self.quarantine or self.lake.rstrip("/") + "-quarantine"

    @property
    def checkpoint_path(self) -> str:
        return self.checkpoint or self.lake.rstrip("/") + "/_checkpoint"

    @classmethod
    def load(cls, toml_path: Path | None = None, env: dict[str, str] | None = None, **overrides: Any) -> "DeliverConfig":
        config = load_layered(cls, "deliver", "LOGBUS_DELIVER_", _coerce, toml_path, env, overrides,
                              unset=lambda v: v is None or v == [] or v == {})
        config.validate()
        return config

    def validate(self) -> None:
        if not self.lake:
            raise ValueError("--lake is required: the path of the lake table")
        if self.format not in ("parquet", "delta"):
            raise ValueError(f"format must be parquet or delta, not {self.format!r}")
        chosen = [n for n, v in (("--topic", self.topics), ("--subscribe", self.subscribe), ("--subscribe-pattern", self.subscribe_pattern)) if v]
        if len(chosen) != 1:
            raise ValueError("give exactly one of --topic, --subscribe, --subscribe-pattern" + (f" (got {', '.join(chosen)})" if chosen else ""))
        if not self.clusters and not self.bootstrap_servers:
            raise ValueError("give --bootstrap-server, or --cluster DC=HOST:PORT for each data centre")
        if self.clusters and not self.topics:
            raise ValueError("--cluster needs logical topics (--topic tenant/namespace/topic)")
        if self.commit_window_s <= 0 or self.dedup_window_s <= 0:
            raise ValueError("commit and dedup windows must be positive")
        if self.shuffle_partitions <= 0:
            raise ValueError("shuffle partitions must be positive")


def _coerce(name: str, current: Any, value: Any) -> Any:
    if name in ("clusters", "source_options", "spark_conf"):
        if isinstance(value, dict):
            return {str(k): str(v) for k, v in value.items()}
        items = value if isinstance(value, list) else [p for p in str(value).split(";") if p.strip()]
        return dict(_key_value(name, item) for item in items)
    if name == "topics":
        if isinstance(value, list):
            return [str(v) for v in value]
        return [t.strip() for t in str(value).split(",") if t.strip()]
    if name in ("max_offsets_per_trigger", "max_bytes_per_trigger"):
        if value in (None, ""):
            return None
        n = _int(name, value)
        if n <= 0:
            raise ValueError(f"{name} must be positive, not {value!r}")
        return n
    return coerce_scalar(name, current, value)


def _int(name: str, value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an integer, not {value!r}") from None


def _key_value(name: str, item: str) -> tuple[str, str]:
    key, sep, val = str(item).partition("=")
    if not sep or not key.strip():
        raise ValueError(f"{name} entries must be KEY=VALUE, not {item!r}")
    return key.strip(), val.strip()


def add_deliver_arguments(p: argparse.ArgumentParser) -> None:
    d = DELIVER_SETTINGS_DOC
    p.add_argument("--config", metavar="FILE", help="TOML file with deliver settings (names as below, with underscores)")
    src = p.add_argument_group("what to read")
    src.add_argument("--bootstrap-server", dest="bootstrap_servers", metavar="HOST:PORT", help=d["bootstrap_servers"])
    src.add_argument("--cluster", dest="clusters", action="append", default=[], metavar="DC=HOST:PORT", help=d["clusters"])
    src.add_argument("--local-dc", metavar="DC", help=d["local_dc"])
    src.add_argument("--topic", dest="topics", action="append", default=[], metavar="TENANT/NAMESPACE/TOPIC", help=d["topics"])
    src.add_argument("--subscribe", metavar="TOPICS", help=d["subscribe"])
    src.add_argument("--subscribe-pattern", metavar="REGEX", help=d["subscribe_pattern"])
    src.add_argument("--starting-offsets", metavar="WHERE", help=d["starting_offsets"] + " (default earliest)")
    src.add_argument("--max-offsets-per-trigger", type=int, metavar="N", help=d["max_offsets_per_trigger"])
    src.add_argument("--max-bytes-per-trigger", type=int, metavar="BYTES", help=d["max_bytes_per_trigger"])
    src.add_argument("--fail-on-data-loss", action=argparse.BooleanOptionalAction, default=None, help=d["fail_on_data_loss"] + " (default true)")
    src.add_argument("--client-rack", metavar="RACK", help=d["client_rack"])
    src.add_argument("--source-option", dest="source_options", action="append", default=[], metavar="KEY=VALUE", help=d["source_options"])
    out = p.add_argument_group("where to write")
    out.add_argument("--lake", metavar="PATH", help=d["lake"] + " Required.")
    out.add_argument("--quarantine", metavar="PATH", help=d["quarantine"])
    out.add_argument("--checkpoint", metavar="DIR", help=d["checkpoint"])
    out.add_argument("--format", choices=["parquet", "delta"], help=d["format"] + " (default parquet)")
    run = p.add_argument_group("how to run")
    run.add_argument("--trigger", metavar="INTERVAL", help=d["trigger"] + " (default '1 second')")
    run.add_argument("--available-now", action="store_true", default=None, help=d["available_now"])
    run.add_argument("--commit-window", dest="commit_window_s", type=float, metavar="SECONDS", help=d["commit_window_s"] + " (default 60)")
    run.add_argument("--dedup-window", dest="dedup_window_s", type=float, metavar="SECONDS", help=d["dedup_window_s"] + " (default 600)")
    run.add_argument("--master", metavar="URL", help=d["master"] + " (default local[*,4]; LOGBUS_DELIVER_MASTER)")
    run.add_argument("--shuffle-partitions", type=int, metavar="N", help=d["shuffle_partitions"] + " (default 4)")
    run.add_argument("--conf", dest="spark_conf", action="append", default=[], metavar="KEY=VALUE", help=d["spark_conf"])
    run.add_argument("--json", action="store_true", default=None, help=d["json"])
    run.add_argument("--stop-after", dest="stop_after_s", type=float, metavar="SECONDS", help=d["stop_after_s"])


def config_from_args(args: argparse.Namespace) -> DeliverConfig:
    names = {f.name for f in fields(DeliverConfig)}
    overrides = {k: v for k, v in vars(args).items() if k in names}
    return DeliverConfig.load(Path(args.config) if getattr(args, "config", None) else None, **overrides)
