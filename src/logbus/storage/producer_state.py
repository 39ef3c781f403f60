"""Per-partition state of idempotent producers (Kafka's ProducerStateManager, KIP-98).

For each producer id seen in a partition: its epoch and the metadata of its last 5 batches
(first and last sequence, first and last offset, max timestamp). Only batch headers are read.

Rules on append (`validate`), as Apache Kafka applies them:

- an epoch older than the producer's: INVALID_PRODUCER_EPOCH (47);
- a newer epoch must start at sequence 0, else OUT_OF_ORDER_SEQUENCE_NUMBER (45);
- a batch whose (first seq, last seq) equals one of the last 5 of the same epoch is a
  duplicate: not appended, answered with the offset the original got;
- otherwise the batch must start at last seq + 1 (int32 wraps to 0), else 45;
- a producer with no state must start at 0; if it does not, UNKNOWN_PRODUCER_ID (59) when the
  log start offset has moved (its batches may have been removed by retention or DeleteRecords,
  so the client may reset its sequence), else 45.

Snapshots: `{offset:020d}.snapshot` holds the state of every producer for the log below
`offset`; written atomically (temporary file, fsync, rename, fsync of the directory), with a
CRC-32C over the body. Layout (big endian): version int16, crc uint32, count int32, then per
producer: id int64, epoch int16, batch count int8, and per batch first seq int32, last seq
int32, first offset int64, last offset int64, max timestamp int64.
"""

from __future__ import annotations

import logging
import re
import struct
from collections import deque
from collections.abc import Iterable
from pathlib import Path

from crc32c import crc32c

from logbus.protocol.records import BatchHeader, InvalidRecordError
from logbus.storage.files import write_atomically

__all__ = [
    "BatchMetadata",
    "ProducerEntry",
    "ProducerStateError",
    "ProducerStateManager",
    "SNAPSHOT_SUFFIX",
]

log = logging.getLogger(__name__)

OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
UNKNOWN_PRODUCER_ID = 59

NUM_BATCHES_TO_RETAIN = 5
INT32_MAX = 2**31 - 1
SNAPSHOT_SUFFIX = ".snapshot"
_SNAPSHOT_FILE = re.compile(r"^(\d{20})\.snapshot$")
_SNAP_VERSION = 1
_SNAP_HEAD = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhb")
_BATCH = struct.Struct(">iiqqq")


class ProducerStateError(InvalidRecordError):
    """A produce an idempotent producer must not make; carries the Kafka error code."""


def last_sequence(h: BatchHeader) -> int:
    """The sequence of the batch's last record (int32 sequences wrap to 0 after INT32_MAX)."""
    return (h.base_sequence + h.last_offset_delta) & INT32_MAX


# (first seq, last seq, first offset, last offset, max timestamp)
BatchMetadata = tuple[int, int, int, int, int]


