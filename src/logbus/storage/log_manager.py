"""All partition logs of one data directory, with Kafka's checkpoint files."""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

from logbus.storage.config import LogConfig
from logbus.storage.files import write_atomically
from logbus.storage.log import PartitionLog

__all__ = ["LogManager", "parse_partition_dir", "read_checkpoint", "write_checkpoint"]

log = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN_MARKER = ".logbus_cleanshutdown"
DELETE_SUFFIX = "-delete"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """`{topic}-{partition}` -> (topic, partition); topics may contain '-' and '.'."""
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


def write_checkpoint(path: Path, entries: dict[tuple[str, int], int]) -> None:
    """Kafka's offset checkpoint text format, replaced atomically (tmp, fsync, rename)."""
    lines = ["0", str(len(entries))]
    lines += [f"{t} {p} {o}" for (t, p), o in sorted(entries.items())]
    write_atomically(path, ("\n".join(lines) + "\n").encode())


def read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """Read a checkpoint file; a missing or malformed file reads as empty (logged)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    try:
        lines = text.splitlines()
        if lines[0].strip() != "0":
            raise ValueError(f"unknown version {lines[0]!r}")
        count = int(lines[1])
        out: dict[tuple[str, int], int] = {}
        for line in lines[2 : 2 + count]:
            topic, part, offset = line.split()
            out[(topic, int(part))] = int(offset)
        if len(out) != count:
            raise ValueError(f"expected {count} entries, found {len(out)}")
        return out
    except (IndexError, ValueError) as e:
        log.error("ignoring malformed checkpoint %s: %s", path, e)
        return {}


class LogManager:
    def __init__(self, data_dir: Path, default_config: LogConfig) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.default_config = default_config
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        #: partitions that could not be opened at load time, with the error
        self.failed: dict[tuple[str, int], Exception] = {}

    def _dir_for(self, topic: str, partition: int) -> Path:
        return self.data_dir / f"{topic}-{partition}"

    def load_all(self, topic_configs: dict[str, LogConfig]) -> None:
        """Open every partition directory in the data dir. After a clean shutdown every
        segment is trusted; otherwise the tail after each recovery point is checked."""
        marker = self.data_dir / CLEAN_SHUTDOWN_MARKER
        clean = marker.exists()
        recovery_points = read_checkpoint(self.data_dir / RECOVERY_POINT_CHECKPOINT)
        log_starts = read_checkpoint(self.data_dir / LOG_START_OFFSET_CHECKPOINT)
        for entry in sorted(self.data_dir.iterdir()):
            if not entry.is_dir():
                continue
            if entry.name.endswith(DELETE_SUFFIX):
                shutil.rmtree(entry, ignore_errors=True)  # a deletion cut short
                continue
            parsed = parse_partition_dir(entry.name)
            if parsed is None or parsed in self._logs:
                continue
            topic, _ = parsed
            config = topic_configs.get(topic, self.default_config)
            try:
                self._logs[parsed] = PartitionLog.open(
                    entry,
                    config,
                    recovery_point=recovery_points.get(parsed, 0),
                    log_start_offset=log_starts.get(parsed),
                )
            except Exception as e:  # one bad partition must not stop the others
                log.exception("cannot open partition log %s", entry)
                self.failed[parsed] = e
        if not clean:
            log.info("no clean shutdown marker in %s: recovered unflushed tails", self.data_dir)
        marker.unlink(missing_ok=True)

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> dict[tuple[str, int], PartitionLog]:
        return dict(self._logs)

    def create(self, topic: str, partition: int, config: LogConfig) -> PartitionLog:
        """Open (creating if needed) the log of a partition; returns the existing one if open."""
        key = (topic, partition)
        existing = self._logs.get(key)
        if existing is not None:
            existing.update_config(config)
            return existing
        plog = PartitionLog.open(self._dir_for(topic, partition), config)
        self._logs[key] = plog
        return plog

    def delete_topic(self, topic: str) -> int:
        """Remove every partition log of a topic. Returns how many were removed."""
        keys = [k for k in self._logs if k[0] == topic]
        for key in keys:
            plog = self._logs.pop(key)
            for seg in plog.segments:
                seg.close()
            doomed = plog.path.with_name(f"{plog.path.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
            os.replace(plog.path, doomed)
            shutil.rmtree(doomed, ignore_errors=True)
        for key in [k for k in self.failed if k[0] == topic]:
            del self.failed[key]
        return len(keys)

    def update_topic_config(self, topic: str, config: LogConfig) -> None:
        for (t, _), plog in self._logs.items():
            if t == topic:
                plog.update_config(config)

    def checkpoint(self) -> None:
        """Write the recovery point and log start offset checkpoints."""
        write_checkpoint(
            self.data_dir / RECOVERY_POINT_CHECKPOINT,
            {k: l.recovery_point for k, l in self._logs.items()},
        )
        write_checkpoint(
            self.data_dir / LOG_START_OFFSET_CHECKPOINT,
            {k: l.log_start_offset for k, l in self._logs.items()},
        )

    def run_retention(self, now_ms: int, high_watermark: Callable[[tuple[str, int]], int | None] = lambda key: None) -> int:
        """Enforce retention on every log; nothing at or above a partition's `high_watermark(key)`
        goes (followers may not have it yet). One failing partition does not stop the others."""
        deleted = 0
        for key, plog in list(self._logs.items()):
            try:
                deleted += plog.enforce_retention(now_ms, high_watermark=high_watermark(key))
            except OSError:
                log.exception("retention failed for %s-%d", *key)
        return deleted

    def flush_all(self) -> None:
        for plog in self._logs.values():
            plog.flush()

    def flush_due(self, now_ms: int | None = None) -> int:
        """Flush the logs whose flush.ms has passed. Returns how many were flushed."""
        return sum(1 for plog in self._logs.values() if plog.flush_if_due(now_ms))

    def close(self) -> None:
        """Flush and close every log, checkpoint, and mark the shutdown clean."""
        for plog in self._logs.values():
            plog.close()  # seals, flushes: recovery point = log end
        self.checkpoint()
        if not self.failed:
            marker = self.data_dir / CLEAN_SHUTDOWN_MARKER
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self._logs.clear()
