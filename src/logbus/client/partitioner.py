"""Picking partitions over the *online* partitions of a topic.

A partition is online when it has a leader and its in-sync replicas number at least the topic's
min.insync.replicas (and the producer has not just seen it refuse records). Keyed records keep the
partition their key hashes to over *all* partitions while that partition is online; when it is
offline they go to an online partition chosen by the same hash over the online list, so one key
still lands in one place during a failover. Unkeyed records go round-robin, or stick to one online
partition until `sticky_bytes` were sent to it or `sticky_linger_s` passed (larger batches, fewer
requests; the time bound keeps every online partition in use at low rates, like librdkafka's
sticky.partitioning.linger.ms).
"""

from __future__ import annotations

import time
import zlib
from typing import Callable, Sequence

ROUND_ROBIN = "round-robin"
STICKY = "sticky"
PARTITIONERS = (ROUND_ROBIN, STICKY)
KEY_HASHES = ("crc32", "murmur2")


def crc32_partition(key: bytes, count: int) -> int:
    """librdkafka's default for keyed records (consistent_random): CRC-32 of the key modulo the count."""
    return zlib.crc32(key) % count


def murmur2(data: bytes) -> int:
    """Kafka's Java client murmur2 (seed 0x9747b28c), as a signed 32-bit int."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(data[i * 4:i * 4 + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length % 4
    tail = data[n4 * 4:]
    if rest == 3:
        h ^= tail[2] << 16
    if rest >= 2:
        h ^= tail[1] << 8
    if rest >= 1:
        h ^= tail[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def murmur2_partition(key: bytes, count: int) -> int:
    """The Java client's default for keyed records: positive murmur2 modulo the count."""
    return (murmur2(key) & 0x7FFFFFFF) % count


def key_hash_function(name: str) -> Callable[[bytes, int], int]:
    if name == "crc32":
        return crc32_partition
    if name == "murmur2":
        return murmur2_partition
    raise ValueError(f"key_hash must be one of {', '.join(KEY_HASHES)}, not {name!r}")


class OnlinePartitioner:
    """Chooses a partition of one topic from its online list; not thread-safe (the producer locks)."""

    def __init__(self, strategy: str = STICKY, sticky_bytes: int = 16384, key_hash: str = "crc32",
                 sticky_linger_s: float = 0.01) -> None:
        if strategy not in PARTITIONERS:
            raise ValueError(f"partitioner must be one of {', '.join(PARTITIONERS)}, not {strategy!r}")
        self.strategy = strategy
        self.sticky_bytes = max(1, sticky_bytes)
        self.sticky_linger_s = sticky_linger_s
        self._sticky_since = 0.0
        self._hash = key_hash_function(key_hash)
        self._next = 0          # round-robin position, and the sticky partition's position
        self._sticky: int | None = None
        self._sticky_sent = 0
        self.failover = False   # set by pick(): the last keyed record went away from its hash partition
        # The sticky partition may take `sticky_left` more bytes until `sticky_until` (the producer's
        # hot path reads these two directly; 0 when there is no sticky partition, as for round-robin).
        self.sticky_left = 0
        self.sticky_until = 0.0

    def reset(self) -> None:
        """The online list changed: choose the sticky partition afresh."""
        self.sticky_left = 0
        self._sticky = None

    def pick(self, key: bytes | None, size: int, count: int, online: Sequence[int], online_set, now: float) -> int:
        """The partition for one record, -1 when nothing is online; `self.failover` tells whether a
        keyed record was placed away from its hash partition. The producer's hot path: no allocation."""
        if key is not None:
            if not online:
                return -1
            home = self._hash(key, count)
            if home in online_set:
                self.failover = False
                return home
            self.failover = True
            return online[self._hash(key, len(online))]
        self.failover = False
        sticky = self._sticky
        if sticky is not None and self._sticky_sent < self.sticky_bytes and now - self._sticky_since < self.sticky_linger_s \
                and sticky in online_set and self.strategy == STICKY:
            self._sticky_sent += size
            self.sticky_left -= size
            return sticky
        if not online:
            return -1
        self._next = (self._next + 1) % len(online)
        if self.strategy == ROUND_ROBIN:
            return online[self._next]
        self._sticky = online[self._next]
        self._sticky_sent = size
        self._sticky_since = now
        self.sticky_left = self.sticky_bytes - size
        self.sticky_until = now + self.sticky_linger_s
        return self._sticky

    def choose(self, key: bytes | None, size: int, count: int, online: Sequence[int], online_set) -> tuple[int | None, bool]:
        """(partition or None when nothing is online, whether this is a failover from the key's partition)."""
        if not online:
            return None, False
        if key is not None:
            home = self._hash(key, count)
            if home in online_set:
                return home, False
            return online[self._hash(key, len(online))], True
        if self.strategy == ROUND_ROBIN:
            self._next = (self._next + 1) % len(online)
            return online[self._next], False
        now = time.monotonic()
        if self._sticky is None or self._sticky not in online_set or self._sticky_sent >= self.sticky_bytes \
                or now - self._sticky_since >= self.sticky_linger_s:
            self._next = (self._next + 1) % len(online)
            self._sticky = online[self._next]
            self._sticky_sent = 0
            self._sticky_since = now
        self._sticky_sent += size
        return self._sticky, False