class ProducerEntry:
    __slots__ = ("producer_id", "epoch", "batches")

    def __init__(self, producer_id: int, epoch: int, batches: Iterable[BatchMetadata] = ()) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches: deque[BatchMetadata] = deque(batches, maxlen=NUM_BATCHES_TO_RETAIN)

    @property
    def last_seq(self) -> int:
        return self.batches[-1][1] if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1][3] if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for meta in self.batches:
            if meta[0] == first_seq and meta[1] == last_seq:
                return meta
        return None

    def __repr__(self) -> str:
        return f"ProducerEntry(id={self.producer_id}, epoch={self.epoch}, batches={list(self.batches)})"


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerStateManager:
    def __init__(self, directory: Path, topic_partition: str = "") -> None:
        self.directory = Path(directory)
        self.name = topic_partition or self.directory.name
        self.producers: dict[int, ProducerEntry] = {}

    # -- validation and update on append ------------------------------------------------

    def validate(self, batches: list[BatchHeader], log_start_offset: int) -> BatchMetadata | None:
        """Check every idempotent batch of one append against the state (nothing changes).

        Returns the metadata of the original when the append is a retry of batches already
        in the log (answer with its base offset, append nothing); None when all may be
        appended. Raises ProducerStateError otherwise.
        """
        pending: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last seq) after earlier batches
        duplicate: BatchMetadata | None = None
        for i, b in enumerate(batches):
            pid = b.producer_id
            if pid < 0:
                if duplicate is not None:
                    raise self._error(OUT_OF_ORDER_SEQUENCE_NUMBER, b, "a retried batch is followed by a new one")
                continue
            if b.is_transactional or b.is_control:
                raise ProducerStateError(
                    INVALID_TXN_STATE,
                    f"Transactional and control batches are not supported (producer {pid} in partition {self.name})",
                )
            epoch = b.producer_epoch
            first_seq = b.base_sequence
            last_seq = last_sequence(b)
            entry = self.producers.get(pid)
            if pid in pending:
                cur_epoch, cur_last = pending[pid]
            elif entry is not None:
                cur_epoch, cur_last = entry.epoch, entry.last_seq
                dup = entry.find_duplicate(epoch, first_seq, last_seq)
                if dup is not None:
                    if i == 0 or duplicate is not None:
                        duplicate = duplicate or dup
                        continue
                    raise self._error(OUT_OF_ORDER_SEQUENCE_NUMBER, b, "a retried batch follows a new one")
            else:
                cur_epoch, cur_last = None, -1
            if duplicate is not None:
                raise self._error(OUT_OF_ORDER_SEQUENCE_NUMBER, b, "a retried batch is followed by a new one")
            if first_seq < 0:
                raise self._error(OUT_OF_ORDER_SEQUENCE_NUMBER, b, f"invalid base sequence {first_seq}")
            if cur_epoch is None:
                if first_seq != 0:
                    if log_start_offset > 0:
                        raise ProducerStateError(
                            UNKNOWN_PRODUCER_ID,
                            f"Found no record of producerId={pid} on the broker at offset {log_start_offset} "
                            f"in partition {self.name}. It is possible that the last message with the "
                            f"producerId={pid} has been removed due to hitting the retention limit.",
                        )
                    raise self._error(
                        OUT_OF_ORDER_SEQUENCE_NUMBER, b,
                        f"{first_seq} (incoming seq. number), but producer {pid} has no state: a new producer starts at 0",
                    )  # fmt: skip
            elif epoch < cur_epoch:
                raise ProducerStateError(
                    INVALID_PRODUCER_EPOCH,
                    f"Epoch of producer {pid} at offset {b.base_offset} in {self.name} is {epoch}, "
                    f"which is smaller than the last seen epoch {cur_epoch}",
                )
            elif epoch > cur_epoch:
                if first_seq != 0:
                    raise self._error(
                        OUT_OF_ORDER_SEQUENCE_NUMBER, b,
                        f"Invalid sequence number for new epoch of producer {pid} in partition {self.name}: "
                        f"{epoch} (request epoch), {first_seq} (seq. number), {cur_epoch} (current producer epoch)",
                        bare=True,
                    )  # fmt: skip
            elif not _in_sequence(cur_last, first_seq):
                raise self._error(
                    OUT_OF_ORDER_SEQUENCE_NUMBER, b,
                    f"{first_seq} (incoming seq. number), {cur_last} (current end sequence number)",
                )  # fmt: skip
            pending[pid] = (epoch, last_seq)
        return duplicate

    def _error(self, code: int, b: BatchHeader, detail: str, bare: bool = False) -> ProducerStateError:
        if bare:
            return ProducerStateError(code, detail)
        return ProducerStateError(
            code,
            f"Out of order sequence number for producer {b.producer_id} at offset {b.base_offset} "
            f"in partition {self.name}: {detail}",
        )

    def update(self, batches: Iterable[BatchHeader]) -> None:
        """Record batches now in the log (offsets assigned); ignores non-idempotent ones."""
        producers = self.producers
        for b in batches:
            pid = b.producer_id
            if pid < 0:
                continue
            meta = (b.base_sequence, last_sequence(b), b.base_offset, b.last_offset, b.max_timestamp)
            entry = producers.get(pid)
            if entry is None:
                producers[pid] = ProducerEntry(pid, b.producer_epoch, (meta,))
            elif b.producer_epoch != entry.epoch:
                entry.epoch = b.producer_epoch
                entry.batches.clear()
                entry.batches.append(meta)
            else:
                entry.batches.append(meta)

    # -- trimming -----------------------------------------------------------------------

    def evict_below(self, log_start_offset: int) -> int:
        """Forget producers whose last batch is below the log start offset; returns how many."""
        doomed = [pid for pid, e in self.producers.items() if e.last_offset < log_start_offset]
        for pid in doomed:
            del self.producers[pid]
        return len(doomed)

    def clear(self) -> None:
        self.producers.clear()

    # -- snapshots ----------------------------------------------------------------------

    def snapshot_path(self, offset: int) -> Path:
        return self.directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshot files present, ascending; removes leftover temporary files."""
        out = []
        for entry in self.directory.iterdir():
            m = _SNAPSHOT_FILE.match(entry.name)
            if m:
                out.append(int(m.group(1)))
            elif entry.name.endswith(SNAPSHOT_SUFFIX + ".tmp"):
                entry.unlink(missing_ok=True)
        return sorted(out)

    def encode(self) -> bytes:
        body = bytearray(_COUNT.pack(len(self.producers)))
        for pid, e in self.producers.items():
            body += _ENTRY.pack(pid, e.epoch, len(e.batches))
            for meta in e.batches:
                body += _BATCH.pack(*meta)
        return _SNAP_HEAD.pack(_SNAP_VERSION, crc32c(body)) + body

    @staticmethod
    def decode(data: bytes) -> dict[int, ProducerEntry]:
        """Producers of a snapshot; raises ValueError if it is not a whole, valid snapshot."""
        try:
            version, crc = _SNAP_HEAD.unpack_from(data, 0)
            if version != _SNAP_VERSION:
                raise ValueError(f"unknown snapshot version {version}")
            body = memoryview(data)[_SNAP_HEAD.size :]
            if crc32c(body) != crc:
                raise ValueError("CRC mismatch")
            (count,) = _COUNT.unpack_from(body, 0)
            pos = _COUNT.size
            producers: dict[int, ProducerEntry] = {}
            for _ in range(count):
                pid, epoch, n = _ENTRY.unpack_from(body, pos)
                pos += _ENTRY.size
                metas = []
                for _ in range(n):
                    metas.append(_BATCH.unpack_from(body, pos))
                    pos += _BATCH.size
                producers[pid] = ProducerEntry(pid, epoch, metas)
            if pos != len(body):
                raise ValueError(f"{len(body) - pos} bytes after the last entry")
            return producers
        except struct.error as e:
            raise ValueError(f"truncated snapshot: {e}") from None

    def write_snapshot(self, offset: int) -> Path:
        """Write the current state as the snapshot for the log below `offset`, atomically."""
        path = self.snapshot_path(offset)
        write_atomically(path, self.encode())
        return path

    def load_latest_snapshot(self, max_offset: int, min_offset: int = 0) -> int | None:
        """Load the newest valid snapshot with min_offset <= offset <= max_offset; returns its
        offset, or None (state empty) if there is none. Invalid snapshots are deleted."""
        for offset in reversed(self.snapshot_offsets()):
            if offset > max_offset or offset < min_offset:
                continue
            path = self.snapshot_path(offset)
            try:
                self.producers = self.decode(path.read_bytes())
                return offset
            except (OSError, ValueError) as e:
                log.warning("%s: ignoring and deleting producer snapshot %s: %s", self.name, path.name, e)
                path.unlink(missing_ok=True)
        self.producers = {}
        return None

    def delete_snapshots(self, *, below: int | None = None, above: int | None = None) -> None:
        """Delete snapshot files with offset < below, or offset > above."""
        for offset in self.snapshot_offsets():
            if (below is not None and offset < below) or (above is not None and offset > above):
                self.snapshot_path(offset).unlink(missing_ok=True)
