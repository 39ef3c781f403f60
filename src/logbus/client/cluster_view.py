"""What the failover producer knows of the cluster: per topic, partitions with leader and ISR (from
Metadata) and min.insync.replicas / max.message.bytes (from DescribeConfigs), plus partitions that
just refused records. Refreshed by the producer periodically and at once after errors.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource

from logbus.client.errors import ClusterUnreachableError, UnknownTopicError

log = logging.getLogger(__name__)

DEFAULT_MIN_ISR = 1
DEFAULT_MAX_MESSAGE_BYTES = 1048588


@dataclass
class PartitionInfo:
    leader: int
    isr: tuple[int, ...]
    error: int = 0


@dataclass
class TopicView:
    name: str
    partitions: dict[int, PartitionInfo]
    min_isr: int = DEFAULT_MIN_ISR
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    configs_at: float = 0.0
    unknown: bool = False
    # partition -> (excluded until monotonic time, consecutive refusals)
    penalty: dict[int, tuple[float, int]] = field(default_factory=dict)
    online: tuple[int, ...] = ()
    online_set: frozenset = frozenset()
    recheck_at: float = float("inf")   # when a penalty ends and the online list must be recomputed
    chooser: Any = None                # the producer's partitioner for this topic

    @property
    def count(self) -> int:
        return len(self.partitions)

    def healthy(self, p: int) -> bool:
        info = self.partitions.get(p)
        return info is not None and info.leader >= 0 and info.error in (0, KafkaError.REPLICA_NOT_AVAILABLE) and len(info.isr) >= self.min_isr

    def recompute(self, now: float) -> int:
        """Recompute the online list; returns how many partitions left it."""
        online, recheck = [], float("inf")
        for p in sorted(self.partitions):
            if not self.healthy(p):
                continue
            until = self.penalty.get(p, (0.0, 0))[0]
            if until > now:
                recheck = min(recheck, until)
                continue
            online.append(p)
        gone = len(self.online_set - frozenset(online))
        self.online, self.online_set, self.recheck_at = tuple(online), frozenset(online), recheck
        if self.chooser is not None and gone:
            self.chooser.reset()
        return gone


class ClusterView:
    """Thread-safe map topic -> TopicView, refreshed through an AdminClient of its own."""

    def __init__(self, admin_config: dict, metadata_timeout_s: float, config_refresh_s: float,
                 hold_s: float, hold_max_s: float) -> None:
        self.admin = AdminClient(admin_config)
        self.bootstrap = admin_config.get("bootstrap.servers", "")
        self.metadata_timeout_s = metadata_timeout_s
        self.config_refresh_s = config_refresh_s
        self.hold_s = hold_s
        self.hold_max_s = hold_max_s
        self.topics: dict[str, TopicView] = {}
        self.lock = threading.RLock()
        self.refreshes = 0
        self.offline_events = 0   # times a partition left the online set
        self.refresh_errors = 0

    # -- start and topics -------------------------------------------------------------------
    def check_reachable(self) -> None:
        try:
            md = self.admin.list_topics(timeout=self.metadata_timeout_s)
        except KafkaException as e:
            raise ClusterUnreachableError(
                f"cannot reach the cluster at {self.bootstrap!r} within {self.metadata_timeout_s:g}s: {e.args[0].str() if e.args else e}") from None
        if not md.brokers:
            raise ClusterUnreachableError(f"the cluster at {self.bootstrap!r} reported no brokers")

    def topic(self, name: str) -> TopicView:
        """The view of a topic, loading it (blocking) the first time; UnknownTopicError if it does not exist."""
        view = self.topics.get(name)
        if view is None:
            with self.lock:
                view = self.topics.get(name)
                if view is None:
                    view = self._load(name)
                    self.topics[name] = view
        if view.unknown:
            raise UnknownTopicError(f"topic {name!r} does not exist in the cluster at {self.bootstrap!r}")
        return view

    def _load(self, name: str) -> TopicView:
        try:
            md = self.admin.list_topics(topic=name, timeout=self.metadata_timeout_s)
        except KafkaException as e:
            raise ClusterUnreachableError(f"cannot get metadata for topic {name!r} from {self.bootstrap!r}: {e}") from None
        t = md.topics.get(name)
        if t is None or t.error is not None and t.error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC) or not t.partitions:
            raise UnknownTopicError(f"topic {name!r} does not exist in the cluster at {self.bootstrap!r}")
        view = TopicView(name, {p: PartitionInfo(pm.leader, tuple(pm.isrs), pm.error.code() if pm.error else 0) for p, pm in t.partitions.items()})
        self._load_configs([view])
        view.recompute(time.monotonic())
        return view

    def _load_configs(self, views: list[TopicView]) -> None:
        futures = self.admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, v.name) for v in views],
                                              request_timeout=self.metadata_timeout_s)
        for v in views:
            fut = next(f for r, f in futures.items() if r.name == v.name)
            try:
                entries = fut.result(timeout=self.metadata_timeout_s + 1)
            except Exception as e:  # keep the last known values; the next round tries again
                log.warning("DescribeConfigs for topic %s failed: %s", v.name, e)
                continue
            if "min.insync.replicas" in entries:
                v.min_isr = int(entries["min.insync.replicas"].value)
            if "max.message.bytes" in entries:
                v.max_message_bytes = int(entries["max.message.bytes"].value)
            v.configs_at = time.monotonic()

    # -- refresh ----------------------------------------------------------------------------
    def refresh(self) -> bool:
        """One Metadata round for the known topics (configs too when due); False when it failed."""
        with self.lock:
            names = [n for n, v in self.topics.items()]
        if not names:
            return True
        try:
            md = self.admin.list_topics(timeout=self.metadata_timeout_s)
        except Exception as e:
            self.refresh_errors += 1
            log.debug("metadata refresh failed: %s", e)
            return False
        now = time.monotonic()
        due = []
        with self.lock:
            for name in names:
                view = self.topics[name]
                t = md.topics.get(name)
                if t is None or (t.error is not None and t.error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC)):
                    view.unknown = True
                    view.partitions = {}
                else:
                    view.unknown = False
                    view.partitions = {p: PartitionInfo(pm.leader, tuple(pm.isrs), pm.error.code() if pm.error else 0)
                                       for p, pm in t.partitions.items()}
                    if now - view.configs_at >= self.config_refresh_s:
                        due.append(view)
                self.offline_events += view.recompute(now)
        if due:
            self._load_configs(due)
            with self.lock:
                for v in due:
                    self.offline_events += v.recompute(time.monotonic())
        self.refreshes += 1
        return True

    # -- the producer's observations ---------------------------------------------------------
    def mark_refused(self, topic: str, partition: int) -> None:
        """The partition refused or lost a record: keep it out for hold_s, doubling on repeats."""
        with self.lock:
            view = self.topics.get(topic)
            if view is None:
                return
            now = time.monotonic()
            until, n = view.penalty.get(partition, (0.0, 0))
            if until > now:   # already out; many records of one batch come back together
                return
            if until + self.hold_max_s < now:   # no refusal for a while after the last hold: a new incident
                n = 0
            view.penalty[partition] = (now + min(self.hold_max_s, self.hold_s * (2 ** n)), n + 1)
            self.offline_events += view.recompute(now)

    def mark_ok(self, topic: str, partition: int) -> None:
        view = self.topics.get(topic)
        if view is not None and partition in view.penalty and view.penalty[partition][0] <= time.monotonic():
            with self.lock:
                view.penalty.pop(partition, None)

    def recheck(self, view: TopicView, now: float) -> None:
        """A penalty ran out: recompute the online list (called when now >= view.recheck_at)."""
        with self.lock:
            if now >= view.recheck_at:
                view.recompute(now)

    def online(self, view: TopicView) -> tuple[tuple[int, ...], frozenset]:
        now = time.monotonic()
        if now >= view.recheck_at:
            with self.lock:
                view.recompute(now)
        return view.online, view.online_set

    def snapshot(self) -> dict[str, dict]:
        with self.lock:
            out = {}
            for name, v in self.topics.items():
                online, _ = v.online, None
                out[name] = {"partitions": v.count, "online": list(online),
                             "offline": [p for p in sorted(v.partitions) if p not in v.online_set],
                             "min_insync_replicas": v.min_isr, "max_message_bytes": v.max_message_bytes,
                             "unknown": v.unknown}
            return out
