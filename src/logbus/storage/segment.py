"""One log segment: a `.log` file of record batches plus sparse offset and time indexes.

Files, named by the segment's base offset (`{base_offset:020d}`):

- `.log`        record batches exactly as appended (offsets assigned).
- `.index`      sparse offset index: entries of (relative base offset of a batch int32,
                file position of that batch int32), big endian, one per
                `index_interval_bytes` of log written.
- `.timeindex`  sparse time index: entries of (timestamp int64, relative offset int32):
                the largest timestamp so far and the base offset of the first batch that
                reached it; appended at the same points as the offset index when the
                timestamp grew, and once more when the segment is sealed or closed.

The index entries live in memory (arrays) and are appended to the files as they are
made. Batches are never parsed beyond their 61-byte header.
"""

from __future__ import annotations

import os
import struct
import sys
import time
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

from logbus.protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    read_header,
    scan_valid_prefix,
)

__all__ = ["CorruptSegmentError", "LogSegment", "segment_file_name"]

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")
RECOVERY_CHUNK = 8 << 20
_BIG_ENDIAN = sys.byteorder == "big"
_REL_OFFSET_MAX = 2**31 - 1


class CorruptSegmentError(Exception):
    """A segment's files do not describe a well-formed log (an index or the batch framing)."""


def segment_file_name(base_offset: int, suffix: str = LOG_SUFFIX) -> str:
    return f"{base_offset:020d}{suffix}"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    mv = memoryview(data)
    while mv:
        n = os.write(fd, mv)
        mv = mv[n:]


def _pread_exact(fd: int, size: int, pos: int) -> bytes:
    data = os.pread(fd, size, pos)
    if len(data) == size:
        return data
    parts = [data]
    got = len(data)
    while got < size:
        more = os.pread(fd, size - got, pos + got)
        if not more:
            raise CorruptSegmentError(f"short read: wanted {size} bytes at {pos}, file ends at {pos + got}")
        parts.append(more)
        got += len(more)
    return b"".join(parts)


