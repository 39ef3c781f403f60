"""The message counter and the failed buffer.

The counter holds accepted − acknowledged (records, and their bytes). New input is taken only while
that gap is under its limit, so the failed buffer — which only ever holds accepted, unacknowledged
records — is sized to the limit and can never overflow, and the producer never waits on itself.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque


class MessageCounter:
    """accepted − resolved (acknowledged or finally failed), with blocking and asyncio waits."""

    def __init__(self, max_records: int, max_bytes: int) -> None:
        if max_records < 1 or max_bytes < 1:
            raise ValueError("the message counter's limits must be at least 1")
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.records = 0
        self.bytes = 0
        self.accepted = 0
        self.resolved = 0
        self.blocked_s = 0.0          # total time input waited for the gap to fall
        self.blocked_now_since: float | None = None
        self._cond = threading.Condition()
        self._sync_waiters = 0
        self._async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = []

    def _room(self, size: int) -> bool:
        # One record always fits into an empty counter, however large it is.
        return self.records == 0 or (self.records < self.max_records and self.bytes + size <= self.max_bytes)

    def try_acquire(self, size: int) -> bool:
        with self._cond:
            if not self._room(size):
                return False
            self._take(size)
            return True

    def _take(self, size: int) -> None:
        self.records += 1
        self.bytes += size
        self.accepted += 1

    def acquire(self, size: int, timeout: float | None = None, closed=lambda: False) -> bool:
        """Block while the gap is at its limit; False when `timeout` passed (or `closed()` became true)."""
        with self._cond:
            if self._room(size):
                self._take(size)
                return True
            start = time.monotonic()
            deadline = None if timeout is None else start + timeout
            self.blocked_now_since = self.blocked_now_since or start
            self._sync_waiters += 1
            try:
                while not self._room(size):
                    if closed():
                        return False
                    wait = 0.2 if deadline is None else min(0.2, deadline - time.monotonic())
                    if wait <= 0:
                        return False
                    self._cond.wait(wait)
                self._take(size)
                return True
            finally:
                self._sync_waiters -= 1
                self.blocked_s += time.monotonic() - start
                self.blocked_now_since = None

    async def acquire_async(self, size: int, timeout: float | None = None, closed=lambda: False) -> bool:
        """The same wait without blocking the event loop."""
        if self.try_acquire(size):
            return True
        loop = asyncio.get_running_loop()
        start = time.monotonic()
        deadline = None if timeout is None else start + timeout
        try:
            while True:
                fut = loop.create_future()
                with self._cond:
                    if self._room(size):
                        self._take(size)
                        return True
                    self._async_waiters.append((loop, fut))
                    self.blocked_now_since = self.blocked_now_since or start
                if closed():
                    return False
                wait = 0.2 if deadline is None else min(0.2, deadline - time.monotonic())
                if wait <= 0:
                    return False
                try:
                    await asyncio.wait_for(fut, wait)
                except asyncio.TimeoutError:
                    pass
        finally:
            with self._cond:
                self.blocked_s += time.monotonic() - start
                self.blocked_now_since = None

    def release(self, size: int) -> None:
        with self._cond:
            self.records -= 1
            self.bytes -= size
            self.resolved += 1
            if not self._sync_waiters and not self._async_waiters:
                return   # nobody waits: the common case, keep it cheap
            self._cond.notify_all()
            waiters, self._async_waiters = self._async_waiters, []
        for loop, fut in waiters:
            try:
                loop.call_soon_threadsafe(_wake, fut)
            except RuntimeError:  # that loop is closed
                pass

    def wait_empty(self, timeout: float | None) -> bool:
        with self._cond:
            self._sync_waiters += 1
            try:
                return self._cond.wait_for(lambda: self.records == 0, timeout)
            finally:
                self._sync_waiters -= 1

    def blocked_total_s(self) -> float:
        with self._cond:
            now = time.monotonic()
            return self.blocked_s + (now - self.blocked_now_since if self.blocked_now_since else 0.0)


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
