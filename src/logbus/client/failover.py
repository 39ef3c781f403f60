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
from bisect import bisect_right
from itertools import accumulate
from typing import Any, Callable, NamedTuple, Sequence

from confluent_kafka import KafkaError, Producer

from logbus.client.cluster_view import ClusterView, TopicView
from logbus.client.counter import FailedBuffer, MessageCounter
from logbus.client.errors import (DeliveryFailedError, FailoverProducerError, ProducerClosedError, ProduceTimeoutError,
                                  RecordTooLargeError)
from logbus.client.partitioner import STICKY, OnlinePartitioner
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


_monotonic = time.monotonic
_POLL_EVERY = 64            # the producing thread serves delivery reports itself every this many records


class Record:
    """One accepted record on its way; `attempts` counts produce calls, `partition` the last one.

    The record is its own delivery callback (no per-record closure)."""

    __slots__ = ("owner", "topic", "value", "key", "headers", "size", "callback", "future", "attempts",
                 "accepted_at", "partition", "failed_over")

    def __init__(self, owner, topic: str, value: bytes | None, key: bytes | None, headers: list | None, size: int,
                 accepted_at: float) -> None:
        self.owner = owner
        self.topic, self.value, self.key, self.headers, self.size = topic, value, key, headers, size
        self.callback: Callable | None = None
        self.future: tuple[asyncio.AbstractEventLoop, asyncio.Future] | None = None
        self.attempts = 0
        self.accepted_at = accepted_at
        self.partition: int | None = None
        self.failed_over = False

    def __call__(self, err, msg) -> None:
        self.owner._on_report(self, err, msg)

    def __repr__(self) -> str:
        return f"Record(topic={self.topic!r}, key={self.key!r}, attempts={self.attempts}, partition={self.partition})"