class LogSegment:
    """Use `LogSegment.create` for a new segment or `LogSegment.open` then `load()` or
    `recover()` for an existing one."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        segment_index_bytes: int,
        truncate_files: bool,
        now_ms: int | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_index_entries = max(1, segment_index_bytes // OFFSET_ENTRY.size)
        self.max_time_entries = max(2, segment_index_bytes // TIME_ENTRY.size)
        self.log_path = self.directory / segment_file_name(base_offset, LOG_SUFFIX)
        self.index_path = self.directory / segment_file_name(base_offset, INDEX_SUFFIX)
        self.timeindex_path = self.directory / segment_file_name(base_offset, TIMEINDEX_SUFFIX)
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        if truncate_files:
            flags |= os.O_TRUNC
        self._indexes_existed = self.index_path.exists() and self.timeindex_path.exists()
        self._log_fd = os.open(self.log_path, flags, 0o644)
        self._index_fd = os.open(self.index_path, flags, 0o644)
        self._timeindex_fd = os.open(self.timeindex_path, flags, 0o644)
        self.created_ms = _now_ms() if now_ms is None else now_ms
        self._reset_state(os.fstat(self._log_fd).st_size)

    def _reset_state(self, size: int) -> None:
        self.size = size
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.first_batch_timestamp: int | None = None
        self._bytes_since_index = 0
        self._index_rel = array("i")
        self._index_pos = array("i")
        self._time_ts = array("q")
        self._time_rel = array("i")

    # -- construction -------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        segment_index_bytes: int,
        now_ms: int | None = None,
    ) -> LogSegment:
        """A new, empty segment (any files already there under its name are emptied)."""
        return cls(
            directory,
            base_offset,
            index_interval_bytes=index_interval_bytes,
            segment_index_bytes=segment_index_bytes,
            truncate_files=True,
            now_ms=now_ms,
        )

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        segment_index_bytes: int,
        now_ms: int | None = None,
    ) -> LogSegment:
        """Open an existing segment's files; call `load()` or `recover()` next."""
        return cls(
            directory,
            base_offset,
            index_interval_bytes=index_interval_bytes,
            segment_index_bytes=segment_index_bytes,
            truncate_files=False,
            now_ms=now_ms,
        )

    def load(self) -> bool:
        """Trust the log and load the indexes from disk, checking they are sane.

        Reads only the index files and the batch headers after the last offset index entry.
        Returns False (state reset) when something does not add up; then call `recover()`.
        """
        try:
            if not self._indexes_existed:
                raise CorruptSegmentError(f"{self.index_path} or its time index is missing")
            self._load_indexes()
            self._load_tail()
        except (CorruptSegmentError, struct.error):
            self._reset_state(os.fstat(self._log_fd).st_size)
            return False
        return True

    def _load_indexes(self) -> None:
        raw = os.pread(self._index_fd, os.fstat(self._index_fd).st_size, 0)
        if len(raw) % OFFSET_ENTRY.size:
            raise CorruptSegmentError(f"{self.index_path} has a partial entry")
        pairs = array("i")
        pairs.frombytes(raw)
        if not _BIG_ENDIAN:
            pairs.byteswap()
        rel, pos = pairs[0::2], pairs[1::2]
        for i in range(len(rel)):
            if rel[i] < 0 or pos[i] < 0 or pos[i] >= self.size:
                raise CorruptSegmentError(f"{self.index_path} entry {i} is out of range")
            if i and (rel[i] <= rel[i - 1] or pos[i] <= pos[i - 1]):
                raise CorruptSegmentError(f"{self.index_path} entry {i} is out of order")
        raw = os.pread(self._timeindex_fd, os.fstat(self._timeindex_fd).st_size, 0)
        if len(raw) % TIME_ENTRY.size:
            raise CorruptSegmentError(f"{self.timeindex_path} has a partial entry")
        ts, trel = array("q"), array("i")
        for i, (t, r) in enumerate(TIME_ENTRY.iter_unpack(raw)):
            if r < 0 or (i and (t <= ts[-1] or r < trel[-1])):
                raise CorruptSegmentError(f"{self.timeindex_path} entry {i} is out of order")
            ts.append(t)
            trel.append(r)
        self._index_rel, self._index_pos = rel, pos
        self._time_ts, self._time_rel = ts, trel

    def _load_tail(self) -> None:
        """Derive next_offset, max timestamp and index bookkeeping from the indexes plus a
        header walk from the last offset index entry to the end of the log."""
        start = self._index_pos[-1] if self._index_pos else 0
        if self._time_ts:
            self.max_timestamp = self._time_ts[-1]
            self.offset_of_max_timestamp = self.base_offset + self._time_rel[-1]
        else:
            self.max_timestamp = self.offset_of_max_timestamp = -1
        next_offset = self.base_offset
        if self._index_rel:
            next_offset = self.base_offset + self._index_rel[-1]
        last = None
        for pos, h in self._walk(start, self.size):
            if h.base_offset < next_offset:
                raise CorruptSegmentError(f"{self.log_path}: offsets go backwards at position {pos}")
            next_offset = h.next_offset
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp = h.max_timestamp
                self.offset_of_max_timestamp = h.base_offset
            last = pos + h.size
        if last is None and self._index_rel:
            raise CorruptSegmentError(f"{self.index_path} points past the log")
        self.next_offset = next_offset
        if self._time_rel and self._time_rel[-1] >= next_offset - self.base_offset:
            raise CorruptSegmentError(f"{self.timeindex_path} points past the log")
        self._bytes_since_index = self.size - start
        self.first_batch_timestamp = None
        if self.size:
            self.first_batch_timestamp = self._header_at(0).max_timestamp

    def recover(self, min_offset: int | None = None) -> int:
        """Scan the whole log (CRC checked), truncate at the first torn or corrupt batch or
        at offsets going backwards, and rebuild both indexes. Returns the bytes truncated."""
        fd = self._log_fd
        file_size = os.fstat(fd).st_size
        self._reset_state(0)
        expected = self.base_offset if min_offset is None else max(min_offset, self.base_offset)
        pos = 0
        want = RECOVERY_CHUNK
        while pos < file_size:
            buf = os.pread(fd, min(want, file_size - pos), pos)
            want = RECOVERY_CHUNK
            headers, n = scan_valid_prefix(buf)
            good = 0
            for h in headers:
                if h.base_offset < expected:
                    break
                expected = h.next_offset
                good += 1
            if good < len(headers):
                headers = headers[:good]
                n = headers[-1].position + headers[-1].size if headers else 0
                self._index_batches(headers, pos)
                pos += n
                break
            self._index_batches(headers, pos)
            pos += n
            rest = len(buf) - n
            if rest == 0:
                continue
            if pos + rest >= file_size:
                break  # the bad bytes run to the end of the file: a torn or corrupt tail
            if rest < LOG_OVERHEAD:
                continue  # the chunk cut a header short: read on from pos
            size = struct.unpack_from(">i", buf, n + 8)[0] + LOG_OVERHEAD
            if HEADER_SIZE <= size and rest < size and pos + size <= file_size:
                want = max(size, RECOVERY_CHUNK)  # the chunk cut a batch short
                continue
            break  # a whole batch is there and it is bad
        truncated = file_size - pos
        if truncated:
            os.ftruncate(fd, pos)
        self.size = pos
        self._rewrite_index_files()
        self.first_batch_timestamp = self._header_at(0).max_timestamp if pos else None
        return truncated

    def _rewrite_index_files(self) -> None:
        os.ftruncate(self._index_fd, 0)
        os.ftruncate(self._timeindex_fd, 0)
        entries = bytearray()
        for rel, pos in zip(self._index_rel, self._index_pos):
            entries += OFFSET_ENTRY.pack(rel, pos)
        _write_all(self._index_fd, entries)
        entries = bytearray()
        for ts, rel in zip(self._time_ts, self._time_rel):
            entries += TIME_ENTRY.pack(ts, rel)
        _write_all(self._timeindex_fd, entries)

    # -- appending ----------------------------------------------------------------------

    def _index_batches(self, batches: list[BatchHeader], start: int) -> tuple[bytes, bytes]:
        """Account for batches written at file position `start` + their position; returns
        the new index and time index entries (already added in memory)."""
        if not batches:
            return b"", b""
        base = self.base_offset
        interval = self.index_interval_bytes
        since = self._bytes_since_index
        max_ts = self.max_timestamp
        offset_of_max = self.offset_of_max_timestamp
        new_index = b""
        new_time = b""
        for b in batches:
            if b.max_timestamp > max_ts:
                max_ts = b.max_timestamp
                offset_of_max = b.base_offset
            if since > interval:
                rel = b.base_offset - base
                pos = start + b.position
                self._index_rel.append(rel)
                self._index_pos.append(pos)
                new_index += OFFSET_ENTRY.pack(rel, pos)
                if max_ts >= 0 and (not self._time_ts or max_ts > self._time_ts[-1]):
                    self._time_ts.append(max_ts)
                    self._time_rel.append(offset_of_max - base)
                    new_time += TIME_ENTRY.pack(max_ts, offset_of_max - base)
                since = 0
            since += b.size
        self._bytes_since_index = since
        self.max_timestamp = max_ts
        self.offset_of_max_timestamp = offset_of_max
        self.next_offset = batches[-1].next_offset
        return new_index, new_time

    def append(self, data: bytes | bytearray, batches: list[BatchHeader]) -> None:
        """Append batches whose offsets are final; `batches[i].position` is relative to `data`."""
        if not batches:
            return
        start = self.size
        try:
            _write_all(self._log_fd, data)
        except BaseException:
            os.ftruncate(self._log_fd, start)  # leave no partial batch behind
            raise
        if start == 0:
            self.first_batch_timestamp = batches[0].max_timestamp
        self.size = start + len(data)
        new_index, new_time = self._index_batches(batches, start)
        if new_index:
            _write_all(self._index_fd, new_index)
        if new_time:
            _write_all(self._timeindex_fd, new_time)

    def can_hold(self, last_offset: int) -> bool:
        """Whether offsets up to last_offset fit the index's 32-bit relative offsets."""
        return last_offset - self.base_offset <= _REL_OFFSET_MAX

    @property
    def index_full(self) -> bool:
        return (
            len(self._index_rel) >= self.max_index_entries
            or len(self._time_ts) >= self.max_time_entries - 1
        )

    def time_waited_for_roll(self, now_ms: int, max_timestamp_in_messages: int) -> int:
        """Kafka's rule: time since the first batch's timestamp, else since creation."""
        t = self.first_batch_timestamp
        if t is not None and t >= 0 and max_timestamp_in_messages >= 0:
            return max_timestamp_in_messages - t
        return now_ms - self.created_ms

    def seal(self) -> None:
        """Record the final largest timestamp in the time index (on roll and on close)."""
        if self.max_timestamp >= 0 and (not self._time_ts or self.max_timestamp > self._time_ts[-1]):
            rel = self.offset_of_max_timestamp - self.base_offset
            self._time_ts.append(self.max_timestamp)
            self._time_rel.append(rel)
            _write_all(self._timeindex_fd, TIME_ENTRY.pack(self.max_timestamp, rel))

    # -- reading ------------------------------------------------------------------------

    def _header_at(self, pos: int) -> BatchHeader:
        raw = os.pread(self._log_fd, HEADER_SIZE, pos)
        if len(raw) < HEADER_SIZE:
            raise CorruptSegmentError(f"{self.log_path}: no whole batch header at position {pos}")
        h = read_header(raw)
        if raw[16] != 2 or h.size < HEADER_SIZE or pos + h.size > self.size:
            raise CorruptSegmentError(f"{self.log_path}: bad batch header at position {pos}")
        h.position = pos
        return h

    def _walk(self, pos: int, end: int):
        """Yield (position, header) of the batches from pos up to end, headers only."""
        while pos < end:
            h = self._header_at(pos)
            yield pos, h
            pos += h.size

    def _floor_position(self, offset: int) -> int:
        """File position of the indexed batch with the largest base offset <= offset."""
        i = bisect_right(self._index_rel, offset - self.base_offset) - 1
        return self._index_pos[i] if i >= 0 else 0

    def locate(self, offset: int) -> BatchHeader | None:
        """The first batch whose last offset >= offset (its `position` is in this file)."""
        if offset >= self.next_offset:
            return None
        for _pos, h in self._walk(self._floor_position(offset), self.size):
            if h.last_offset >= offset:
                return h
        return None

    def headers_from(self, offset: int):
        """Headers of the batches holding offsets >= offset, in log order (header reads only)."""
        if offset >= self.next_offset:
            return
        for _pos, h in self._walk(self._floor_position(offset), self.size):
            if h.last_offset >= offset:
                yield h

    def position_of_base_at_least(self, offset: int) -> int:
        """File position of the first batch whose base offset >= offset (size if none)."""
        if offset >= self.next_offset:
            return self.size
        for pos, h in self._walk(self._floor_position(offset), self.size):
            if h.base_offset >= offset:
                return pos
        return self.size

    def read_range(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> tuple[int, int] | None:
        """(start, end) file positions of whole batches to return for a read from
        start_offset, or None if there is nothing here. See PartitionLog.read."""
        first = self.locate(start_offset)
        if first is None:
            return None
        if max_offset is not None and first.base_offset >= max_offset:
            return None
        start = first.position
        limit = self.size
        if max_offset is not None and max_offset < self.next_offset:
            limit = self.position_of_base_at_least(max_offset)
        want = start + max(max_bytes, 0)
        if want >= limit:
            return start, limit
        # the last batch boundary at or before `want`: walk from the nearest index entry
        i = bisect_right(self._index_pos, want) - 1
        pos = max(start, self._index_pos[i]) if i >= 0 else start
        for p, h in self._walk(pos, limit):
            if p + h.size > want:
                pos = p
                break
        if pos == start:
            if not min_one_batch:
                return None
            pos = start + first.size
        return start, pos

    def read_bytes(self, start: int, end: int) -> bytes:
        return _pread_exact(self._log_fd, end - start, start)

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> bytes:
        rng = self.read_range(start_offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch)
        return self.read_bytes(*rng) if rng else b""

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int = 0
    ) -> tuple[int, int] | None:
        """(base offset, max timestamp) of the first batch whose max timestamp >= timestamp,
        among batches whose last offset >= starting_offset."""
        if self.max_timestamp < timestamp:
            return None
        i = bisect_left(self._time_ts, timestamp) - 1
        pos = self._floor_position(self.base_offset + self._time_rel[i]) if i >= 0 else 0
        pos = max(pos, self._floor_position(starting_offset))
        for _p, h in self._walk(pos, self.size):
            if h.max_timestamp >= timestamp and h.last_offset >= starting_offset:
                return h.base_offset, h.max_timestamp
        return None

    # -- truncation, durability, lifecycle ----------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset >= offset. Returns the bytes removed."""
        first = self.locate(offset)
        if first is None:
            return 0
        pos = first.position
        removed = self.size - pos
        os.ftruncate(self._log_fd, pos)
        self.size = pos
        keep = bisect_left(self._index_pos, pos)
        del self._index_rel[keep:]
        del self._index_pos[keep:]
        keep_t = bisect_left(self._time_rel, first.base_offset - self.base_offset)
        del self._time_ts[keep_t:]
        del self._time_rel[keep_t:]
        os.ftruncate(self._index_fd, keep * OFFSET_ENTRY.size)
        os.ftruncate(self._timeindex_fd, keep_t * TIME_ENTRY.size)
        self._load_tail()
        return removed

    def flush(self) -> None:
        os.fsync(self._log_fd)
        os.fsync(self._index_fd)
        os.fsync(self._timeindex_fd)

    @property
    def last_modified_ms(self) -> int:
        return os.fstat(self._log_fd).st_mtime_ns // 1_000_000

    @property
    def largest_timestamp(self) -> int:
        """Largest record timestamp, or the file's mtime if no batch carries one (Kafka's rule)."""
        return self.max_timestamp if self.max_timestamp >= 0 else self.last_modified_ms

    @property
    def closed(self) -> bool:
        return self._log_fd < 0

    def close(self) -> None:
        if self._log_fd < 0:
            return
        try:
            self.seal()
        finally:
            for fd in (self._log_fd, self._index_fd, self._timeindex_fd):
                os.close(fd)
            self._log_fd = self._index_fd = self._timeindex_fd = -1

    def delete(self) -> None:
        if self._log_fd >= 0:
            for fd in (self._log_fd, self._index_fd, self._timeindex_fd):
                os.close(fd)
            self._log_fd = self._index_fd = self._timeindex_fd = -1
        for p in (self.log_path, self.index_path, self.timeindex_path):
            try:
                p.unlink()
            except FileNotFoundError:
                pass

    def __repr__(self) -> str:
        return (
            f"LogSegment(base_offset={self.base_offset}, next_offset={self.next_offset}, "
            f"size={self.size})"
        )
