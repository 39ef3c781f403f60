"""FailoverProducer: keep producing, lose nothing, when partitions fall under min.insync.replicas.

    caller ──produce()──▶ message counter ──▶ merger ──▶ confluent-kafka Producer (acks=all,
                          (accepted − acked    ▲  │       partition chosen here, over the
                           < limit, else wait) │  ▼       online partitions)
                                          failed buffer ◀── delivery reports: 19, 20, NOT_LEADER,
                                          (bounded)           LEADER_NOT_AVAILABLE, timeouts ...

A record whose delivery report says the partition refused it (or whose outcome is unknown) is not
retried on the same partition by the client: it goes back to the failed buffer, its partition is
kept out of the online set for a while, and the merger produces it again — before any new input —
to an online partition. Records with an unknown outcome may therefore be written twice; their
`lb.source` / `lb.seqno` headers let the pipeline drop the repeat.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

from confluent_kafka import KafkaError, Producer

from logbus.client.cluster_view import ClusterView, TopicView
from logbus.client.counter import FailedBuffer, MessageCounter
from logbus.client.errors import (DeliveryFailedError, FailoverProducerError, ProducerClosedError, ProduceTimeoutError,
                                  RecordTooLargeError)
from logbus.client.partitioner import OnlinePartitioner
from logbus.client.settings import FailoverSettings

log = logging.getLogger(__name__)

# Delivery errors after which the record is produced again, to an online partition.
_REFUSED = {  # the partition did not take the record
    KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.KAFKA_STORAGE_ERROR,
    KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION, KafkaError.REPLICA_NOT_AVAILABLE,
}
_UNKNOWN_OUTCOME = {  # the record may have been written
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND, KafkaError.REQUEST_TIMED_OUT, KafkaError.NETWORK_EXCEPTION,
    KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
}
_BATCH_OVERHEAD = 61 + 21   # record batch header + a generous per-record header


class Record:
    """One accepted record on its way; `attempts` counts produce calls, `partition` the last one."""

    __slots__ = ("topic", "value", "key", "headers", "size", "callback", "future", "attempts",
                 "accepted_at", "partition", "failed_over")

    def __init__(self, topic: str, value: bytes | None, key: bytes | None, headers: list | None, size: int) -> None:
        self.topic, self.value, self.key, self.headers, self.size = topic, value, key, headers, size
        self.callback: Callable | None = None
        self.future: tuple[asyncio.AbstractEventLoop, asyncio.Future] | None = None
        self.attempts = 0
        self.accepted_at = time.monotonic()
        self.partition: int | None = None
        self.failed_over = False

    def __repr__(self) -> str:
        return f"Record(topic={self.topic!r}, key={self.key!r}, attempts={self.attempts}, partition={self.partition})"


@dataclass(frozen=True)
class Delivery:
    """An acknowledged record: where it was written, and whether it got there by failover."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list | None
    attempts: int
    failed_over: bool