class Delivery(NamedTuple):
    """An acknowledged record: where it was written, and whether it got there by failover.
    (A named tuple: one is made per acknowledged record with a callback or future.)"""

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

    With `delivery_reports="errors"` librdkafka reports only failed deliveries: an accepted record
    costs no Python state at all until it comes back refused (with its topic, partition, key, value
    and headers, all the retry path needs). The in-flight count is then librdkafka's own count of
    unacknowledged messages plus the failed buffer. Per-record callbacks and futures need every
    report, so that mode takes fire-and-forget records only.
    """

    def __init__(self, settings: FailoverSettings | None = None, **kwargs: Any) -> None:
        self.settings = s = settings or FailoverSettings(**kwargs)
        if settings is not None and kwargs:
            raise TypeError("pass either a FailoverSettings or keyword settings, not both")
        self._view = ClusterView({"bootstrap.servers": s.bootstrap_servers}, s.metadata_timeout_s,
                                 s.config_refresh_s, s.refused_hold_s, s.refused_hold_max_s)
        self._view.check_reachable()  # ClusterUnreachableError: a clear error at start, not a silent hang
        self._errors_only = s.delivery_reports == "errors"
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
        if self._errors_only:
            # librdkafka holds the records and their bytes: its byte limit is the counter's byte limit.
            config["queue.buffering.max.kbytes"] = max(1, s.max_pending_bytes // 1024)
        config.update(s.producer_config)
        config["acks"] = "all" if str(config.get("acks")) in ("all", "-1") else config["acks"]
        if self._errors_only:
            config["delivery.report.only.error"] = True
            config["on_delivery"] = self._on_error_report   # records produced without a callback of their own
        self._producer = Producer(config)
        self._produce = self._producer.produce
        self._counter = MessageCounter(s.max_pending_records, s.max_pending_bytes)
        self._failed = FailedBuffer(s.failed_buffer_records)
        self._room = 0               # "errors": records surely still accepted before librdkafka is asked again
        self._inputs = 0             # records taken by produce() (the polling thread's pace)
        self._source = s.source_id.encode() if s.source_id is not None else None
        self._stamp_size = 17 + len(s.source_id) + 20 if s.source_id is not None else 0
        self._send_lock = threading.Lock()
        self._lock_acquire, self._lock_release = self._send_lock.acquire, self._send_lock.release
        self._poll_lock = threading.Lock()   # one thread serves delivery reports at a time
        self._seqno = s.first_seqno
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

        `on_delivery(error, delivery)` is called once, from the producer's poller thread or from a
        later produce() call of the producing thread: error is None and delivery a `Delivery` when
        acknowledged, or error a `DeliveryFailedError` when not (not with delivery_reports="errors").
        Raises UnknownTopicError, RecordTooLargeError, ProduceTimeoutError, ProducerClosedError,
        ClusterUnreachableError — in every such case the record was not accepted.
        """
        if self._closing:
            raise ProducerClosedError("the producer is closed; the record was not accepted")
        if isinstance(value, str):
            value = value.encode()
        if isinstance(key, str):
            key = key.encode()
        view = self._view.topics.get(topic)
        if view is None or view.unknown:
            view = self._topic(topic)
        size = len(value) if value else 0
        if key:
            size += len(key)
        stamp = self._source is not None
        if headers:
            headers, hsize, stamp = _headers(headers, stamp)
            size += hsize
        else:
            headers = None
        if stamp:   # lb.source / lb.seqno are added once the record is accepted, so seqnos have no gaps
            size += self._stamp_size
        if size + _BATCH_OVERHEAD > view.max_message_bytes:
            self._too_large(topic, size, view)
        if on_delivery is None and self._errors_only and not stamp:
            # The fast path: a fire-and-forget record, nothing kept in Python. Anything unusual (no
            # room, failed records to merge first, nothing online, an error) goes through _offer().
            self._lock_acquire()
            try:
                if self._room > 0 and not self._merge_needed and not self._closed:
                    now = _monotonic()
                    if now >= view.recheck_at:
                        self._view.recheck(view, now)
                    chooser = view.chooser
                    if chooser is not None:
                        if key is None and chooser.sticky_left > 0 and now < chooser.sticky_until:
                            p = chooser._sticky            # the sticky partition, still online and not full
                            chooser._sticky_sent += size
                            chooser.sticky_left -= size
                            failover = False
                        else:
                            p = chooser.pick(key, size, len(view.partitions), view.online, view.online_set, now)
                            failover = chooser.failover
                        if p >= 0:
                            try:
                                self._produce(topic, value, key, partition=p, headers=headers)
                            except Exception:   # BufferError or a local error: _offer() below handles it
                                pass
                            else:
                                if failover:
                                    self._m["failovers"] += 1
                                counter = self._counter
                                counter.accepted += 1
                                counter.accepted_bytes += size
                                self._room -= 1
                                view = None   # accepted
            finally:
                self._lock_release()
            if view is not None and not self._offer(view, topic, value, key, headers, size, stamp, None, None):
                self._wait_and_offer(view, topic, value, key, headers, size, stamp, None, timeout)
        else:
            if on_delivery is not None and self._errors_only:
                raise ValueError('delivery_reports="errors" reports no acknowledgements: on_delivery needs delivery_reports="all"')
            if not self._offer(view, topic, value, key, headers, size, stamp, on_delivery, None):
                self._wait_and_offer(view, topic, value, key, headers, size, stamp, on_delivery, timeout)
        # Serve delivery reports here while input is busy: no hand-over to the poller thread.
        self._inputs += 1
        if not self._inputs % _POLL_EVERY and self._poll_lock.acquire(False):
            try:
                if self._producer is not None:
                    self._producer.poll(0)
            finally:
                self._poll_lock.release()

    def produce_batch(self, topic: str, values: Sequence[bytes | str | None], timeout: float | None = None) -> None:
        """Accept many unkeyed records without headers, in order; the log shipper's path.

        With delivery_reports="errors" and no source_id, the records go to librdkafka in a few
        produce_batch() calls — one per stretch of the sticky partition, or one for a round-robin
        spread — instead of one produce() call each, so the failover machinery costs a few
        microseconds per batch rather than per record. Refused records come back through the same
        failed buffer as any other. In the other modes every value goes through produce().

        A record larger than max.message.bytes refuses the whole batch (RecordTooLargeError, nothing
        accepted). Waiting for room is bounded by `timeout` per wait; a ProduceTimeoutError or
        ProducerClosedError carries `accepted`, how many leading values were accepted before it.
        """
        if self._closing:
            raise ProducerClosedError("the producer is closed; the records were not accepted")
        if not isinstance(values, list):
            values = list(values)
        if not values:
            return
        if str in set(map(type, values)):
            values = [v.encode() if isinstance(v, str) else v for v in values]
        view = self._view.topics.get(topic)
        if view is None or view.unknown:
            view = self._topic(topic)
        if None in values:
            sizes = [len(v) if v is not None else 0 for v in values]
        else:
            sizes = list(map(len, values))
        largest = max(sizes)
        if largest + _BATCH_OVERHEAD > view.max_message_bytes:
            self._m["rejected_at_input"] += len(values)
            raise RecordTooLargeError(
                f"record {sizes.index(largest)} of the batch is about {largest + _BATCH_OVERHEAD} bytes, larger than "
                f"max.message.bytes={view.max_message_bytes} of topic {topic!r}; no record of the batch was accepted")
        if not self._errors_only or self._source is not None:
            for i, value in enumerate(values):
                self._produce_one_of_batch(i, topic, value, timeout)
            return
        ends = list(accumulate(sizes))
        i, n = 0, len(values)
        while i < n:
            j, refused = self._produce_stretch(view, topic, values, ends, i)
            if j > i:
                self._inputs += j - i
                if self._poll_lock.acquire(False):   # serve delivery reports here, as produce() does
                    try:
                        if self._producer is not None:
                            self._producer.poll(0)
                    finally:
                        self._poll_lock.release()
            for k in refused:   # librdkafka's queue was full for these: accepted one by one, waiting for room
                self._produce_one_of_batch(k, topic, values[k], timeout)
            if j == i:   # no room, nothing online, failed records first, closed: the one-record path decides
                self._produce_one_of_batch(i, topic, values[i], timeout)
                j = i + 1
            i = j

    def _produce_one_of_batch(self, index: int, topic: str, value, timeout: float | None) -> None:
        try:
            self.produce(topic, value, timeout=timeout)
        except (ProduceTimeoutError, ProducerClosedError) as e:
            e.accepted = index
            raise

    def _produce_stretch(self, view: TopicView, topic: str, values: list, ends: list[int], i: int) -> tuple[int, list[int]]:
        """Produce values[i:j] in one produce_batch() call when there is room and a partition online;
        returns j (i when nothing was done) and the indexes librdkafka refused with a full queue."""
        self._lock_acquire()
        try:
            if self._closed or self._merge_needed:
                return i, []
            room = self._room
            if room <= 0:
                room = self._room = self._counter.max_records - len(self._producer) - len(self._failed)
                if room <= 0:
                    return i, []
            now = _monotonic()
            chooser = self._chooser(view, now)
            online = view.online
            if not online:
                return i, []
            last = min(len(values), i + room)
            before = ends[i - 1] if i else 0
            if chooser.strategy == STICKY:
                p = chooser.pick(None, ends[i] - before, view.count, online, view.online_set, now)
                # The stretch: the records after the first that still fit into the sticky partition's bytes.
                j = max(i + 1, bisect_right(ends, ends[i] + max(0, chooser.sticky_left), i + 1, last))
                stretch = ends[j - 1] - ends[i]
                chooser.sticky_left -= stretch
                chooser._sticky_sent += stretch
                msgs = [{"value": v} for v in values[i:j]]
                queued = self._producer.produce_batch(topic, msgs, partition=p)
            else:
                j, k, start = last, len(online), chooser._next
                msgs = [{"value": v, "partition": online[(start + x) % k]} for x, v in enumerate(values[i:j], 1)]
                chooser._next = (start + j - i) % k
                queued = self._producer.produce_batch(topic, msgs)
            refused, failures = [], []
            for x, m in enumerate(msgs if queued < len(msgs) else ()):   # librdkafka marks what it did not take
                err = m.get("_error")
                if err is None:
                    continue
                if err.code() == KafkaError._QUEUE_FULL:
                    refused.append(i + x)
                else:   # a local error for this record: accepted, then failed to the caller
                    failures.append((i + x, err))
            accepted = j - i - len(refused)
            counter = self._counter
            counter.accepted += accepted
            counter.accepted_bytes += ends[j - 1] - before - sum(ends[k] - (ends[k - 1] if k else 0) for k in refused)
            self._room -= accepted
            for k, err in failures:
                rec = Record(self, topic, values[k], None, None, ends[k] - (ends[k - 1] if k else 0), now)
                self._fail(rec, DeliveryFailedError(f"produce to {topic} failed: {err.str()}", rec, err.code()))
            return j, refused
        finally:
            self._lock_release()

    async def aproduce(self, topic: str, value: bytes | str | None = None, key: bytes | str | None = None,
                       headers: list | dict | None = None, timeout: float | None = None) -> asyncio.Future:
        """Accept a record without blocking the loop; returns a future of its `Delivery`
        (or a DeliveryFailedError). Waits while the counter is at its limit."""
        if self._errors_only:
            raise ValueError('delivery_reports="errors" reports no acknowledgements: aproduce()/send() need delivery_reports="all"')
        loop = asyncio.get_running_loop()
        if topic not in self._view.topics:  # the first use of a topic asks the cluster: off the loop
            await loop.run_in_executor(None, self._view.topic, topic)
        view, value, key, headers, size, stamp = self._prepare(topic, value, key, headers)
        fut = loop.create_future()
        future = (loop, fut)
        if self._offer(view, topic, value, key, headers, size, stamp, None, future):
            return fut
        deadline = None if timeout is None else time.monotonic() + timeout
        token = self._counter.block_start()
        try:
            while True:
                if self._closing:
                    self._reject_closed()
                left = 0.2 if deadline is None else min(0.2, deadline - time.monotonic())
                if left <= 0:
                    self._reject_timeout(timeout)
                await self._counter.wait_room_async(size, left)
                if self._offer(view, topic, value, key, headers, size, stamp, None, future):
                    return fut
        finally:
            self._counter.block_end(token)

    async def send(self, topic: str, value: bytes | str | None = None, key: bytes | str | None = None,
                   headers: list | dict | None = None, timeout: float | None = None) -> Delivery:
        """Produce one record and wait for its acknowledgement (raises DeliveryFailedError)."""
        return await (await self.aproduce(topic, value, key, headers, timeout))

    def _prepare(self, topic, value, key, headers):
        if self._closing:
            raise ProducerClosedError("the producer is closed; the record was not accepted")
        if isinstance(value, str):
            value = value.encode()
        if isinstance(key, str):
            key = key.encode()
        view = self._topic(topic)
        size = (len(value) if value else 0) + (len(key) if key else 0)
        stamp = self._source is not None
        if headers:
            headers, hsize, stamp = _headers(headers, stamp)
            size += hsize
        else:
            headers = None
        if stamp:
            size += self._stamp_size
        if size + _BATCH_OVERHEAD > view.max_message_bytes:
            self._too_large(topic, size, view)
        return view, value, key, headers, size, stamp

    def _topic(self, topic: str) -> TopicView:
        try:
            return self._view.topic(topic)
        except FailoverProducerError:   # UnknownTopicError, ClusterUnreachableError: not accepted
            self._m["rejected_at_input"] += 1
            raise

    def _too_large(self, topic: str, size: int, view: TopicView) -> None:
        self._m["rejected_at_input"] += 1
        raise RecordTooLargeError(
            f"record of about {size + _BATCH_OVERHEAD} bytes is larger than max.message.bytes={view.max_message_bytes} "
            f"of topic {topic!r}; the record was not accepted")

    def _reject_closed(self) -> None:
        self._m["rejected_at_input"] += 1
        raise ProducerClosedError("the producer is closing; the record was not accepted")

    def _reject_timeout(self, timeout) -> None:
        self._m["rejected_at_input"] += 1
        raise ProduceTimeoutError(f"{self._pending()} records unacknowledged for {timeout}s; the record was not accepted")

    def _wait_and_offer(self, view, topic, value, key, headers, size, stamp, callback, timeout) -> None:
        """The slow path of produce(): wait for room (up to `timeout`), then accept."""
        deadline = None if timeout is None else time.monotonic() + timeout
        token = self._counter.block_start()
        try:
            while True:
                if self._closing:
                    self._reject_closed()
                left = 0.2 if deadline is None else min(0.2, deadline - time.monotonic())
                if left <= 0:
                    self._reject_timeout(timeout)
                if self._errors_only:   # nobody reports acknowledgements: serve librdkafka's queue here
                    self._poll_once(min(left, 0.05))
                    if self._merge_needed and len(self._failed):
                        self._merge()
                else:
                    self._counter.wait_room(size, left)
                if self._offer(view, topic, value, key, headers, size, stamp, callback, None):
                    return
        finally:
            self._counter.block_end(token)

    def _poll_once(self, timeout: float) -> None:
        if self._poll_lock.acquire(timeout=timeout):
            try:
                if self._producer is not None:
                    self._producer.poll(timeout)
            finally:
                self._poll_lock.release()

    def _offer(self, view: TopicView, topic: str, value, key, headers, size: int, stamp: bool, callback, future) -> bool:
        """Accept the record and produce it when the counter has room (False: no room, nothing done).
        The merger runs first: failed records before new input."""
        with self._send_lock:
            if self._closed:
                return False
            counter = self._counter
            if self._errors_only:
                if self._room <= 0:   # ask librdkafka only when the cached room is used up
                    self._room = counter.max_records - len(self._producer) - len(self._failed)
                    if self._room <= 0:
                        return False
            elif not counter.room(size):
                return False
            if self._merge_needed:
                self._merge_locked(limit=256)
            if stamp:
                seq = self._seqno
                headers = (headers or []) + [("lb.source", self._source), ("lb.seqno", str(seq).encode())]
            now = time.monotonic()
            chooser = self._chooser(view, now)
            p = chooser.pick(key, size, len(view.partitions), view.online, view.online_set, now)
            if callback is None and future is None and self._errors_only:
                rec = None
            else:
                rec = Record(self, topic, value, key, headers, size, now)
                rec.callback, rec.future = callback, future
            if p < 0:   # nothing online: accepted into the failed buffer, produced once a partition returns
                if rec is None:
                    rec = Record(self, topic, value, key, headers, size, now)
                self._failed.put(rec)
            else:
                try:
                    if rec is None:
                        self._produce(topic, value, key, partition=p, headers=headers)
                    else:
                        rec.partition, rec.attempts = p, 1
                        self._produce(topic, value, key, partition=p, headers=headers, on_delivery=rec)
                except BufferError:   # librdkafka's queue is full (its byte limit): not accepted yet, wait
                    return False
                except Exception as e:  # a local error for this record (e.g. larger than message.max.bytes)
                    if rec is None:
                        rec = Record(self, topic, value, key, headers, size, now)
                    self._accepted(counter, size, stamp)
                    code = e.args[0].code() if e.args and hasattr(e.args[0], "code") else None
                    self._fail(rec, DeliveryFailedError(f"produce to {topic}-{p} failed: {e}", rec, code))
                    return True
                if chooser.failover:
                    self._m["failovers"] += 1
                    if rec is not None:
                        rec.failed_over = True
            self._accepted(counter, size, stamp)
            return True

    def _chooser(self, view: TopicView, now: float) -> OnlinePartitioner:
        """The topic's partitioner, with its online list brought up to date when a penalty ran out (send lock held)."""
        if now >= view.recheck_at:
            self._view.recheck(view, now)
        chooser = view.chooser
        if chooser is None:
            s = self.settings
            chooser = view.chooser = OnlinePartitioner(s.partitioner, s.sticky_bytes, s.key_hash, s.sticky_linger_ms / 1000)
        return chooser

    def _accepted(self, counter: MessageCounter, size: int, stamp: bool) -> None:
        # under the send lock
        counter.take(size)
        self._room -= 1
        if stamp:
            self._seqno += 1

    # -- the merger and the re-send path ------------------------------------------------------
    def _resend_locked(self, view: TopicView, rec: Record) -> bool:
        """Produce a failed record again, to an online partition; False (back into the failed buffer)
        when none is online or librdkafka's queue is full."""
        now = time.monotonic()
        chooser = self._chooser(view, now)
        p = chooser.pick(rec.key, rec.size, view.count, view.online, view.online_set, now)
        if p < 0:
            self._failed.put(rec)
            return False
        failover = chooser.failover or (rec.partition is not None and p != rec.partition)
        try:
            self._produce(rec.topic, rec.value, rec.key, partition=p, headers=rec.headers, on_delivery=rec)
        except BufferError:
            self._failed.put(rec)
            self._merge_needed = True
            return False
        except Exception as e:
            code = e.args[0].code() if e.args and hasattr(e.args[0], "code") else None
            self._fail(rec, DeliveryFailedError(f"produce to {rec.topic}-{p} failed: {e}", rec, code))
            return True
        if failover:
            rec.failed_over = True
            self._m["failovers"] += 1
        rec.partition = p
        rec.attempts += 1
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
            if not self._resend_locked(view, rec):
                stuck += 1   # went back to the tail: no online partition for its topic now
        if limit is not None and len(self._failed) > stuck:
            self._merge_needed = True

    def _merge(self) -> None:
        with self._send_lock:
            self._merge_locked()

    # -- delivery reports ----------------------------------------------------------------------
    def _on_error_report(self, err: KafkaError, msg) -> None:
        """delivery_reports="errors": a record produced without per-record state came back."""
        topic, value, key, headers = msg.topic(), msg.value(), msg.key(), msg.headers()
        size = (len(value) if value else 0) + (len(key) if key else 0)
        if headers:
            size += sum(len(k) + (len(v) if v else 0) for k, v in headers)
        ts_type, ts = msg.timestamp()   # librdkafka stamps the produce time: when the record was accepted
        accepted_at = time.monotonic() - max(0.0, time.time() - ts / 1000) if ts > 0 else time.monotonic()
        rec = Record(self, topic, value, key, headers, size, accepted_at)
        rec.partition, rec.attempts = msg.partition(), 1
        self._on_report(rec, err, msg)

    def _on_report(self, rec: Record, err: KafkaError | None, msg) -> None:
        if err is None:
            view = self._view.topics.get(rec.topic)
            if view is not None and view.penalty:
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
        if not self._errors_only:
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
        """Serves delivery reports while input is idle or slow; while records come in fast, the
        producing thread serves them itself (every _POLL_EVERY records) and this thread only looks
        after the merger."""
        seen = self._inputs
        while not self._stop.is_set():
            inputs = self._inputs
            busy, seen = inputs - seen >= _POLL_EVERY, inputs
            if busy:
                self._stop.wait(0.01)
            else:
                self._poll_once(0.05)
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
    def _pending(self) -> int:
        """accepted − acknowledged − failed."""
        if not self._errors_only:
            return self._counter.records
        with self._send_lock:   # consistent with the merger, which moves records between the two
            return (len(self._producer) if self._producer is not None else 0) + len(self._failed)

    def flush(self, timeout: float | None = None) -> int:
        """Wait until every accepted record is acknowledged or failed; returns how many are still pending."""
        if not self._errors_only:
            self._counter.wait_empty(timeout)
            return self._counter.records
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            pending = self._pending()
            left = 0.05 if deadline is None else min(0.05, deadline - time.monotonic())
            if pending == 0 or left <= 0:
                return pending
            self._poll_once(left)
            if self._merge_needed and len(self._failed):
                self._merge()

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
        self.flush(timeout)
        with self._send_lock:
            self._closed = True
        # What librdkafka still holds comes back as _PURGE_QUEUE / _PURGE_INFLIGHT and fails above.
        self._producer.purge(in_queue=True, in_flight=True, blocking=False)
        self._stop.set()
        self._poller.join(5)
        self._refresher.join(self.settings.metadata_timeout_s + 5)
        with self._poll_lock:
            self._producer.flush(5)   # runs the purge reports
        with self._send_lock:
            failed = self._failed.drain()
            self._producer = self._produce = None   # let librdkafka's handles go now, not whenever the object is collected
        for rec in failed:
            self._fail(rec, DeliveryFailedError("not delivered before close(): no online partition took it", rec, None))
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
        m = dict(self._m)
        if self._errors_only:
            with self._send_lock:
                accepted = self._counter.accepted
                pending = (len(self._producer) if self._producer is not None else 0) + len(self._failed)
            m["acknowledged"] = max(0, accepted - pending - m["failed"])
            pending_bytes = None   # librdkafka bounds the bytes it holds but does not tell them
        else:
            accepted, pending, pending_bytes = self._counter.accepted, self._counter.records, self._counter.bytes
        m = {"accepted": accepted, **m}
        m.update({
            "pending": pending,          # the in-flight gap: accepted − acknowledged − failed
            "pending_bytes": pending_bytes,
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


def _headers(headers, stamp: bool) -> tuple[list, int, bool]:
    """(headers as a list of (str, bytes), their size, whether lb.source must still be stamped)."""
    hdrs = list(headers.items()) if isinstance(headers, dict) else list(headers)
    hdrs = [(k, v.encode() if isinstance(v, str) else v) for k, v in hdrs]
    size = sum(len(k) + (len(v) if v else 0) for k, v in hdrs)
    if stamp and any(k == "lb.source" for k, _ in hdrs):
        stamp = False
    return hdrs, size, stamp


def _settle(fut: asyncio.Future, error, delivery) -> None:
    if fut.done():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(delivery)
