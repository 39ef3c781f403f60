"""The gateway's side of the Kafka protocol, on confluent-kafka only (so it runs against Apache Kafka too).

- `GatewayProducer`: one idempotent producer (acks=all, enable.idempotence) per gateway process; `produce()`
  returns an asyncio future of (partition, offset). Delivery reports are collected on the producer's poll
  thread and handed to the event loop in batches.
- `ClusterHealth`: partition leaders and ISRs (Metadata) and min.insync.replicas (DescribeConfigs), refreshed
  periodically; a partition is offline when it has no leader or its ISR is smaller than min.insync.replicas.
- `PartitionScanner`: reads a partition range with assign() (recovery, the seqno index and the read API).
- `SourcelessWriter`: writes without a source id. It uses the failover producer of `logbus.client` when that
  package provides one, else a small fallback that picks an online partition itself and re-sends refused records.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

log = logging.getLogger("logbus.gateway")


class ProduceError(Exception):
    """A record was not acknowledged; `retriable_elsewhere` when another partition may take it."""

    def __init__(self, message: str, code: int | None = None, retriable_elsewhere: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.retriable_elsewhere = retriable_elsewhere


# Errors after which the partition, not the record, is the problem: a failover may help.
_PARTITION_ERRORS = {
    KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND, KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError._MSG_TIMED_OUT, KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT,
    KafkaError.KAFKA_STORAGE_ERROR, KafkaError._TRANSPORT, KafkaError.UNKNOWN_TOPIC_OR_PART,
}


class GatewayProducer:
    def __init__(self, bootstrap: str, delivery_timeout_ms: int, linger_ms: int, compression: str, extra: dict | None = None) -> None:
        config = {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "message.timeout.ms": delivery_timeout_ms,
            "request.timeout.ms": min(5000, delivery_timeout_ms),
            "linger.ms": linger_ms,
            "compression.type": compression,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
            "batch.size": 1_000_000,
            "topic.metadata.refresh.interval.ms": 5000,
        }
        config.update(extra or {})
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self._producer = Producer(config)
        self._poll = self._producer.poll
        self._task: asyncio.Task | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._task = loop.create_task(self._serve_reports())

    async def _serve_reports(self) -> None:
        """Delivery reports are served on the event loop: each record's callback resolves it right there. (A poll
        thread handing reports over to the loop cost more CPU than the reports, in GIL hand-offs and wake-ups.)
        Every millisecond while records are in flight, every 10 ms otherwise."""
        producer, poll, sleep = self._producer, self._poll, asyncio.sleep
        while True:
            try:
                poll(0)
            except Exception:   # a delivery callback raised: log it, keep serving the others
                log.exception("delivery report handling failed")
            await sleep(0.001 if len(producer) else 0.01)

    def produce_to(self, target: "DeliveryTarget", topic: str, partition: int, value: bytes, headers: list,
                   key: bytes | None = None, timestamp_ms: int = 0) -> None:
        """Hand one record to the producer without waiting; `target.delivered(error, partition, offset)` is called
        on the event loop when it is resolved (error None, or a ProduceError). Timestamp 0: the produce time.
        Raises BufferError when the local queue is full, ProduceError when the record is refused at once."""
        try:
            self._producer.produce(topic, value, key, partition, target, timestamp=timestamp_ms, headers=headers)
        except KafkaException as e:
            err = e.args[0]
            raise ProduceError(f"produce refused: {err.str()}", err.code()) from None

    async def produce(self, topic: str, partition: int, value: bytes, headers: list, timestamp_ms: int = 0,
                      key: bytes | None = None) -> asyncio.Future:
        """Hand one record to the producer; the returned future gives (partition, offset) or raises ProduceError.
        Waits while the local queue is full, bounded by the delivery timeout."""
        fut = asyncio.get_running_loop().create_future()
        deadline = None
        while True:
            try:
                self.produce_to(_FutureTarget(fut), topic, partition, value, headers, key, timestamp_ms)
                return fut
            except BufferError:  # the local queue is full: wait for deliveries, bounded by the delivery timeout
                deadline = deadline or time.monotonic() + self.delivery_timeout_s
                if time.monotonic() > deadline:
                    raise ProduceError("the producer's queue stayed full", retriable_elsewhere=False) from None
                await asyncio.sleep(0.005)

    def in_flight(self) -> int:
        return len(self._producer)

    async def close(self, timeout: float = 10.0) -> int:
        """Wait up to `timeout` for the records in flight (their reports resolve them); returns how many are left."""
        deadline = time.monotonic() + timeout
        while len(self._producer) and time.monotonic() < deadline:
            self._poll(0)
            await asyncio.sleep(0.005)
        if self._task is not None:
            self._task.cancel()
        self._poll(0)
        return len(self._producer)


class DeliveryTarget:
    """Where one record's outcome goes: the record's delivery callback, called on the event loop (the producer
    is polled there), turns the report into `delivered(error, partition, offset)`. One object per record."""
    __slots__ = ()

    def __call__(self, err, msg) -> None:
        if err is None:
            self.delivered(None, msg.partition(), msg.offset())
        else:
            code = err.code()
            self.delivered(ProduceError(f"delivery failed: {err.str()}", code, code in _PARTITION_ERRORS),
                           msg.partition(), msg.offset())

    def delivered(self, error: "ProduceError | None", partition: int, offset: int) -> None:
        raise NotImplementedError


class _FutureTarget(DeliveryTarget):
    __slots__ = ("fut",)

    def __init__(self, fut: asyncio.Future) -> None:
        self.fut = fut

    def delivered(self, error, partition: int, offset: int) -> None:
        if self.fut.done():
            return
        if error is None:
            self.fut.set_result((partition, offset))
        else:
            self.fut.set_exception(error)


@dataclass
class TopicHealth:
    partitions: dict[int, tuple[int, tuple[int, ...]]] = field(default_factory=dict)  # p -> (leader, isr)
    min_isr: int = 1
    configs_at: float = 0.0

    def online(self, p: int) -> bool:
        info = self.partitions.get(p)
        return info is not None and info[0] >= 0 and len(info[1]) >= self.min_isr

    def online_partitions(self) -> list[int]:
        return [p for p in sorted(self.partitions) if self.online(p)]

    def failover_targets(self, exclude: int, suspects: set[int]) -> list[int]:
        """Online partitions other than `exclude` to move a source to, those led by a suspect broker left out
        unless nothing else is online."""
        online = [p for p in self.online_partitions() if p != exclude]
        trusted = [p for p in online if self.partitions[p][0] not in suspects]
        return trusted or online


class ClusterHealth:
    """Which partitions are online; blocking calls (run them in a thread)."""

    def __init__(self, bootstrap: str, timeout_s: float = 5.0, configs_every_s: float = 30.0) -> None:
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.timeout_s = timeout_s
        self.configs_every_s = configs_every_s
        self.topics: dict[str, TopicHealth] = {}
        self.lock = threading.Lock()
        # Brokers that led a partition whose writes just failed, until when. Metadata names a stopped broker as
        # leader until the cluster's session timeout runs out; a failover avoids its partitions meanwhile.
        self._suspects: dict[int, float] = {}

    def refresh(self, topics: list[str]) -> None:
        if not topics:
            return
        md = self.admin.list_topics(timeout=self.timeout_s)
        now = time.monotonic()
        stale = []
        for name in topics:
            t = md.topics.get(name)
            if t is None or t.error is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                continue
            with self.lock:
                th = self.topics.setdefault(name, TopicHealth())
                th.partitions = {p.id: (p.leader, tuple(p.isrs)) for p in t.partitions.values()}
                if now - th.configs_at > self.configs_every_s:
                    stale.append(name)
        if stale:
            self._refresh_configs(stale)

    def _refresh_configs(self, names: list[str]) -> None:
        res = {n: ConfigResource(ConfigResource.Type.TOPIC, n) for n in names}
        futures = self.admin.describe_configs(list(res.values()), request_timeout=self.timeout_s)
        for r, f in futures.items():
            try:
                configs = f.result(timeout=self.timeout_s)
            except Exception as e:  # keep the previous value
                log.warning("describe configs of %s failed: %s", r.name, e)
                continue
            entry = configs.get("min.insync.replicas")
            with self.lock:
                th = self.topics.setdefault(r.name, TopicHealth())
                th.min_isr = int(entry.value) if entry is not None and entry.value else 1
                th.configs_at = time.monotonic()

    def health(self, topic: str) -> TopicHealth | None:
        with self.lock:
            return self.topics.get(topic)

    def suspect_leader_of(self, topic: str, partition: int, hold_s: float) -> None:
        """Writes to the partition failed: its current leader is suspect for `hold_s`."""
        with self.lock:
            th = self.topics.get(topic)
            leader = th.partitions.get(partition, (-1, ()))[0] if th is not None else -1
            if leader >= 0:
                self._suspects[leader] = time.monotonic() + hold_s

    def suspects(self) -> set[int]:
        now = time.monotonic()
        with self.lock:
            for broker in [b for b, until in self._suspects.items() if until <= now]:
                del self._suspects[broker]
            return set(self._suspects)

    def ensure(self, topic: str) -> TopicHealth:
        th = self.health(topic)
        if th is None or not th.partitions:
            self.refresh([topic])
            th = self.health(topic)
        if th is None or not th.partitions:
            raise ProduceError(f"topic {topic} is not known to the cluster")
        return th


@dataclass
class ScannedRecord:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, str]

    @property
    def size(self) -> int:
        return len(self.value or b"") + len(self.key or b"") + 64


def headers_dict(raw) -> dict[str, str]:
    if not raw:
        return {}
    out = {}
    for k, v in raw:
        if k.startswith("lb."):
            out[k] = v.decode("utf-8", "replace") if v is not None else ""
    return out


class PartitionScanner:
    """A small pool of assign()-only consumers; blocking calls (run them in a thread)."""

    def __init__(self, bootstrap: str, group_id: str = "lb-gateway-reader") -> None:
        self.bootstrap = bootstrap
        self.group_id = group_id
        self._pool: list[Consumer] = []
        self._tailers: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def _consumer(self) -> Consumer:
        with self._lock:
            if self._pool:
                return self._pool.pop()
        return Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": self.group_id, "enable.auto.commit": False,
            "enable.partition.eof": True, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
            "max.partition.fetch.bytes": 8 * 1024 * 1024, "fetch.max.bytes": 64 * 1024 * 1024,
            "queued.max.messages.kbytes": 262144, "fetch.error.backoff.ms": 50,
        })

    def _release(self, c: Consumer, assigned: bool = False) -> None:
        # A consumer that had an assignment is closed, never reused: messages it fetched ahead for the old
        # assignment must not be mistaken for records of the next range. Closing happens off the caller's path.
        if not assigned:
            with self._lock:
                if len(self._pool) < 8:
                    self._pool.append(c)
                    return
        threading.Thread(target=c.close, name="gateway-consumer-close", daemon=True).start()

    def watermarks(self, topic: str, partition: int, timeout: float = 10.0) -> tuple[int, int]:
        c = self._consumer()
        try:
            return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout, cached=False)
        finally:
            self._release(c)

    def scan_sources(self, topic: str, partition: int, start: int, end: int, timeout: float = 60.0) -> dict[str, tuple[int, int]]:
        """Highest (seqno, offset) per lb.source among records in [start, end); only headers are looked at.

        Scans of a partition mostly continue where the previous one stopped (the index position), so each partition
        keeps its consumer, paused between scans (up to 32, least recently used closed): a scan that starts where
        the last one ended, or after it (other gateways indexed the records between), resumes it and seeks there;
        an earlier start gets a new consumer. (A new consumer took 0.2 s to its first records on an idle machine,
        0.75 s under load: too long for a session open.)
        Callers serialise scans of one partition."""
        found: dict[bytes, tuple[int, int]] = {}
        if end <= start:
            return {}
        key = (topic, partition)
        with self._lock:
            tailer = self._tailers.pop(key, None)
        if tailer is not None and tailer[1] > start:
            self._close_later(tailer[0])   # backwards: a new consumer, so nothing fetched for later offsets comes first
            tailer = None
        if tailer is None:
            c = self._consumer()
            c.assign([TopicPartition(topic, partition, start if start > 0 else OFFSET_BEGINNING)])
        else:   # paused at the end of its last scan: go on from there, or seek ahead past what others indexed
            c = tailer[0]
            c.resume([TopicPartition(topic, partition)])
            c.seek(TopicPartition(topic, partition, start))
        deadline = time.monotonic() + timeout
        ok = False
        try:
            last = start - 1
            batch: list = []
            while last < end - 1:
                if not batch:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"reading {topic}[{partition}] {start}..{end} did not finish within {timeout}s (at {last})")
                    batch = c.consume(10000, 0.02)  # returns early only with 10000 messages: keep the wait short
                # The consumer reads this one partition only. Per record: the offset and the two headers the
                # gateway writes first (any order is accepted, at a cost).
                for msg in batch:
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            continue
                        raise KafkaException(err)
                    off = msg.offset()
                    if off < start:
                        continue
                    if off >= end:
                        last = end - 1
                        break
                    last = off
                    hs = msg.headers()
                    if not hs:
                        continue
                    if len(hs) > 1 and hs[0][0] == "lb.source" and hs[1][0] == "lb.seqno":
                        src, seq = hs[0][1], hs[1][1]
                    else:
                        src = seq = None
                        for k, v in hs:
                            if k == "lb.source":
                                src = v
                            elif k == "lb.seqno":
                                seq = v
                        if src is None or seq is None:
                            continue
                    try:
                        seqno = int(seq)
                    except (TypeError, ValueError):
                        continue
                    prev = found.get(src)
                    if prev is None or seqno > prev[0]:
                        found[src] = (seqno, off)
                batch = []
            ok = True
            return {src.decode("utf-8", "replace"): v for src, v in found.items()}
        finally:
            if ok:
                # Paused, it fetches nothing more and librdkafka drops what it fetched ahead (a running one kept
                # reading the partition as it grew, 256 MB ahead); the next scan resumes it and seeks to where this
                # one ended (resume alone would go on after the last record consume() returned, past the end).
                c.pause([TopicPartition(topic, partition)])
                with self._lock:
                    self._tailers[key] = (c, end)
                    evicted = []
                    while len(self._tailers) > 32:
                        evicted.append(self._tailers.popitem(last=False)[1][0])
                for e in evicted:
                    self._close_later(e)
            else:
                self._close_later(c)

    def _close_later(self, c: Consumer) -> None:
        threading.Thread(target=c.close, name="gateway-consumer-close", daemon=True).start()

    def read(self, topic: str, partition: int, start: int, max_bytes: int, wait_s: float,
             stop_at: int | None = None) -> tuple[list[ScannedRecord], int, int]:
        """Records from `start` up to about max_bytes (at least one), waiting up to wait_s for the first.
        Returns (records, next offset, high watermark)."""
        c = self._consumer()
        out: list[ScannedRecord] = []
        try:
            low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10.0, cached=False)
            start = max(start, low)
            deadline = time.monotonic() + wait_s
            while high <= start and time.monotonic() < deadline:
                time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
                low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10.0, cached=False)
            end = high if stop_at is None else min(high, stop_at)
            if end <= start:
                return out, start, high
            c.assign([TopicPartition(topic, partition, start)])
            size = 0
            nxt = start
            fetch_deadline = time.monotonic() + 30.0
            while nxt < end and (size < max_bytes or not out):
                if time.monotonic() > fetch_deadline:
                    break
                for msg in c.consume(1000, 0.02):
                    if msg.partition() != partition or msg.topic() != topic:
                        continue  # left over from an earlier assignment of this pooled consumer
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            continue
                        raise KafkaException(err)
                    off = msg.offset()
                    if off >= end:
                        nxt = end
                        break
                    rec = ScannedRecord(off, msg.timestamp()[1], msg.key(), msg.value(), headers_dict(msg.headers()))
                    if out and size + rec.size > max_bytes:
                        nxt = off
                        end = off  # stop here
                        break
                    out.append(rec)
                    size += rec.size
                    nxt = off + 1
            return out, nxt, high
        finally:
            self._release(c, assigned=True)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, []
            pool += [t[0] for t in self._tailers.values()]
            self._tailers.clear()
        for c in pool:
            c.close()


class SourcelessWriter:
    """Writes without a source: `await send(topic, value, headers, timestamp_ms)` -> (partition, offset)."""

    async def send(self, topic: str, value: bytes, headers: list, timestamp_ms: int) -> tuple[int, int]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class FallbackSourcelessWriter(SourcelessWriter):
    """Online-partition round robin on the gateway's producer; a refused record goes to another online partition.
    A record whose outcome was unknown may be written twice; its headers let the pipeline drop the repeat."""

    def __init__(self, producer: GatewayProducer, health: ClusterHealth, attempts: int = 3) -> None:
        self.producer = producer
        self.health = health
        self.attempts = attempts
        self._next = 0

    async def send(self, topic: str, value: bytes, headers: list, timestamp_ms: int) -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        th = await loop.run_in_executor(None, self.health.ensure, topic)
        tried: set[int] = set()
        error: ProduceError | None = None
        for _ in range(self.attempts):
            online = [p for p in th.online_partitions() if p not in tried] or [p for p in sorted(th.partitions) if p not in tried]
            if not online:
                break
            self._next += 1
            p = online[self._next % len(online)]
            tried.add(p)
            try:
                return await (await self.producer.produce(topic, p, value, headers, timestamp_ms))
            except ProduceError as e:
                error = e
                if not e.retriable_elsewhere:
                    raise
        raise error or ProduceError(f"no partition of {topic} took the record")


class FailoverProducerWriter(SourcelessWriter):
    """Adapter over `logbus.client.FailoverProducer`."""

    def __init__(self, bootstrap: str, delivery_timeout_ms: int, linger_ms: int) -> None:
        from logbus.client import FailoverProducer

        self._fp = FailoverProducer(bootstrap_servers=bootstrap, linger_ms=linger_ms,
                                    give_up_after_s=delivery_timeout_ms / 1000)

    async def send(self, topic: str, value: bytes, headers: list, timestamp_ms: int) -> tuple[int, int]:
        try:
            d = await self._fp.send(topic, value, None, headers)
        except Exception as e:
            raise ProduceError(f"delivery failed: {e}") from None
        return d.partition, d.offset

    def close(self) -> None:
        self._fp.close(10.0)


# Writes without a source go through logbus.client.FailoverProducer; the fallback stays for when it cannot start.
USE_CLIENT_FAILOVER_PRODUCER = True


def make_sourceless_writer(producer: GatewayProducer, health: ClusterHealth, bootstrap: str, delivery_timeout_ms: int,
                           linger_ms: int) -> SourcelessWriter:
    if not USE_CLIENT_FAILOVER_PRODUCER:
        return FallbackSourcelessWriter(producer, health)
    try:
        writer = FailoverProducerWriter(bootstrap, delivery_timeout_ms, linger_ms)
        log.info("writes without a source go through the failover producer")
        return writer
    except ImportError:
        return FallbackSourcelessWriter(producer, health)
    except Exception as e:  # the failover producer could not start: keep serving with the fallback
        log.warning("failover producer unavailable (%s); using the fallback writer", e)
        return FallbackSourcelessWriter(producer, health)


def create_topic(admin: AdminClient, name: str, partitions: int, replication_factor: int, config: dict[str, str],
                 timeout_s: float = 15.0) -> None:
    fs = admin.create_topics([NewTopic(name, partitions, replication_factor, config=config)], request_timeout=timeout_s)
    fs[name].result(timeout=timeout_s)


def stable_hash(text: str) -> int:
    return zlib.crc32(text.encode())


def kafka_error_code(e: BaseException) -> int | None:
    if isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError):
        return e.args[0].code()
    return None


__all__ = ["ClusterHealth", "GatewayProducer", "PartitionScanner", "ProduceError", "ScannedRecord", "SourcelessWriter",
           "create_topic", "headers_dict", "kafka_error_code", "make_sourceless_writer", "stable_hash"]
