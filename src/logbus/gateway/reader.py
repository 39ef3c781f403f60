"""The read API: pull by partition and offset, read sessions with committed offsets, push delivery.

Every read goes through `PartitionReader.read`, which applies the batch-transaction rule in offset order:

- commit markers (`lb.commit`) are never delivered;
- a record of a transaction (`lb.txn`) is delivered when the transaction's marker is in the same partition after
  it, with a bus timestamp at most `txn_window_ms` later than the record's; it is skipped when no such marker
  exists and either a marker came too late or `txn_window_ms` (+ 5 s for clock differences) has passed since the
  record's timestamp; otherwise it is **undecided**, and the read stops just before it (`next_offset` is its
  offset), so a later read decides it. An uncommitted transaction thus holds its partition's readers back for at
  most the window — Logbroker's readers work the same way, with a 60 s window;
- everything else is delivered as it is.

Decisions depend only on the log and the clock, so rereading from an offset gives the same records. Markers are
found by scanning ahead of the record (headers only) and remembered per partition.

Read sessions (`consumer` names) keep their position in memory and commit offsets as Kafka group offsets
(group `lb.<tenant>.<consumer>`), so any Kafka tool sees them; a new read session for the same consumer closes
the older one on this gateway. Push delivery runs one task per subscription on every gateway that knows it: it
reads from the group's committed offsets, POSTs batches as JSON to the endpoint, commits after a 2xx answer and
retries anything else with exponential backoff (`push_backoff_ms` doubling up to `push_backoff_max_ms`) — never
skipping. Delivery to the endpoint is at least once; every record carries (partition, offset) and
(source, seqno), so the endpoint can drop a repeat.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from confluent_kafka import Consumer, TopicPartition

from logbus.gateway.errors import GatewayError
from logbus.gateway.kafka import ScannedRecord
from logbus.gateway.store import PushRecord, TopicRecord

log = logging.getLogger("logbus.gateway.reader")

CLOCK_MARGIN_MS = 5000


def record_json(r: ScannedRecord, partition: int, base64_data: bool = False) -> dict:
    h = r.headers
    out: dict[str, Any] = {"partition": partition, "offset": r.offset, "timestamp": r.timestamp}
    for name, key in (("source", "lb.source"), ("host", "lb.host"), ("file", "lb.file"), ("type", "lb.type"),
                      ("origin", "lb.origin"), ("txn", "lb.txn"), ("src", "lb.src")):
        if key in h:
            out[name] = h[key]
    for name, key in (("seqno", "lb.seqno"), ("created", "lb.created")):
        if key in h:
            try:
                out[name] = int(h[key])
            except ValueError:
                out[name] = h[key]
    value = r.value or b""
    if not base64_data:
        try:
            out["data"] = value.decode("utf-8")
            return out
        except UnicodeDecodeError:
            pass
    out["data_b64"] = base64.b64encode(value).decode()
    return out


class PartitionReader:
    def __init__(self, gw: Any) -> None:
        self.gw = gw
        self.window_ms = gw.config.txn_window_ms
        # (topic, partition) -> OrderedDict txn -> (marker offset, marker timestamp); and how far markers are known
        self._markers: dict[tuple[str, int], OrderedDict] = {}
        self._covered: dict[tuple[str, int], tuple[int, int]] = {}   # offsets whose markers are all known

    def _scan_markers(self, topic: str, partition: int, start: int, upto: int) -> None:
        """Make the known markers cover [start, upto): scan what the covered range [lo, hi) does not hold."""
        key = (topic, partition)
        known = self._markers.setdefault(key, OrderedDict())
        lo, hi = self._covered.get(key, (0, 0))
        if lo <= start <= hi:
            pos, new_range = hi, (lo, max(hi, upto))
        else:  # before or past the covered range: cover from start (the old range is forgotten, not trusted)
            pos, new_range = start, (start, upto)
        while pos < upto:
            recs, nxt, _ = self.gw.scanner.read(topic, partition, pos, 8 * 1024 * 1024, 0.0, stop_at=upto)
            if not recs:
                new_range = (new_range[0], pos)
                break
            for r in recs:
                if "lb.commit" in r.headers and "lb.txn" in r.headers:
                    known.setdefault(r.headers["lb.txn"], (r.offset, r.timestamp))
            pos = nxt
        self._covered[key] = new_range
        while len(known) > 100_000:
            known.popitem(last=False)

    def _decide(self, topic: str, partition: int, r: ScannedRecord, high: int) -> str:
        txn = r.headers["lb.txn"]
        key = (topic, partition)
        marker = self._markers.get(key, {}).get(txn)
        lo, hi = self._covered.get(key, (0, 0))
        if marker is None and not (lo <= r.offset and hi >= high):
            self._scan_markers(topic, partition, r.offset, high)
            marker = self._markers.get(key, {}).get(txn)
        if marker is not None and marker[0] > r.offset:
            return "deliver" if marker[1] - r.timestamp <= self.window_ms else "skip"
        if time.time() * 1000 > r.timestamp + self.window_ms + CLOCK_MARGIN_MS:
            return "skip"
        return "wait"

    def read(self, topic: str, partition: int, offset: int, max_bytes: int, wait_s: float) -> dict:
        """Blocking: records from offset (txn rule applied), next_offset, high_watermark."""
        deadline = time.monotonic() + wait_s
        while True:
            recs, nxt, high = self.gw.scanner.read(topic, partition, offset, max_bytes, max(0.0, deadline - time.monotonic()))
            out: list[ScannedRecord] = []
            for r in recs:
                if "lb.commit" in r.headers:
                    continue
                if "lb.txn" in r.headers:
                    d = self._decide(topic, partition, r, high)
                    if d == "wait":
                        nxt = r.offset
                        break
                    if d == "skip":
                        continue
                out.append(r)
            if out or time.monotonic() >= deadline or (recs and nxt == offset):
                return {"records": out, "next_offset": nxt, "high_watermark": high}
            if nxt > offset:
                offset = nxt  # only markers or skipped records: keep reading within the wait
            else:
                time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))


@dataclass
class ReadSession:
    session_id: str
    tenant: str
    consumer: str
    topic: TopicRecord
    physical: str
    group: str
    positions: dict[int, int]
    used: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    closed: bool = False


def group_name(tenant: str, consumer: str) -> str:
    return f"lb.{tenant}.{consumer}"


class ReadSessions:
    def __init__(self, gw: Any) -> None:
        self.gw = gw
        self.sessions: dict[str, ReadSession] = {}
        self.by_consumer: dict[tuple[str, str, str], str] = {}

    def _group_consumer(self, group: str) -> Consumer:
        return Consumer({"bootstrap.servers": self.gw.config.bootstrap_servers, "group.id": group,
                         "enable.auto.commit": False})

    def committed(self, group: str, topic: str, partitions: list[int]) -> dict[int, int]:
        c = self._group_consumer(group)
        try:
            tps = c.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
            out = {}
            for tp in tps:
                if tp.offset >= 0:
                    out[tp.partition] = tp.offset
                else:
                    out[tp.partition] = c.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=10)[0]
            return out
        finally:
            c.close()

    def commit(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        c = self._group_consumer(group)
        try:
            c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
        finally:
            c.close()

    async def open(self, tenant: str, topic: TopicRecord, physical: str, consumer: str) -> dict:
        gw = self.gw
        th = await gw.run_blocking(gw.health.ensure, physical)
        group = group_name(tenant, consumer)
        positions = await gw.run_blocking(self.committed, group, physical, sorted(th.partitions))
        key = (tenant, consumer, physical)
        old = self.by_consumer.get(key)
        if old in self.sessions:
            self.sessions.pop(old).closed = True
        sid = gw.peers.session_id()
        self.sessions[sid] = ReadSession(sid, tenant, consumer, topic, physical, group, positions)
        self.by_consumer[key] = sid
        return {"session_id": sid, "consumer": consumer, "topic": topic.logical, "physical_topic": physical,
                "offsets": {str(p): o for p, o in sorted(positions.items())}}

    def get(self, sid: str, tenant: str | None) -> ReadSession:
        rs = self.sessions.get(sid)
        if rs is None:
            raise GatewayError(404, "unknown_session", "no such read session (closed, replaced by a newer one, or the gateway restarted)")
        if tenant is not None and rs.tenant != tenant:
            raise GatewayError(403, "forbidden", "the read session belongs to another tenant")
        return rs

    async def read(self, rs: ReadSession, max_bytes: int, wait_s: float, b64: bool) -> dict:
        gw = self.gw
        rs.used = time.monotonic()
        async with rs.lock:
            deadline = time.monotonic() + wait_s
            while True:
                records: list[dict] = []
                budget = max_bytes
                for p in sorted(rs.positions):
                    if budget <= 0:
                        break
                    res = await gw.run_blocking(gw.reader.read, rs.physical, p, rs.positions[p], budget, 0.0)
                    for r in res["records"]:
                        records.append(record_json(r, p, b64))
                        budget -= r.size
                    rs.positions[p] = res["next_offset"]
                if records or time.monotonic() >= deadline:
                    return {"records": records, "offsets": {str(p): o for p, o in sorted(rs.positions.items())}}
                await asyncio.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    async def commit_offsets(self, rs: ReadSession, offsets: dict[int, int] | None) -> dict:
        offsets = dict(rs.positions) if offsets is None else offsets
        unknown = set(offsets) - set(rs.positions)
        if unknown:
            raise GatewayError(422, "invalid", f"partitions {sorted(unknown)} are not part of the topic")
        await self.gw.run_blocking(self.commit, rs.group, rs.physical, offsets)
        return {"committed": {str(p): o for p, o in sorted(offsets.items())}}

    def close(self, sid: str) -> None:
        rs = self.sessions.pop(sid, None)
        if rs is not None:
            rs.closed = True


class PushDelivery:
    """One task per push subscription; see the module docstring."""

    def __init__(self, gw: Any) -> None:
        self.gw = gw
        self.tasks: dict[str, asyncio.Task] = {}
        self.status: dict[str, dict] = {}

    def start(self, rec: PushRecord) -> None:
        if rec.push_id not in self.tasks:
            self.status[rec.push_id] = {"delivered": 0, "attempts": 0, "failures": 0, "last_error": None}
            self.tasks[rec.push_id] = asyncio.ensure_future(self._run(rec))

    def stop(self, push_id: str) -> None:
        t = self.tasks.pop(push_id, None)
        if t is not None:
            t.cancel()

    async def stop_all(self) -> None:
        for pid in list(self.tasks):
            self.stop(pid)

    async def _run(self, rec: PushRecord) -> None:
        gw = self.gw
        cfg = gw.config
        st = self.status[rec.push_id]
        tenant, ns, name = rec.topic.split("/")
        physical = f"{cfg.dc}.{tenant}.{ns}.{name}"
        group = group_name(rec.tenant, rec.consumer)
        positions: dict[int, int] | None = None
        while True:
            try:
                if positions is None:
                    th = await gw.run_blocking(gw.health.ensure, physical)
                    positions = await gw.run_blocking(gw.reads.committed, group, physical, sorted(th.partitions))
                sent = False
                for p in sorted(positions):
                    res = await gw.run_blocking(gw.reader.read, physical, p, positions[p], 1024 * 1024, 0.0)
                    recs = res["records"][: cfg.push_batch_records]
                    if not recs:
                        if res["next_offset"] > positions[p]:
                            positions[p] = res["next_offset"]
                            await gw.run_blocking(gw.reads.commit, group, physical, {p: positions[p]})
                        continue
                    nxt = recs[-1].offset + 1 if len(recs) < len(res["records"]) else res["next_offset"]
                    body = {"push_id": rec.push_id, "topic": rec.topic, "consumer": rec.consumer, "partition": p,
                            "records": [record_json(r, p) for r in recs], "next_offset": nxt}
                    await self._deliver(rec, body, st)
                    positions[p] = nxt
                    await gw.run_blocking(gw.reads.commit, group, physical, {p: nxt})
                    st["delivered"] += len(recs)
                    gw.metrics.push.labels("delivered").inc(len(recs))
                    sent = True
                if not sent:
                    await asyncio.sleep(0.2)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - keep the subscription alive; start again from committed offsets
                log.warning("push %s: %s; restarting from the committed offsets", rec.push_id, e)
                st["last_error"] = str(e)
                positions = None
                await asyncio.sleep(1.0)

    async def _deliver(self, rec: PushRecord, body: dict, st: dict) -> None:
        cfg = self.gw.config
        delay = cfg.push_backoff_ms / 1000
        while True:
            st["attempts"] += 1
            try:
                async with self.gw.http.post(rec.url, json=body, timeout=aiohttp.ClientTimeout(total=cfg.push_timeout_ms / 1000)) as resp:
                    if 200 <= resp.status < 300:
                        return
                    st["last_error"] = f"HTTP {resp.status}"
            except (aiohttp.ClientError, asyncio.TimeoutError) as e:
                st["last_error"] = f"{type(e).__name__}: {e}"
            st["failures"] += 1
            self.gw.metrics.push.labels("failed_attempt").inc()
            await asyncio.sleep(delay)
            delay = min(delay * 2, cfg.push_backoff_max_ms / 1000)
