"""Write sessions: one writer per source, each chunk written once, across gateway crashes and hops.

A client opens a session for a logical topic and a `source_id`; the gateway answers the partition the source is
pinned to, the session generation, and the **last seqno** written for the source. The client sends chunks with
rising seqnos (gaps allowed) from there; a chunk whose seqno is not above the last accepted one is answered
`skipped, already_written` and not written; any other chunk becomes one record with the `lb.*` headers and is
answered `written` with its partition and offset once the cluster acknowledged it (acks=all, idempotent producer).

Exactly once: the argument
--------------------------
Invariant (I): *when a session is opened, the last seqno it returns is at least the seqno of every record of the
source that is in the partition or can still land there, and at most the highest seqno actually written.*
With (I) a client that resends everything above the last seqno writes each seqno exactly once: nothing at or below
it is resent (no duplicate, by the first half), and nothing above it was written (no loss, by the second half,
since the client resends all of it).

Where a record of a source can be:

1. acknowledged: it is below the partition's high watermark (acks=all);
2. handed to a producer and not yet resolved: in the producer of the gateway process that accepted it;
3. refused or timed out after a failover (see below).

The open does, in order:

a. **Fence.** `take_ownership` bumps the source's generation in the store (one transaction) and returns the
   previous owner (gateway id and process incarnation). From this moment the previous owner's sessions are
   stale. Every write is checked, synchronously on the gateway's event loop, against the highest generation
   that gateway knows for the source, and counted as in flight in the same step.
b. **Make the previous owner's writes final (case 2).** The previous owner is
   - this process: its sessions are refused from now on (the local fence map), and the open waits until the
     source has nothing in flight;
   - an older incarnation of this gateway id, or an incarnation no longer registered: dead. One process per
     gateway id holds the data directory's lock, so a new incarnation means the old process is gone, and with
     it everything it had not yet handed to the cluster;
   - another live gateway: the new owner calls its `/internal/v1/release`; it raises its fence for the source
     (refusing new writes) and answers only when the source has nothing in flight — each produce resolves within
     the producer's delivery timeout, so this is bounded. An answer of "not this incarnation" or a refused
     connection means the old process is gone (an incarnation listens on its registered URL for its whole life);
   - unreachable for another reason (timeout, partition): the new owner waits until the old owner's heartbeat in
     the store is older than `lease_ms`. A gateway accepts writes only while its own last successful heartbeat is
     younger than lease_ms / 2, and delivery_timeout_ms < lease_ms / 2, so by then every write it accepted has
     resolved (clocks of the gateways' hosts are assumed to agree within the remaining margin).
c. **Recover (case 1).** With nothing of the source left in flight anywhere, every record of it is below the
   high watermark. Recovery reads the pinned partition from the seqno index's position to the high watermark
   (headers only), takes the highest `lb.seqno` of the source there, the index entry for the records below the
   position, and the pin's base seqno; the maximum is the last seqno. All three come from records that are in the
   log (or, for the base seqno, were acknowledged), so the value never exceeds what was written: (I) holds.
   When the previous owner is this very process and its state is intact, the in-memory last seqno (all of it
   acknowledged after the wait in b.) is used and the partition is not read.

Crash of a gateway (SIGKILL): its producer's in-flight requests die with it, except a request already handed to
the leader, which the leader appends within its request processing time. The restarted gateway's start-up takes
far longer than that, so its recovery sees the record; a hop to another gateway at the same millisecond could
miss it, and the pipeline's (source, seqno) dedup removes such a repeat.

Failover (case 3): when the pinned partition goes offline (no leader, or ISR < min.insync.replicas) the owner
re-pins the source to an online partition (pin generation + 1, compare-and-set in the store together with a
check of the session generation) with `base_seqno` = the highest seqno acknowledged so far, and resends every
record not yet acknowledged to the new partition in seqno order, before any newer chunk. A record whose outcome
on the old partition was unknown may then exist twice (once per partition): the pipeline drops the repeat by
(source, seqno). Recovery never reads the old partition again; the base seqno stands for it. If the old partition
cannot be read at an open (no leader), the index entry stands for it: the last seqno may then be too low, which can
only repeat a record, never lose one.

Order: records of a source are produced to one partition by one producer with idempotence, so they land in the
order they were accepted, which is rising seqno; a failover resends in seqno order before newer chunks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from logbus.gateway.errors import GatewayError
from logbus.gateway.kafka import DeliveryTarget, ProduceError
from logbus.gateway.store import Owner, Pin, TopicRecord

log = logging.getLogger("logbus.gateway.sessions")

# How long a broker that led a failed partition is avoided as a failover target (about a cluster session timeout,
# after which Metadata shows whether it is really gone).
SUSPECT_HOLD_S = 10.0


class Chunk:
    __slots__ = ("seqno", "data", "created_ms")

    def __init__(self, seqno: int, data: bytes, created_ms: int) -> None:
        self.seqno, self.data, self.created_ms = seqno, data, created_ms


class Batch:
    """The chunks accepted from one request or message; its future completes when all of them are resolved."""
    __slots__ = ("remaining", "future")

    def __init__(self, future: asyncio.Future) -> None:
        self.remaining = 0
        self.future = future


class PendingChunk:
    __slots__ = ("seqno", "value", "size", "headers", "attempt", "partition", "done", "offset", "error", "batch")

    def __init__(self, seqno: int, value: bytes, headers: list, batch: Batch) -> None:
        self.seqno = seqno
        self.value = value
        self.size = len(value)
        self.headers = headers
        self.batch = batch
        batch.remaining += 1
        self.attempt = 0
        self.partition = -1
        self.offset = -1
        self.done = False
        self.error: BaseException | None = None

    def resolve(self, partition: int, offset: int, error: BaseException | None) -> None:
        if self.done:
            return
        self.done = True
        self.partition, self.offset, self.error = partition, offset, error
        self.value = b""  # written or failed: the data is not needed any more
        b = self.batch
        b.remaining -= 1
        if b.remaining == 0 and not b.future.done():
            b.future.set_result(None)


class _Attempt(DeliveryTarget):
    """One produce of a pending chunk; the producer reports its outcome here."""
    __slots__ = ("manager", "st", "pc", "attempt", "partition")

    def __init__(self, manager: "SessionManager", st: "SourceState", pc: PendingChunk, attempt: int, partition: int) -> None:
        self.manager, self.st, self.pc, self.attempt, self.partition = manager, st, pc, attempt, partition

    def __call__(self, err, msg) -> None:
        if err is None:   # the common case, without the generic path's hops
            self.manager._acknowledged(self.st, self.pc, msg.partition(), msg.offset())
        else:
            DeliveryTarget.__call__(self, err, msg)

    def delivered(self, error, partition: int, offset: int) -> None:
        self.manager._delivered(self.st, self.pc, self.attempt, self.partition, error, partition, offset)


class OwnWrites:
    """What this gateway wrote to one partition and saw acknowledged since the last index run: per source the
    highest (seqno, offset), and the offsets in order. When those offsets fill the whole range from the index
    position on, this gateway was the partition's only writer there, and the index advances without reading the
    partition back. Delivery reports of one partition come in offset order; anything else voids the shortcut."""
    __slots__ = ("entries", "offsets", "ordered")

    def __init__(self) -> None:
        self.entries: dict[str, tuple[int, int]] = {}
        self.offsets: list[int] = []
        self.ordered = True

    def add(self, source: str, seqno: int, offset: int) -> None:
        offsets = self.offsets
        if offsets and offset <= offsets[-1]:
            self.ordered = False
        offsets.append(offset)
        prev = self.entries.get(source)
        if prev is None or seqno > prev[0]:
            self.entries[source] = (seqno, offset)

    def covered_end(self, position: int) -> int | None:
        """The end of [position, end) when every offset in it is a record written here, else None."""
        offsets = self.offsets
        if not self.ordered or not offsets or offsets[-1] < position:
            return None
        end = offsets[-1] + 1
        return end if len(offsets) - bisect_left(offsets, position) == end - position else None


@dataclass
class SourceState:
    topic: str                # physical topic
    source: str
    partition: int
    pin_generation: int
    generation: int
    last_seqno: int           # highest seqno accepted (written, or in flight)
    last_acked: int = -1      # highest seqno acknowledged by the cluster
    inflight: int = 0         # produce attempts not yet resolved
    pending: dict = field(default_factory=dict)   # seqno -> PendingChunk not yet resolved
    failing_over: bool = False
    broken: str | None = None
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    touched: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.idle.set()

    def quiet(self) -> bool:
        return self.inflight == 0 and not self.failing_over


@dataclass
class Session:
    session_id: str
    tenant: str
    topic: TopicRecord
    source: str
    generation: int
    host: bytes
    file: bytes
    type: bytes
    opened: float = field(default_factory=time.monotonic)
    used: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _key(topic: str, source: str) -> tuple[str, str]:
    return topic, source


class SessionManager:
    def __init__(self, gw: Any) -> None:
        self.gw = gw                     # the Gateway: config, store, producer, health, scanner, metrics
        self.cfg = gw.config
        self.sessions: dict[str, Session] = {}
        self.states: dict[tuple[str, str], SourceState] = {}
        self.fence: dict[tuple[str, str], int] = {}      # highest generation known per source
        self._open_locks: dict[tuple[str, str], asyncio.Lock] = {}
        self.own_writes: dict[tuple[str, int], OwnWrites] = {}   # since the last index run
        self.origin = gw.config.dc.encode()

    # -- opening ----------------------------------------------------------------------------------------------
    async def open(self, tenant: str, topic: TopicRecord, source: str, host: str, file: str, type_: str) -> dict:
        gw = self.gw
        t0 = time.monotonic()
        gw.check_writable()
        key = _key(topic.physical, source)
        lock = self._open_locks.setdefault(key, asyncio.Lock())
        async with lock:
            generation, prev = await gw.run_store(gw.store.take_ownership, topic.physical, source, gw.gateway_id, gw.incarnation)
            self.fence[key] = max(self.fence.get(key, 0), generation)
            st = self.states.get(key)
            fast = (st is not None and prev is not None and prev.incarnation == gw.incarnation
                    and prev.generation == st.generation and st.broken is None)
            if st is not None:
                await self._wait_quiet(st)
            if not (prev is None or prev.incarnation == gw.incarnation):
                await self._release_previous(prev, topic.physical, source, generation)
            if fast and st.broken is None and st.quiet():
                st.generation = generation
                last = st.last_seqno
                gw.metrics.session_opens.labels("memory").inc()
            else:
                pin = await self._pin(topic, source)
                pin, last = await self._recover(topic, source, pin, generation)
                st = SourceState(topic.physical, source, pin.partition, pin.pin_generation, generation, last, last)
                self.states[key] = st
                gw.metrics.session_opens.labels("recovered").inc()
            if self.fence.get(key, 0) != generation:
                raise GatewayError(409, "fenced", f"a newer session for source {source!r} was opened while this one was opening")
            sid = gw.peers.session_id()
            self.sessions[sid] = Session(sid, tenant, topic, source, generation, host.encode(), file.encode(), type_.encode())
            gw.metrics.session_open_seconds.observe(time.monotonic() - t0)
            return {"session_id": sid, "topic": topic.logical, "physical_topic": topic.physical, "source_id": source,
                    "partition": st.partition, "pin_generation": st.pin_generation, "generation": generation,
                    "last_seqno": st.last_seqno if st.last_seqno >= 0 else None}

    async def _wait_quiet(self, st: SourceState) -> None:
        deadline = self.cfg.delivery_timeout_ms / 1000 * 2 + 5
        try:
            while not st.quiet():
                st.idle.clear()
                await asyncio.wait_for(st.idle.wait(), deadline)
        except asyncio.TimeoutError:
            raise GatewayError(503, "busy", "the source's writes in flight did not finish in time; retry") from None

    async def _release_previous(self, prev: Owner, topic: str, source: str, generation: int) -> None:
        gw = self.gw
        if prev.gateway_id == gw.gateway_id:
            return  # an older incarnation of this gateway: that process is gone (we hold the data directory's lock)
        rec = await gw.run_store(gw.store.gateway, prev.gateway_id)
        if rec is None or rec.incarnation != prev.incarnation:
            return  # that process was replaced by a newer one of the same id: it is gone
        lease_s = self.cfg.lease_ms / 1000
        deadline = time.monotonic() + self.cfg.release_timeout_ms / 1000 + lease_s
        body = {"topic": topic, "source": source, "generation": generation, "incarnation": prev.incarnation}
        while True:
            try:
                async with gw.http.post(f"{rec.url}/internal/v1/release", json=body, headers=gw.internal_headers(),
                                        timeout=aiohttp.ClientTimeout(total=self.cfg.release_timeout_ms / 1000),
                                        ssl=gw.client_ssl) as resp:
                    if resp.status in (200, 410):
                        gw.metrics.releases.labels("released" if resp.status == 200 else "gone").inc()
                        return
                    log.warning("release of %s/%s by %s answered %d", topic, source, rec.gateway_id, resp.status)
            except aiohttp.ClientConnectorError as e:
                if isinstance(e.os_error, ConnectionRefusedError) or "refused" in str(e).lower():
                    gw.metrics.releases.labels("refused").inc()
                    return  # nothing listens at that incarnation's URL: it is gone
                log.warning("release call to %s failed: %s", rec.url, e)
            except (aiohttp.ClientError, asyncio.TimeoutError) as e:
                log.warning("release call to %s failed: %s", rec.url, e)
            rec2 = await gw.run_store(gw.store.gateway, prev.gateway_id)
            if rec2 is None or rec2.incarnation != prev.incarnation or rec2.heartbeat_ms + self.cfg.lease_ms < int(time.time() * 1000):
                gw.metrics.releases.labels("lease").inc()
                return
            if time.monotonic() > deadline:
                raise GatewayError(503, "previous_owner_unreachable",
                                   f"gateway {prev.gateway_id} holds source {source!r}, cannot be reached and its lease has not ended")
            await asyncio.sleep(0.5)

    async def release(self, topic: str, source: str, generation: int) -> dict:
        """Called by the new owner: refuse further writes of older generations and wait for those in flight."""
        key = _key(topic, source)
        self.fence[key] = max(self.fence.get(key, 0), generation)
        st = self.states.get(key)
        if st is not None:
            await self._wait_quiet(st)
        return {"released": True, "last_acked": st.last_acked if st else None}

    async def _pin(self, topic: TopicRecord, source: str) -> Pin:
        gw = self.gw
        pin = await gw.run_store(gw.store.pin, topic.physical, source)
        if pin is not None:
            return pin
        th = await gw.run_blocking(gw.health.ensure, topic.physical)
        counts = await gw.run_store(gw.store.pin_counts, topic.physical)
        online = th.online_partitions() or sorted(th.partitions)
        from logbus.gateway.kafka import stable_hash

        # Two choices by hash of the source id, the less loaded one wins: balanced even when many sources open
        # at once on several gateways (all reading the same counts), and stable for a given source.
        h = stable_hash(source)
        a, b = online[h % len(online)], online[(h // len(online) + 1) % len(online)]
        choice = min((a, b), key=lambda p: (counts.get(p, 0), p))
        return await gw.run_store(gw.store.create_pin, topic.physical, source, choice)

    async def _recover(self, topic: TopicRecord, source: str, pin: Pin, generation: int) -> tuple[Pin, int]:
        gw = self.gw
        t = topic.physical
        p = pin.partition
        th = await gw.run_blocking(gw.health.ensure, t)
        last = pin.base_seqno
        if th.partitions.get(p, (-1, ()))[0] >= 0:
            async with gw.index_lock(t, p):  # one scan per partition at a time; the next one reads only what is new
                # Position and entry come from one snapshot: the entry covers the source's records below the
                # position (they are saved together), and the scan covers the rest up to the high watermark.
                pos, entry = await gw.run_store(gw.store.index_lookup, t, p, source)
                low, high = await gw.run_blocking(gw.scanner.watermarks, t, p)
                start = max(pos, low)
                found = {}
                if high > start:
                    found = await gw.run_blocking(gw.scanner.scan_sources, t, p, start, high)
                    gw.metrics.recovery_records.inc(high - start)
                    await gw.run_store(gw.store.save_index, t, p, high, found)
            last = max(last, entry[0] if entry else -1, found[source][0] if source in found else -1)
            log.debug("recovered %s/%r on partition %d: index position %d, log [%d, %d), index entry %s, base %d -> last %d",
                      t, source, p, pos, low, high, entry, pin.base_seqno, last)
        else:
            entry = await gw.run_store(gw.store.index_entry, t, p, source)
            last = max(last, entry[0] if entry else -1)
            log.warning("partition %s[%d] of source %r has no leader: recovery uses the index and the pin's base seqno", t, p, source)
        if not th.online(p):
            online = th.failover_targets(p, gw.health.suspects())
            if online:
                new_p = online[(stable_hash_int(source) + pin.pin_generation) % len(online)]
                new = await gw.run_store(gw.store.repin, t, source, pin.pin_generation, new_p, last, generation)
                if new is None:
                    raise GatewayError(409, "fenced", f"a newer session for source {source!r} was opened")
                gw.metrics.failovers.labels("open").inc()
                log.warning("source %r: partition %s[%d] offline at open, re-pinned to %d (pin generation %d)", source, t, p, new_p, new.pin_generation)
                pin = new
        return pin, last

    # -- writing ----------------------------------------------------------------------------------------------
    def session(self, sid: str, tenant: str | None) -> Session:
        sess = self.sessions.get(sid)
        if sess is None:
            raise GatewayError(404, "unknown_session", "no such write session (it was closed, expired, or the gateway restarted): open a new one")
        if tenant is not None and sess.tenant != tenant:
            raise GatewayError(403, "forbidden", "the session belongs to another tenant")
        return sess

    def close(self, sid: str) -> None:
        self.sessions.pop(sid, None)

    async def write(self, sess: Session, chunks: list[Chunk]) -> list[dict]:
        """Accept chunks in order; answer per chunk once each is acknowledged (or skipped, or failed)."""
        async with sess.lock:
            waits = await self.accept(sess, chunks)
        return await self.collect(waits)

    async def accept(self, sess: Session, chunks: list[Chunk]) -> tuple[Batch, list]:
        """Accept chunks in order (awaits only while the producer's queue is full). Callers keep accept() calls
        of one session in order; `collect()` then waits for the answers."""
        gw = self.gw
        key = _key(sess.topic.physical, sess.source)
        sess.used = time.monotonic()
        batch = Batch(gw.loop.create_future())
        waits: list[tuple[str, Any]] = []
        self._check(sess, key)  # raises for the whole request: nothing accepted
        st = self.states[key]
        st.touched = sess.used
        src = sess.source.encode()
        key_bytes = src
        fixed = [("lb.host", sess.host), ("lb.file", sess.file), ("lb.type", sess.type), ("lb.origin", self.origin)]
        offline = gw.health_offline(st.topic, st.partition)
        skipped = 0
        recheck = False
        for ch in chunks:
            if recheck or st.broken or self.fence.get(key, 0) != sess.generation or self.states.get(key) is not st:
                recheck = False
                try:
                    self._check(sess, key)
                except GatewayError as e:
                    waits.append(("error", {"seqno": ch.seqno, "status": "error", "error": e.code, "message": e.message}))
                    continue
            seqno = ch.seqno
            if seqno <= st.last_seqno:
                pc = st.pending.get(seqno)
                if pc is not None:
                    waits.append(("dup", pc))
                else:
                    skipped += 1
                    waits.append(("done", {"seqno": seqno, "status": "skipped", "already_written": True}))
                continue
            st.last_seqno = seqno
            pc = PendingChunk(seqno, ch.data, [("lb.source", src), ("lb.seqno", b"%d" % seqno),
                                               ("lb.created", b"%d" % ch.created_ms), *fixed], batch)
            st.pending[seqno] = pc
            waits.append(("new", pc))
            if st.failing_over:
                continue  # the failover sends it after the records before it
            if offline:
                self._start_failover(st, st.partition)
                continue
            if not self._try_send(st, pc, key_bytes):
                await self._send(st, pc)  # the queue is full: wait for room (other coroutines run meanwhile)
                recheck = True
        if skipped:
            gw.metrics.chunks.labels("skipped").inc(skipped)
        if batch.remaining == 0 and not batch.future.done():
            batch.future.set_result(None)
        return batch, waits

    async def collect(self, accepted: tuple[Batch, list]) -> list[dict]:
        gw = self.gw
        batch, waits = accepted
        if not batch.future.done():
            await batch.future
        out = []
        written = nbytes = skipped = 0
        for kind, item in waits:
            if kind == "done" or kind == "error":
                out.append(item)
                continue
            pc = item
            if not pc.done:
                await pc.batch.future
            e = pc.error
            if e is not None:
                if isinstance(e, GatewayError):
                    out.append({"seqno": pc.seqno, "status": "error", "error": e.code, "message": e.message})
                else:
                    out.append({"seqno": pc.seqno, "status": "error", "error": "not_written", "message": str(e)})
            elif kind == "dup":
                skipped += 1
                out.append({"seqno": pc.seqno, "status": "skipped", "already_written": True})
            else:
                written += 1
                nbytes += pc.size
                out.append({"seqno": pc.seqno, "status": "written", "partition": pc.partition, "offset": pc.offset})
        if written:
            gw.metrics.chunks.labels("written").inc(written)
            gw.metrics.bytes_written.inc(nbytes)
        if skipped:
            gw.metrics.chunks.labels("skipped").inc(skipped)
        return out

    def _check(self, sess: Session, key) -> None:
        self.gw.check_writable()
        if self.fence.get(key, 0) != sess.generation:
            self.gw.metrics.fenced.inc()
            raise GatewayError(409, "fenced", f"a newer session for source {sess.source!r} was opened; this session is closed")
        st = self.states.get(key)
        if st is None or st.generation != sess.generation:
            raise GatewayError(409, "fenced", "this session is no longer the source's writer")
        if st.broken:
            raise GatewayError(503, "session_broken", f"a write of this source failed ({st.broken}); open a new session to resume from the last seqno")

    def _try_send(self, st: SourceState, pc: PendingChunk, key: bytes | None = None) -> bool:
        """Produce the chunk to the source's current partition now; False when the producer's queue is full."""
        pc.attempt += 1
        partition = st.partition
        pc.partition = partition
        try:
            self.gw.producer.produce_to(_Attempt(self, st, pc, pc.attempt, partition), st.topic, partition, pc.value,
                                        pc.headers, key or st.source.encode())
        except BufferError:
            pc.attempt -= 1
            return False
        except ProduceError as e:
            self._fail(st, pc, e)
            self._maybe_idle(st)
            return True
        if not st.inflight:
            st.idle.clear()
        st.inflight += 1
        return True

    async def _send(self, st: SourceState, pc: PendingChunk) -> None:
        """Produce when the producer's queue has room. While it waits the chunk counts as in flight (a release
        waits for it), and it is produced only if the source is still this gateway's to write."""
        st.inflight += 1
        st.idle.clear()
        try:
            deadline = time.monotonic() + self.cfg.delivery_timeout_ms / 1000
            while True:
                if self.fence.get(_key(st.topic, st.source), 0) != st.generation:
                    self._fail(st, pc, GatewayError(409, "fenced", "a newer session owns the source; the chunk was not written"))
                    return
                if self.gw.closing or time.monotonic() > self.gw.lease_ok_until:
                    self._fail(st, pc, GatewayError(503, "store_unavailable", "the gateway stopped accepting writes; the chunk was not written"))
                    return
                if self._try_send(st, pc):
                    return
                if time.monotonic() > deadline:
                    self._fail(st, pc, ProduceError("the producer's queue stayed full"))
                    return
                await asyncio.sleep(0.005)
        finally:
            st.inflight -= 1
            self._maybe_idle(st)

    def _acknowledged(self, st: SourceState, pc: PendingChunk, p: int, offset: int) -> None:
        """A produce attempt of the chunk was acknowledged at (p, offset); once per chunk on the hot path."""
        st.inflight -= 1
        seqno = pc.seqno
        own = self.own_writes.get((st.topic, p))
        if own is None:
            own = self.own_writes[(st.topic, p)] = OwnWrites()
        own.add(st.source, seqno, offset)
        if not pc.done:
            st.pending.pop(seqno, None)
            if seqno > st.last_acked:
                st.last_acked = seqno
            pc.resolve(p, offset, None)
        if not st.inflight and not st.failing_over:
            st.idle.set()

    def _delivered(self, st: SourceState, pc: PendingChunk, attempt: int, partition: int, error, p: int, offset: int) -> None:
        if error is None:
            self._acknowledged(st, pc, p, offset)
            return
        st.inflight -= 1
        if not pc.done and attempt == pc.attempt:
            if isinstance(error, ProduceError) and error.retriable_elsewhere and st.broken is None:
                self._start_failover(st, partition)
            else:
                self._fail(st, pc, error)
        self._maybe_idle(st)

    def _fail(self, st: SourceState, pc: PendingChunk, exc: BaseException) -> None:
        if pc.done:
            return
        st.pending.pop(pc.seqno, None)
        st.broken = st.broken or str(exc)
        self.gw.metrics.chunks.labels("failed").inc()
        pc.resolve(-1, -1, exc if isinstance(exc, (GatewayError, ProduceError)) else ProduceError(str(exc)))

    def _maybe_idle(self, st: SourceState) -> None:
        if st.quiet():
            st.idle.set()

    def _start_failover(self, st: SourceState, failed_partition: int) -> None:
        if st.failing_over or st.partition != failed_partition:
            # a failover is under way, or done already: resend this record to the current partition after it
            if not st.failing_over:
                for pc in sorted(st.pending.values(), key=lambda c: c.seqno):
                    if not pc.done and pc.partition == failed_partition:
                        asyncio.ensure_future(self._send(st, pc))
            return
        st.failing_over = True
        st.idle.clear()
        asyncio.ensure_future(self._failover(st, failed_partition))

    async def _failover(self, st: SourceState, old: int) -> None:
        gw = self.gw
        try:
            deadline = time.monotonic() + self.cfg.delivery_timeout_ms / 1000
            gw.health.suspect_leader_of(st.topic, old, SUSPECT_HOLD_S)
            new_p = None
            while new_p is None:
                try:
                    await gw.run_blocking(gw.health.refresh, [st.topic])
                except Exception as e:  # noqa: BLE001 - the cluster may be between states
                    log.warning("metadata refresh during failover failed: %s", e)
                th = gw.health.health(st.topic)
                online = th.failover_targets(old, gw.health.suspects()) if th else []
                if online:
                    new_p = online[(stable_hash_int(st.source) + st.pin_generation) % len(online)]
                    break
                if th is not None and th.online(old):
                    new_p = old  # it came back: resend there
                    break
                if time.monotonic() > deadline:
                    raise ProduceError(f"no online partition of {st.topic} to fail over to")
                await asyncio.sleep(0.5)
            if new_p != old:
                pin = await gw.run_store(gw.store.repin, st.topic, st.source, st.pin_generation, new_p, st.last_acked, st.generation)
                if pin is None:
                    raise GatewayError(409, "fenced", "a newer session owns the source; the failover was abandoned")
                log.warning("source %r: partition %s[%d] offline, re-pinned to %d (pin generation %d, base seqno %d)",
                            st.source, st.topic, old, new_p, pin.pin_generation, st.last_acked)
                gw.metrics.failovers.labels("write").inc()
                st.partition, st.pin_generation = pin.partition, pin.pin_generation
            for pc in sorted(st.pending.values(), key=lambda c: c.seqno):
                if not pc.done:
                    await self._send(st, pc)
        except (GatewayError, ProduceError) as e:
            for pc in list(st.pending.values()):
                self._fail(st, pc, e)
            st.broken = st.broken or str(e)
        except Exception as e:  # noqa: BLE001 - never leave a source stuck in failover
            log.exception("failover of %r failed", st.source)
            for pc in list(st.pending.values()):
                self._fail(st, pc, ProduceError(f"failover failed: {e}"))
            st.broken = st.broken or f"failover failed: {e}"
        finally:
            st.failing_over = False
            self._maybe_idle(st)

    # -- housekeeping -----------------------------------------------------------------------------------------
    def check_partitions(self) -> None:
        """Start a failover for sources with records pending on a partition that went offline."""
        for st in list(self.states.values()):
            if st.pending and not st.failing_over and self.gw.health_offline(st.topic, st.partition):
                self._start_failover(st, st.partition)

    def drop_all(self) -> None:
        """Forget every session (after the lease lapsed): later writes of these sessions get 404. The source states
        are kept, marked broken, so a reopen here still waits for their writes in flight, then recovers."""
        self.sessions.clear()
        for st in self.states.values():
            st.broken = st.broken or "the gateway's lease lapsed"

    def active_topics(self) -> list[str]:
        return sorted({st.topic for st in self.states.values()})

    def expire(self, idle_s: float) -> None:
        now = time.monotonic()
        for sid, sess in list(self.sessions.items()):
            if now - sess.used > idle_s:
                del self.sessions[sid]
        live = {_key(s.topic.physical, s.source) for s in self.sessions.values()}
        for key, st in list(self.states.items()):
            if key not in live and st.quiet() and not st.pending and now - st.touched > idle_s:
                del self.states[key]
                self._open_locks.pop(key, None)

    async def drain(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for st in list(self.states.values()):
            while not st.quiet() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)


def stable_hash_int(text: str) -> int:
    from logbus.gateway.kafka import stable_hash

    return stable_hash(text)
