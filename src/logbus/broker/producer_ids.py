"""Durable producer id allocation for InitProducerId (Kafka's ProducerIdManager, one broker).

Ids are handed out in blocks. Before the first id of a block is given out, the block's upper
bound is written to `producer-id-block` in the data directory and fsync'd (write to a temporary
file, fsync, rename, fsync the directory). After a restart, allocation resumes at the stored
bound, so an id is never handed out twice, even after a crash in the middle of a block (the
rest of that block is skipped).

File format (text): `1 <next block start> <crc32c of "1 <next block start>">`.
"""

from __future__ import annotations

import logging
import os
import weakref
from pathlib import Path

from crc32c import crc32c

__all__ = ["BLOCK_SIZE", "ProducerIdAllocator", "allocator_for"]

log = logging.getLogger(__name__)

FILE_NAME = "producer-id-block"
BLOCK_SIZE = 1000
_VERSION = 1


class ProducerIdAllocator:
    def __init__(self, data_dir: Path, block_size: int = BLOCK_SIZE) -> None:
        self.path = Path(data_dir) / FILE_NAME
        self.block_size = block_size
        self._next = self._read()
        self._block_end = self._next  # nothing of a block is handed out before it is stored

    def _read(self) -> int:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return 0
        parts = text.split()
        try:
            version, bound, crc = int(parts[0]), int(parts[1]), int(parts[2])
        except (IndexError, ValueError):
            version, bound, crc = -1, -1, -1
        if version != _VERSION or crc != crc32c(f"{version} {bound}".encode()) or bound < 0:
            # Starting again at 0 could hand out ids that producers still use: refuse.
            raise RuntimeError(f"{self.path} is corrupt ({text[:80]!r}); cannot allocate producer ids safely")
        return bound

    def _store(self, bound: int) -> None:
        body = f"{_VERSION} {bound}"
        data = f"{body} {crc32c(body.encode())}\n".encode()
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        dfd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def allocate(self) -> int:
        """A producer id never handed out before by this data directory."""
        if self._next >= self._block_end:
            end = self._next + self.block_size
            self._store(end)
            self._block_end = end
            log.info("reserved producer ids [%d, %d)", self._next, end)
        pid = self._next
        self._next += 1
        return pid

    def issued(self, producer_id: int) -> bool:
        """Whether this allocator (in this or an earlier run) may have handed out the id."""
        return 0 <= producer_id < self._next


_allocators: "weakref.WeakKeyDictionary[object, ProducerIdAllocator]" = weakref.WeakKeyDictionary()


def allocator_for(broker) -> ProducerIdAllocator:
    """The allocator of a broker's data directory, created on first use."""
    alloc = _allocators.get(broker)
    if alloc is None:
        alloc = _allocators[broker] = ProducerIdAllocator(broker.config.data_dir)
    return alloc