class FailoverProducer:
    """A producer that sends records only to online partitions and re-sends what comes back.

    Thread-safe. `produce()` blocks while the message counter is at its limit; `aproduce()` /
    `send()` wait the same way on an asyncio loop. `flush()` waits for every accepted record;
    `close()` returns the records that were not delivered (never drops them silently).
    """

    def __init__(self, settings: FailoverSettings | None = None, **kwargs: Any) -> None:
        self.settings = s = settings or FailoverSettings(**kwargs)
        if settings is not None and kwargs:
            raise TypeError("pass either a FailoverSettings or keyword settings, not both")
        self._view = ClusterView({"bootstrap.servers": s.bootstrap_servers}, s.metadata_timeout_s,
                                 s.config_refresh_s, s.refused_hold_s, s.refused_hold_max_s)
        self._view.check_reachable()  # ClusterUnreachableError: a clear error at start, not a silent hang
        config = {
            "bootstrap.servers": s.bootstrap_servers,
            "acks": "all",
            "message.timeout.ms": s.delivery_timeout_ms,
            "request.timeout.ms": min(s.request_timeout_ms, s.delivery_timeout_ms),
            "retries": s.retries,
            "retry.backoff.ms": s.retry_backoff_ms,
            "linger.ms": s.linger_ms,
            "queue.buffering.max.messages": max(100000, s.max_pending_records + 1000),
            "queue.buffering.max.kbytes": max(1048576, s.max_pending_bytes // 1024 + 1024),
            "topic.metadata.refresh.interval.ms": max(1000, int(s.metadata_refresh_s * 1000)),
        }
        config.update(s.producer_config)
        config["acks"] = "all" if str(config.get("acks")) in ("all", "-1") else config["acks"]
        self._producer = Producer(config)
        self._counter = MessageCounter(s.max_pending_records, s.max_pending_bytes)
        self._failed = FailedBuffer(s.failed_buffer_records)
        self._partitioners: dict[str, OnlinePartitioner] = {}
        self._send_lock = threading.Lock()
        self._seqno = s.first_seqno
        self._seq_lock = threading.Lock()
        self._merge_needed = False
        self._closing = False
        self._closed = False
        self._kept_failures: list[DeliveryFailedError] = []
        self._m = {"acknowledged": 0, "failed": 0, "resent": 0, "resent_unknown_outcome": 0,
                   "failovers": 0, "refusals": 0, "rejected_at_input": 0}
        self._refresh_now = threading.Event()
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll_loop, name="failover-poller", daemon=True)
        self._refresher = threading.Thread(target=self._refresh_loop, name="failover-metadata", daemon=True)
        self._poller.start()
        self._refresher.start()

    # -- input ------------------------------------------------------------------------------
    def produce(self, topic: str, value: bytes | str | None = None, key: bytes | str | None = None,
                headers: list | dict | None = None, on_delivery: Callable | None = None,
                timeout: float | None = None) -> None:
        """Accept a record; blocks while the counter is at its limit (up to `timeout`, None = no limit).

        `on_delivery(error, delivery)` is called once, from the producer's thread: error is None and
        delivery a `Delivery` when acknowledged, or error a `DeliveryFailedError` when not.
        Raises UnknownTopicError, RecordTooLargeError, ProduceTimeoutError, ProducerClosedError,
        ClusterUnreachableError — in every such case the record was not accepted.
        """
        view, rec = self._prepare(topic, value, key, headers)
        if not self._counter.acquire(rec.size, timeout, closed=lambda: self._closing):
            self._m["rejected_at_input"] += 1
            if self._closing:
                raise ProducerClosedError("the producer is closing; the record was not accepted")
            raise ProduceTimeoutError(f"{self._counter.records} records unacknowledged for {timeout}s; the record was not accepted")
        rec.callback = on_delivery
        self._accept(view, rec)

    async def aproduce(self, topic: str, value: bytes | str | None = None, key: bytes | str | None = None,
                       headers: list | dict | None = None, timeout: float | None = None) -> asyncio.Future:
        """Accept a record without blocking the loop; returns a future of its `Delivery`
        (or a DeliveryFailedError). Waits while the counter is at its limit."""
        loop = asyncio.get_running_loop()
        if topic not in self._view.topics:  # the first use of a topic asks the cluster: off the loop
            await loop.run_in_executor(None, self._view.topic, topic)
        view, rec = self._prepare(topic, value, key, headers)
        if not await self._counter.acquire_async(rec.size, timeout, closed=lambda: self._closing):
            self._m["rejected_at_input"] += 1
            if self._closing:
                raise ProducerClosedError("the producer is closing; the record was not accepted")
            raise ProduceTimeoutError(f"{self._counter.records} records unacknowledged for {timeout}s; the record was not accepted")
        fut = loop.create_future()
        rec.future = (loop, fut)
        self._accept(view, rec)
        return fut

    async def send(self, topic: str, value: bytes | str | None = None, key: bytes | str | None = None,
                   headers: list | dict | None = None, timeout: float | None = None) -> Delivery:
        """Produce one record and wait for its acknowledgement (raises DeliveryFailedError)."""
        return await (await self.aproduce(topic, value, key, headers, timeout))

    def _prepare(self, topic, value, key, headers) -> tuple[TopicView, Record]:
        if self._closing:
            raise ProducerClosedError("the producer is closed; the record was not accepted")
        if isinstance(value, str):
            value = value.encode()
        if isinstance(key, str):
            key = key.encode()
        if headers:
            hdrs = list(headers.items()) if isinstance(headers, dict) else list(headers)
            hdrs = [(k, v.encode() if isinstance(v, str) else v) for k, v in hdrs]
        else:
            hdrs = []
        stamp = self.settings.source_id is not None and not any(k == "lb.source" for k, _ in hdrs)
        try:
            view = self._view.topic(topic)
        except FailoverProducerError:   # UnknownTopicError, ClusterUnreachableError: not accepted
            self._m["rejected_at_input"] += 1
            raise
        size = (len(value) if value else 0) + (len(key) if key else 0)
        if hdrs:
            size += sum(len(k) + (len(v) if v else 0) for k, v in hdrs)
        if stamp:   # lb.source / lb.seqno are added once the record is accepted, so seqnos have no gaps
            size += 17 + len(self.settings.source_id) + 20
        if size + _BATCH_OVERHEAD > view.max_message_bytes:
            self._m["rejected_at_input"] += 1
            raise RecordTooLargeError(
                f"record of about {size + _BATCH_OVERHEAD} bytes is larger than max.message.bytes={view.max_message_bytes} "
                f"of topic {topic!r}; the record was not accepted")
        rec = Record(topic, value, key, hdrs or None, size)
        rec.failed_over = stamp   # (reused until accepted: "stamp me")
        return view, rec

    def _accept(self, view: TopicView, rec: Record) -> None:
        if rec.failed_over:
            rec.failed_over = False
            with self._seq_lock:
                seq = self._seqno
                self._seqno += 1
            rec.headers = (rec.headers or []) + [("lb.source", self.settings.source_id.encode()), ("lb.seqno", str(seq).encode())]
        with self._send_lock:
            if self._merge_needed:          # the merger: failed records first ...
                self._merge_locked(limit=256)
            self._send_locked(view, rec)    # ... then new input

    # -- the merger and the send path ---------------------------------------------------------
    def _partitioner(self, topic: str) -> OnlinePartitioner:
        p = self._partitioners.get(topic)
        if p is None:
            p = self._partitioners[topic] = OnlinePartitioner(self.settings.partitioner, self.settings.sticky_bytes,
                                                                 self.settings.key_hash, self.settings.sticky_linger_ms / 1000)
        return p

    def _send_locked(self, view: TopicView, rec: Record) -> bool:
        """Produce to an online partition; False (record into the failed buffer) when none is online."""
        online, online_set = self._view.online(view)
        p, failover = self._partitioner(rec.topic).choose(rec.key, rec.size, view.count, online, online_set)
        if p is None:
            self._failed.put(rec)
            return False
        if rec.partition is not None and p != rec.partition:
            failover = True
        if failover:
            rec.failed_over = True
            self._m["failovers"] += 1
        rec.partition = p
        rec.attempts += 1
        try:
            self._producer.produce(rec.topic, rec.value, rec.key, partition=p, headers=rec.headers,
                                   on_delivery=partial(self._on_report, rec))
        except BufferError:  # librdkafka's queue is full (only with small queue settings): wait in the buffer
            rec.attempts -= 1
            self._failed.put(rec)
            self._merge_needed = True
            return False
        except Exception as e:  # a local error for this record (e.g. larger than message.max.bytes)
            code = e.args[0].code() if e.args and hasattr(e.args[0], "code") else None
            self._fail(rec, DeliveryFailedError(f"produce to {rec.topic}-{p} failed: {e}", rec, code))
            return True
        return True

    def _merge_locked(self, limit: int | None = None) -> None:
        self._merge_needed = False
        n = len(self._failed) if limit is None else min(limit, len(self._failed))
        stuck = 0
        for _ in range(n):
            rec = self._failed.pop()
            if self._closed:
                self._failed.put(rec)
                return
            view = self._view.topics.get(rec.topic)
            if view is None or view.unknown:
                self._fail(rec, DeliveryFailedError(f"topic {rec.topic!r} no longer exists", rec, KafkaError.UNKNOWN_TOPIC_OR_PART))
                continue
            give_up = self.settings.give_up_after_s
            if give_up is not None and time.monotonic() - rec.accepted_at > give_up:
                self._fail(rec, DeliveryFailedError(
                    f"not acknowledged within {give_up:g}s after {rec.attempts} attempts: no online partition of "
                    f"topic {rec.topic!r} took it", rec, None))
                continue
            if not self._send_locked(view, rec):
                stuck += 1   # went back to the tail: no online partition for its topic now
        if limit is not None and len(self._failed) > stuck:
            self._merge_needed = True

    def _merge(self) -> None:
        with self._send_lock:
            self._merge_locked()

    # -- delivery reports ----------------------------------------------------------------------
    def _on_report(self, rec: Record, err: KafkaError | None, msg) -> None:
        if err is None:
            self._view.mark_ok(rec.topic, rec.partition)
            self._m["acknowledged"] += 1
            self._counter.release(rec.size)
            if rec.callback is not None or rec.future is not None:
                self._resolve(rec, None, Delivery(rec.topic, msg.partition(), msg.offset(), rec.key, rec.value,
                                                  rec.headers, rec.attempts, rec.failed_over))
            return
        code = err.code()
        if self._closed:  # purged at close: reported to the caller, never silently dropped
            outcome = "its outcome is unknown" if code == KafkaError._PURGE_INFLIGHT else "it was not sent"
            self._fail(rec, DeliveryFailedError(f"not delivered before close(); {outcome}", rec, code))
            return
        resend = code in _REFUSED or code in _UNKNOWN_OUTCOME or (err.retriable() and not err.fatal())
        if resend and code == KafkaError.UNKNOWN_TOPIC_OR_PART and self._view.topics.get(rec.topic, None) is not None \
                and self._view.topics[rec.topic].unknown:
            resend = False
        give_up = self.settings.give_up_after_s
        if resend and give_up is not None and time.monotonic() - rec.accepted_at > give_up:
            self._fail(rec, DeliveryFailedError(
                f"not acknowledged within {give_up:g}s after {rec.attempts} attempts; last error: {err.str()}", rec, code))
            return
        if not resend:
            self._fail(rec, DeliveryFailedError(f"{rec.topic}-{rec.partition} refused the record: {err.str()}", rec, code))
            return
        self._m["refusals"] += 1
        self._m["resent"] += 1
        if code in _UNKNOWN_OUTCOME:
            self._m["resent_unknown_outcome"] += 1
        self._view.mark_refused(rec.topic, rec.partition)
        self._failed.put(rec)
        self._merge_needed = True
        self._refresh_now.set()

    def _fail(self, rec: Record, error: DeliveryFailedError) -> None:
        self._m["failed"] += 1
        self._counter.release(rec.size)
        log.warning("record for topic %s not delivered: %s", rec.topic, error)
        if rec.callback is None and rec.future is None:
            if self.settings.on_failure is not None:
                self._call(self.settings.on_failure, error)
            else:
                self._kept_failures.append(error)
            return
        self._resolve(rec, error, None)

    def _resolve(self, rec: Record, error: DeliveryFailedError | None, delivery: Delivery | None) -> None:
        if rec.callback is not None:
            self._call(rec.callback, error, delivery)
        if rec.future is not None:
            loop, fut = rec.future
            try:
                loop.call_soon_threadsafe(_settle, fut, error, delivery)
            except RuntimeError:  # the loop is gone; keep the failure for close()
                if error is not None:
                    self._kept_failures.append(error)

    @staticmethod
    def _call(fn: Callable, *args) -> None:
        try:
            fn(*args)
        except Exception:
            log.exception("delivery callback raised")

    # -- background threads ------------------------------------------------------------------
    def _poll_loop(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(0.05)
            if self._merge_needed and len(self._failed):
                self._merge()

    def _refresh_loop(self) -> None:
        interval = self.settings.metadata_refresh_s
        while not self._stop.is_set():
            self._refresh_now.wait(interval)
            if self._stop.is_set():
                return
            urgent = self._refresh_now.is_set()
            self._refresh_now.clear()
            self._view.refresh()
            if len(self._failed):
                self._merge_needed = True
            if urgent:  # at most five error-driven rounds a second
                self._stop.wait(0.2)

    # -- flush, close, metrics -----------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> int:
        """Wait until every accepted record is acknowledged or failed; returns how many are still pending."""
        self._counter.wait_empty(timeout)
        return self._counter.records

    async def aflush(self, timeout: float | None = None) -> int:
        return await asyncio.get_running_loop().run_in_executor(None, self.flush, timeout)

    def close(self, timeout: float = 30.0) -> list[DeliveryFailedError]:
        """Stop taking input, deliver what is pending for up to `timeout` seconds, then fail the rest.

        Returns every failure that had no per-record callback, future or `on_failure` handler to go
        to — including the records still undelivered at the deadline. Nothing is dropped silently.
        """
        if self._closed:
            return self._take_kept()
        self._closing = True
        self._counter.wait_empty(timeout)
        with self._send_lock:
            self._closed = True
        # What librdkafka still holds comes back as _PURGE_QUEUE / _PURGE_INFLIGHT and fails above.
        self._producer.purge(in_queue=True, in_flight=True, blocking=False)
        self._stop.set()
        self._poller.join(5)
        self._refresher.join(self.settings.metadata_timeout_s + 5)
        self._producer.flush(5)   # runs the purge reports
        for rec in self._failed.drain():
            self._fail(rec, DeliveryFailedError("not delivered before close(): no online partition took it", rec, None))
        self._producer = None      # let librdkafka's handles go now, not whenever the object is collected
        self._view.admin = None
        return self._take_kept()

    async def aclose(self, timeout: float = 30.0) -> list[DeliveryFailedError]:
        return await asyncio.get_running_loop().run_in_executor(None, self.close, timeout)

    def take_failures(self) -> list[DeliveryFailedError]:
        """Failures kept so far (records that had no callback, future or on_failure handler)."""
        return self._take_kept()

    def _take_kept(self) -> list[DeliveryFailedError]:
        kept, self._kept_failures = self._kept_failures, []
        return kept

    def metrics(self) -> dict[str, Any]:
        topics = self._view.snapshot()
        m = {"accepted": self._counter.accepted, **self._m}
        m.update({
            "pending": self._counter.records,          # the in-flight gap: accepted − acknowledged − failed
            "pending_bytes": self._counter.bytes,
            "failed_buffer": len(self._failed),
            "failed_buffer_high_water": self._failed.high_water,
            "blocked_s": round(self._counter.blocked_total_s(), 3),
            "online_partitions": sum(len(t["online"]) for t in topics.values()),
            "offline_partitions": sum(len(t["offline"]) for t in topics.values()),
            "partitions_gone_offline": self._view.offline_events,
            "metadata_refreshes": self._view.refreshes,
            "metadata_refresh_errors": self._view.refresh_errors,
            "topics": topics,
        })
        return m

    def __enter__(self) -> "FailoverProducer":
        return self

    def __exit__(self, *exc) -> None:
        failures = self.close()
        if failures:
            log.error("%d records not delivered at close", len(failures))

    async def __aenter__(self) -> "FailoverProducer":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()


def _settle(fut: asyncio.Future, error, delivery) -> None:
    if fut.done():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(delivery)
