"""The leader-epoch cache of a partition: at which offset each leader epoch began.

It answers OffsetForLeaderEpoch (where did epoch E end in this log?) so a follower that comes
back truncates exactly the records that never reached the ISR, as Kafka does (KIP-101/279).
Kept in `leader-epoch-checkpoint` in Kafka's text format: version, count, "epoch start" lines.
"""

from __future__ import annotations

from bisect import bisect_right
from pathlib import Path

from logbus.storage.files import write_atomically

CHECKPOINT_FILE = "leader-epoch-checkpoint"
UNDEFINED = -1


class LeaderEpochCache:
    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / CHECKPOINT_FILE
        self.entries: list[tuple[int, int]] = []  # (epoch, start offset), both increasing
        if self.path.exists():
            self.entries = _read(self.path)

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` begins at `start_offset` (ignored unless it is a newer epoch)."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return
        # an entry whose start is not below the new one was never used: the new epoch replaces it
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()
        self.entries.append((epoch, start_offset))
        self._write()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest epoch <= `epoch`, the offset where it ended) — Kafka's endOffsetFor."""
        if not self.entries or epoch < self.entries[0][0]:
            return UNDEFINED, UNDEFINED
        if epoch >= self.entries[-1][0]:
            return self.entries[-1][0], log_end_offset
        i = bisect_right([e for e, _ in self.entries], epoch)
        return self.entries[i - 1][0], self.entries[i][1]

    def start_offset_of(self, epoch: int) -> int | None:
        return next((start for e, start in self.entries if e == epoch), None)

    def truncate_from_end(self, end_offset: int) -> None:
        """The log now ends at `end_offset`: forget epochs that began at or after it."""
        kept = [(e, s) for e, s in self.entries if s < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: the epoch covering it starts there."""
        kept = [(e, s) for e, s in self.entries if s >= start_offset]
        covering = [(e, s) for e, s in self.entries if s < start_offset]
        if covering:
            kept.insert(0, (covering[-1][0], start_offset))
        if kept != self.entries:
            self.entries = kept
            self._write()

    def clear(self) -> None:
        if self.entries:
            self.entries = []
            self._write()

    def _write(self) -> None:
        lines = ["0", str(len(self.entries))] + [f"{e} {s}" for e, s in self.entries]
        write_atomically(self.path, ("\n".join(lines) + "\n").encode())


def _read(path: Path) -> list[tuple[int, int]]:
    try:
        lines = path.read_text().split("\n")
        count = int(lines[1])
        entries = [tuple(int(x) for x in line.split()) for line in lines[2 : 2 + count]]
        if any(len(e) != 2 for e in entries):
            return []
        return [(e, s) for e, s in entries]  # type: ignore[misc]
    except (OSError, ValueError, IndexError):
        return []  # rebuilt from the batches' partition leader epochs on the next appends
