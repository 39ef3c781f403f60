"""The message counter and the failed buffer.

The counter holds accepted − acknowledged (records, and their bytes). New input is taken only while
that gap is under its limit, so the failed buffer — which only ever holds accepted, unacknowledged
records — is sized to the limit and can never overflow, and the producer never waits on itself.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import deque


class MessageCounter:
    """accepted − resolved (acknowledged or finally failed), with blocking and asyncio waits.

    The two sides are counted apart so that the producer's hot path takes no lock of its own:
    `take()` is called only under the producer's send lock (one writer of `accepted`), `release()`
    under this counter's lock (any thread). `records` / `bytes` are their difference; a reader that
    sees a stale `resolved` sees less room than there is, never more.
    """

    def __init__(self, max_records: int, max_bytes: int) -> None:
        if max_records < 1 or max_bytes < 1:
            raise ValueError("the message counter's limits must be at least 1")
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.accepted = 0
        self.accepted_bytes = 0
        self.resolved = 0
        self.resolved_bytes = 0
        self.blocked_s = 0.0          # total time input waited for the gap to fall
        self._blocked_since: dict[int, float] = {}   # waits under way (id -> start), for blocked_total_s
        self._tokens = itertools.count()
        self._cond = threading.Condition(threading.Lock())
        self._waiters = 0
        self._async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = []

    @property
    def records(self) -> int:
        return self.accepted - self.resolved

    @property
    def bytes(self) -> int:
        return self.accepted_bytes - self.resolved_bytes

    def room(self, size: int) -> bool:
        # One record always fits into an empty counter, however large it is.
        records = self.accepted - self.resolved
        return records == 0 or (records < self.max_records and self.accepted_bytes - self.resolved_bytes + size <= self.max_bytes)

    def take(self, size: int) -> None:
        """Count one accepted record; the caller holds the producer's send lock."""
        self.accepted += 1
        self.accepted_bytes += size

    def untake(self, size: int) -> None:
        """Undo `take()` (the record was not accepted after all); under the send lock."""
        self.accepted -= 1
        self.accepted_bytes -= size

    def release(self, size: int) -> None:
        with self._cond:
            self.resolved += 1
            self.resolved_bytes += size
            if not self._waiters and not self._async_waiters:
                return   # nobody waits: the common case, keep it cheap
            self._cond.notify_all()
            waiters, self._async_waiters = self._async_waiters, []
        for loop, fut in waiters:
            try:
                loop.call_soon_threadsafe(_wake, fut)
            except RuntimeError:  # that loop is closed
                pass

    def wait_room(self, size: int, timeout: float) -> bool:
        """Wait up to `timeout` for room for a record of `size` bytes; the caller then tries to take it."""
        with self._cond:
            self._waiters += 1
            try:
                return self._cond.wait_for(lambda: self.room(size), timeout)
            finally:
                self._waiters -= 1

    async def wait_room_async(self, size: int, timeout: float) -> bool:
        """The same wait without blocking the event loop."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        with self._cond:
            if self.room(size):
                return True
            self._async_waiters.append((loop, fut))
        try:
            await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            pass
        return self.room(size)

    def wait_empty(self, timeout: float | None) -> bool:
        with self._cond:
            self._waiters += 1
            try:
                return self._cond.wait_for(lambda: self.accepted == self.resolved, timeout)
            finally:
                self._waiters -= 1

    def block_start(self) -> int:
        token = next(self._tokens)
        with self._cond:
            self._blocked_since[token] = time.monotonic()
        return token

    def block_end(self, token: int) -> None:
        with self._cond:
            start = self._blocked_since.pop(token)
            self.blocked_s += time.monotonic() - start

    def blocked_total_s(self) -> float:
        with self._cond:
            now = time.monotonic()
            return self.blocked_s + sum(now - t for t in self._blocked_since.values())


def _wake(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


class FailedBuffer:
    """A bounded FIFO of records that came back and wait to be produced again."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: deque = deque()
        self._lock = threading.Lock()
        self.high_water = 0

    def put(self, item) -> None:
        with self._lock:
            if len(self._items) >= self.capacity:
                # Cannot happen while the counter limit <= capacity; refuse loudly rather than grow.
                raise OverflowError(f"failed buffer full ({self.capacity} records)")
            self._items.append(item)
            self.high_water = max(self.high_water, len(self._items))

    def peek(self):
        with self._lock:
            return self._items[0] if self._items else None

    def pop(self):
        with self._lock:
            return self._items.popleft()

    def rotate(self) -> None:
        """Move the head to the tail (its topic has no online partition; let the others go first)."""
        with self._lock:
            if self._items:
                self._items.rotate(-1)

    def drain(self) -> list:
        with self._lock:
            items = list(self._items)
            self._items.clear()
            return items

    def __len__(self) -> int:
        return len(self._items)
