"""A partition's log: a directory `{topic}-{partition}` of segments, Kafka's model."""

from __future__ import annotations

import logging
import re
import shutil
import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from logbus.protocol.records import BatchHeader, assign_offsets
from logbus.storage.config import LogConfig
from logbus.storage.files import fsync_dir
from logbus.storage.leader_epoch import LeaderEpochCache
from logbus.storage.producer_state import ProducerStateManager
from logbus.storage.segment import LOG_SUFFIX, LogSegment

__all__ = ["AppendResult", "OffsetOutOfRangeError", "PartitionLog"]

log = logging.getLogger(__name__)

_SEGMENT_FILE = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex)$")


class OffsetOutOfRangeError(Exception):
    """A read outside [log_start_offset, log_end_offset]; Kafka's OFFSET_OUT_OF_RANGE (1)."""

    error_code = 1

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(
            f"offset {offset} is outside the log's range "
            f"[{log_start_offset}, {log_end_offset}]"
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


@dataclass(slots=True)
class AppendResult:
    base_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int = -1
    #: the batches were a producer's retry of batches already in the log: nothing was appended,
    #: and the offsets are those the original got
    duplicate: bool = False


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class PartitionLog:
    def __init__(
        self,
        path: Path,
        config: LogConfig,
        segments: list[LogSegment],
        log_start_offset: int,
        recovery_point: int,
    ) -> None:
        self.path = path
        self._config = config
        self._segments = segments
        self._log_start_offset = log_start_offset
        self._recovery_point = recovery_point
        self.leader_epochs = LeaderEpochCache(path)
        #: milliseconds since the epoch; replaceable for tests
        self.clock: Callable[[], int] = _now_ms
        self._unflushed_records = 0
        self._last_flush_ms = self.clock()
        #: idempotent producers' epochs and last batches (see producer_state.py)
        self.producer_state = ProducerStateManager(path)

    # -- opening and recovery -----------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: Path,
        config: LogConfig,
        recovery_point: int = 0,
        log_start_offset: int | None = None,
    ) -> PartitionLog:
        """Load the partition directory (creating it if absent).

        Segments wholly below recovery_point are trusted (indexes loaded, or rebuilt if
        missing or inconsistent). Later segments are scanned with their CRCs checked: a torn
        or corrupt tail is truncated and any segments after it are deleted.
        """
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        bases = cls._segment_bases(path)
        seg_args = dict(
            index_interval_bytes=config.index_interval_bytes,
            segment_index_bytes=config.segment_index_bytes,
        )
        segments: list[LogSegment] = []
        discard_rest = False
        for i, base in enumerate(bases):
            seg = LogSegment.open(path, base, **seg_args)
            if discard_rest or (segments and base < segments[-1].next_offset):
                log.warning("%s: deleting segment %d after a corrupt point", path, base)
                seg.delete()
                discard_rest = True
                continue
            next_base = bases[i + 1] if i + 1 < len(bases) else None
            trusted = next_base is not None and next_base <= recovery_point
            loaded = False
            if trusted or next_base is None:
                loaded = seg.load()
                if loaded and next_base is None and seg.next_offset > recovery_point:
                    loaded = False  # the tail after the recovery point must be checked
                elif not loaded and trusted:
                    log.warning("%s: rebuilding the indexes of segment %d", path, base)
            if not loaded:
                prev_next = segments[-1].next_offset if segments else None
                truncated = seg.recover(min_offset=prev_next)
                if truncated:
                    log.warning(
                        "%s: truncated %d bytes of torn or corrupt data from segment %d "
                        "(log end now %d)", path, truncated, base, seg.next_offset,
                    )  # fmt: skip
                    if not trusted:
                        discard_rest = True
            segments.append(seg)

        if not segments:
            start = log_start_offset or 0
            segments.append(LogSegment.create(path, start, **seg_args))
        lso = segments[0].base_offset
        if log_start_offset is not None:
            lso = max(lso, log_start_offset)
        plog = cls(path, config, segments, lso, 0)
        if lso > plog.log_end_offset:
            plog._truncate_fully_and_start_at(lso)
        else:
            plog._delete_segments_below_log_start()
        plog._recovery_point = min(max(recovery_point, plog._log_start_offset), plog.log_end_offset)
        plog._load_producer_state()
        plog._load_leader_epochs()
        return plog

    def _load_leader_epochs(self) -> None:
        """The cache must not claim epochs past the recovered log end; a lost or damaged
        checkpoint is rebuilt from the batches' partition leader epochs (headers only)."""
        cache = self.leader_epochs
        cache.truncate_from_end(self.log_end_offset)
        if not cache.entries and self.log_end_offset > self._log_start_offset:
            for seg in self._segments:
                for h in seg.headers_from(self._log_start_offset):
                    cache.assign(h.partition_leader_epoch, h.base_offset)
        cache.truncate_from_start(self._log_start_offset)

    def _load_producer_state(self) -> None:
        """Load the newest usable producer snapshot and replay batch headers from there to the
        log end. A snapshot is written only for flushed data (at a roll, after the flush, and
        at a clean close), so any snapshot at or below the recovered log end describes it."""
        ps = self.producer_state
        end = self.log_end_offset
        first_base = self._segments[0].base_offset
        ps.delete_snapshots(above=end)
        start = ps.load_latest_snapshot(end, first_base)
        if start is None:
            start = first_base
        replayed = 0
        if start < end:
            for seg in self._segments:
                if seg.next_offset <= start:
                    continue
                batch = [h for h in seg.headers_from(start) if h.producer_id >= 0]
                replayed += len(batch)
                ps.update(batch)
        ps.evict_below(self._log_start_offset)
        ps.delete_snapshots(below=first_base)
        if replayed:
            log.info("%s: producer state rebuilt from offset %d (%d idempotent batches replayed)", self.path, start, replayed)

    @staticmethod
    def _segment_bases(path: Path) -> list[int]:
        logs: set[int] = set()
        others: dict[int, list[Path]] = {}
        for entry in path.iterdir():
            m = _SEGMENT_FILE.match(entry.name)
            if not m:
                continue
            base = int(m.group(1))
            if m.group(2) == LOG_SUFFIX:
                logs.add(base)
            else:
                others.setdefault(base, []).append(entry)
        for base, files in others.items():
            if base not in logs:
                for f in files:  # an index without its log: a leftover of a deletion
                    f.unlink(missing_ok=True)
        return sorted(logs)

    # -- properties ---------------------------------------------------------------------

    @property
    def config(self) -> LogConfig:
        return self._config

    def update_config(self, config: LogConfig) -> None:
        self._config = config
        self.active_segment.index_interval_bytes = config.index_interval_bytes

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    # -- appending ----------------------------------------------------------------------

    def append(self, data: bytes | bytearray, batches: list[BatchHeader], *, leader_epoch: int | None = None) -> AppendResult:
        """Append batches validated by parse_batches as the leader: assign offsets (and stamp
        `leader_epoch`), roll, write, flush by policy. The headers in `batches` are updated to
        the assigned offsets."""
        if not batches:
            raise ValueError("append needs at least one batch")
        cfg = self._config
        now = self.clock()
        append_time = now if cfg.log_append_time else None
        idempotent = False
        for b in batches:
            if b.producer_id >= 0:
                idempotent = True
                dup = self.producer_state.validate(batches, self._log_start_offset)
                if dup is not None:
                    first, last, max_ts = dup[2], dup[3], dup[4]
                    return AppendResult(first, last, max_ts, first, max_ts if append_time is not None else -1, duplicate=True)
                break
        base = self.log_end_offset
        out, last, max_ts, offset_of_max = assign_offsets(
            data, batches, base, log_append_time_ms=append_time, partition_leader_epoch=leader_epoch
        )
        if leader_epoch is not None:
            self.leader_epochs.assign(leader_epoch, base)
        self._write(out, batches, last, max_ts, now, idempotent)
        return AppendResult(base, last, max_ts, offset_of_max, -1 if append_time is None else now)

    def append_as_follower(self, data: bytes | bytearray, batches: list[BatchHeader]) -> None:
        """Append batches copied from the leader, offsets and epochs as the leader gave them."""
        if not batches:
            return
        if batches[0].base_offset != self.log_end_offset:
            raise ValueError(f"{self.path.name}: follower append at {batches[0].base_offset}, log ends at {self.log_end_offset}")
        for b in batches:
            self.leader_epochs.assign(b.partition_leader_epoch, b.base_offset)
        idempotent = any(b.producer_id >= 0 for b in batches)
        self._write(data, batches, batches[-1].last_offset, max(b.max_timestamp for b in batches), self.clock(), idempotent)

    def _write(self, out, batches: list[BatchHeader], last: int, max_ts: int, now: int, idempotent: bool) -> None:
        cfg = self._config
        seg = self._segments[-1]
        if seg.size > 0 and (
            seg.size + len(out) > cfg.segment_bytes
            or seg.time_waited_for_roll(now, max_ts) > cfg.segment_ms
            or seg.index_full
            or not seg.can_hold(last)
        ):
            seg = self.roll()
        seg.append(out, batches)
        if idempotent:
            self.producer_state.update(batches)
        self._unflushed_records += sum(b.record_count for b in batches)
        if (
            self._unflushed_records >= cfg.flush_messages
            or now - self._last_flush_ms >= cfg.flush_ms
        ):
            self.flush()

    def roll(self) -> LogSegment:
        """Seal the active segment, flush it, and start a new one at the log end offset."""
        old = self._segments[-1]
        if old.size == 0:
            return old
        new_base = self.log_end_offset
        old.seal()
        for seg in self._segments:
            if seg.next_offset > self._recovery_point:
                seg.flush()
        self._recovery_point = max(self._recovery_point, new_base)
        self.producer_state.write_snapshot(new_base)  # after the flush: it describes flushed data
        new = LogSegment.create(
            self.path,
            new_base,
            index_interval_bytes=self._config.index_interval_bytes,
            segment_index_bytes=self._config.segment_index_bytes,
            now_ms=self.clock(),
        )
        self._segments.append(new)
        fsync_dir(self.path)
        return new

    def flush(self) -> None:
        """fsync everything written since the last flush; the recovery point moves to the end."""
        for seg in reversed(self._segments):
            if seg.next_offset <= self._recovery_point and seg is not self._segments[-1]:
                break
            seg.flush()
        self._recovery_point = self.log_end_offset
        self._unflushed_records = 0
        self._last_flush_ms = self.clock()

    def flush_if_due(self, now_ms: int | None = None) -> bool:
        """Flush if flush.ms has passed since the last flush and something is unflushed."""
        now = self.clock() if now_ms is None else now_ms
        if self._unflushed_records and now - self._last_flush_ms >= self._config.flush_ms:
            self.flush()
            return True
        return False

    # -- reading ------------------------------------------------------------------------

    def _segment_index_for(self, offset: int) -> int:
        bases = [s.base_offset for s in self._segments]
        return max(0, bisect_right(bases, offset) - 1)

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> bytes:
        """Whole batches from the one containing `offset`, up to max_bytes, leaving out
        batches whose base offset >= max_offset; with min_one_batch a first batch larger
        than max_bytes is returned whole (KIP-74)."""
        if offset < self._log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(offset, self._log_start_offset, self.log_end_offset)
        if offset == self.log_end_offset:
            return b""
        parts: list[bytes] = []
        budget = max_bytes
        min_one = min_one_batch
        segments = self._segments
        i = self._segment_index_for(offset)
        while i < len(segments):
            seg = segments[i]
            rng = seg.read_range(offset, budget, max_offset=max_offset, min_one_batch=min_one)
            if rng is None:
                if offset < seg.next_offset:
                    break  # limited by max_offset or by the budget
            else:
                start, end = rng
                parts.append(seg.read_bytes(start, end))
                budget -= end - start
                min_one = False
                if end < seg.size or budget <= 0:
                    break
            i += 1
            if i < len(segments):
                offset = segments[i].base_offset
                if max_offset is not None and offset >= max_offset:
                    break
        if len(parts) == 1:
            return parts[0]
        return b"".join(parts)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first batch whose max timestamp >= timestamp_ms: the
        batch's base offset (never below the log start) and its max timestamp."""
        for seg in self._segments:
            if seg.next_offset <= self._log_start_offset or seg.max_timestamp < timestamp_ms:
                continue
            found = seg.find_offset_by_timestamp(timestamp_ms, self._log_start_offset)
            if found is not None:
                return max(found[0], self._log_start_offset), found[1]
        return None

    def max_timestamp(self) -> tuple[int, int]:
        """(largest timestamp, base offset of the first batch holding it); (-1, -1) if none."""
        best = (-1, -1)
        for seg in self._segments:
            if seg.max_timestamp > best[0]:
                best = (seg.max_timestamp, seg.offset_of_max_timestamp)
        return best

    # -- retention and truncation -------------------------------------------------------

    def enforce_retention(self, now_ms: int, *, high_watermark: int | None = None) -> int:
        """Delete whole non-active segments past the log start offset, retention.ms or
        retention.bytes (only below high_watermark when given). Returns how many."""
        cfg = self._config
        segs = self._segments

        doomed = 0
        while len(segs) - doomed > 1 and segs[doomed + 1].base_offset <= self._log_start_offset:
            doomed += 1
        if cfg.retention_ms >= 0:
            while (
                len(segs) - doomed > 1
                and now_ms - segs[doomed].largest_timestamp > cfg.retention_ms
                and (high_watermark is None or segs[doomed + 1].base_offset <= high_watermark)
            ):
                doomed += 1
        if cfg.retention_bytes >= 0:
            excess = sum(s.size for s in segs[doomed:]) - cfg.retention_bytes
            while (
                len(segs) - doomed > 1
                and excess - segs[doomed].size >= 0
                and (high_watermark is None or segs[doomed + 1].base_offset <= high_watermark)
            ):
                excess -= segs[doomed].size
                doomed += 1
        for seg in segs[:doomed]:
            seg.delete()
        del segs[:doomed]
        if doomed:
            self._log_start_offset = max(self._log_start_offset, segs[0].base_offset)
            self._recovery_point = max(self._recovery_point, self._log_start_offset)
            self._trim_producer_state()
        return doomed

    def _trim_producer_state(self) -> None:
        """After the log start moved: forget producers wholly below it, drop old snapshots."""
        self.leader_epochs.truncate_from_start(self._log_start_offset)
        self.producer_state.evict_below(self._log_start_offset)
        self.producer_state.delete_snapshots(below=self._segments[0].base_offset)

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start offset up (DeleteRecords); segments wholly below it go at the
        next enforce_retention."""
        if offset > self.log_end_offset:
            raise OffsetOutOfRangeError(offset, self._log_start_offset, self.log_end_offset)
        if offset <= self._log_start_offset:
            return False
        self._log_start_offset = offset
        self.producer_state.evict_below(offset)
        return True

    def _delete_segments_below_log_start(self) -> None:
        segs = self._segments
        while len(segs) > 1 and segs[1].base_offset <= self._log_start_offset:
            segs.pop(0).delete()
        self._trim_producer_state()

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding offsets >= offset (follower truncation). A batch that
        straddles `offset` is removed whole, so the log end may end up below it."""
        if offset >= self.log_end_offset:
            return
        if offset < self._segments[0].base_offset or offset < self._log_start_offset:
            self._truncate_fully_and_start_at(offset)
            return
        segs = self._segments
        while len(segs) > 1 and segs[-1].base_offset >= offset:
            segs.pop().delete()
        segs[-1].truncate_to(offset)
        self._recovery_point = min(self._recovery_point, self.log_end_offset)
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        self.producer_state.delete_snapshots(above=self.log_end_offset)
        fsync_dir(self.path)  # a deleted snapshot must not come back after a crash
        self._load_producer_state()

    def reset_to(self, offset: int) -> None:
        """Empty the log and start it at `offset` (a follower far behind the leader's log start)."""
        self._truncate_fully_and_start_at(offset)

    def _truncate_fully_and_start_at(self, offset: int) -> None:
        for seg in self._segments:
            seg.delete()
        self._segments = [
            LogSegment.create(
                self.path,
                offset,
                index_interval_bytes=self._config.index_interval_bytes,
                segment_index_bytes=self._config.segment_index_bytes,
                now_ms=self.clock(),
            )
        ]
        self._log_start_offset = offset
        self._recovery_point = offset
        self.producer_state.clear()
        self.producer_state.delete_snapshots(above=-1)
        self.leader_epochs.clear()
        fsync_dir(self.path)

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Seal the active segment, fsync what is unflushed, and close the files."""
        if self._segments and not self._segments[-1].closed:
            self._segments[-1].seal()
            self.flush()
            self.producer_state.write_snapshot(self.log_end_offset)
        for seg in self._segments:
            seg.close()

    def delete(self) -> None:
        """Close and remove the whole partition directory."""
        for seg in self._segments:
            seg.delete()
        shutil.rmtree(self.path, ignore_errors=True)

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.path.name}, start={self._log_start_offset}, "
            f"end={self.log_end_offset}, segments={len(self._segments)})"
        )
