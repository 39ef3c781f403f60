"""Prometheus metrics of the gateway, served at /metrics (names start with `logbus_gateway_`).

With several workers (logbus.gateway.workers) each worker writes its values to files in the directory named by
PROMETHEUS_MULTIPROC_DIR, which the supervisor sets, and /metrics on any worker sums all of them: counters and
histograms over every worker that ever ran, gauges over the live ones (prometheus_client's multiprocess mode).
"""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.multiprocess import MultiProcessCollector


class GatewayMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        p = "logbus_gateway_"
        self.http = Counter(p + "http_requests", "HTTP requests by route, method and status", ["route", "method", "status"], registry=r)
        self.chunks = Counter(p + "chunks", "Write-session chunks by outcome (written, skipped, failed)", ["outcome"], registry=r)
        self.bytes_written = Counter(p + "written_bytes", "Data bytes of chunks written through write sessions", registry=r)
        self.session_opens = Counter(p + "session_opens", "Write sessions opened, by how the last seqno was found (memory, recovered)", ["path"], registry=r)
        self.session_open_seconds = Histogram(p + "session_open_seconds", "Time to open a write session (fencing and recovery)",
                                              buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=r)
        self.recovery_records = Counter(p + "recovery_records", "Records read from partitions to recover last seqnos", registry=r)
        self.fenced = Counter(p + "fenced_writes", "Writes refused because a newer session owns the source", registry=r)
        self.releases = Counter(p + "releases", "Previous owners made final at a session open, by outcome (released, gone, refused, lease)", ["outcome"], registry=r)
        self.failovers = Counter(p + "failovers", "Sources re-pinned to another partition (at open, or while writing)", ["where"], registry=r)
        self.txn = Counter(p + "batch_operations", "Batch-transaction calls (store, commit_request, commit)", ["op"], registry=r)
        self.push = Counter(p + "push_records", "Push delivery: records delivered and failed attempts", ["outcome"], registry=r)
        self.sourceless = Counter(p + "sourceless_records", "Records written without a source", registry=r)
        self.index_records = Counter(p + "index_records", "Records the background seqno indexer added to the index, by how: "
                                     "read_back (read from the partition) or own_writes (this gateway's acknowledged writes "
                                     "filled the range)", ["how"], registry=r)
        self.forwarded = Counter(p + "forwarded_requests", "Requests for a session held by another gateway, forwarded there, by "
                                 "the answer's status (or unreachable)", ["status"], registry=r)
        self.write_sessions = Gauge(p + "write_sessions", "Open write sessions", multiprocess_mode="livesum", registry=r)
        self.read_sessions = Gauge(p + "read_sessions", "Open read sessions", multiprocess_mode="livesum", registry=r)
        self.in_flight = Gauge(p + "producer_in_flight", "Records handed to the producer and not yet acknowledged",
                              multiprocess_mode="livesum", registry=r)

    def collected(self) -> CollectorRegistry:
        """What /metrics serves: this process's registry, or every worker's values in multiprocess mode."""
        directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if not directory:
            return self.registry
        registry = CollectorRegistry()
        MultiProcessCollector(registry, directory)
        return registry
