"""Producer id allocation for InitProducerId (Kafka's ProducerIdManager).

Ids are reserved from the metadata store in blocks, so they are unique across the cluster and
across restarts: a block is recorded in the store before any id of it is handed out, and the
rest of a block is simply skipped after a restart.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

__all__ = ["BLOCK_SIZE", "ProducerIdAllocator"]

log = logging.getLogger(__name__)

BLOCK_SIZE = 1000


class ProducerIdAllocator:
    def __init__(self, reserve_block: Callable[[int], int], block_size: int = BLOCK_SIZE) -> None:
        self.reserve_block = reserve_block
        self.block_size = block_size
        self._next = 0
        self._block_end = 0
        self._issued: list[tuple[int, int]] = []  # blocks this broker handed ids out of

    def allocate(self) -> int:
        """A producer id never handed out before anywhere in the cluster."""
        if self._next >= self._block_end:
            start = self.reserve_block(self.block_size)
            self._next, self._block_end = start, start + self.block_size
            self._issued.append((start, self._block_end))
            log.info("reserved producer ids [%d, %d)", start, self._block_end)
        pid = self._next
        self._next += 1
        return pid

    def issued(self, producer_id: int) -> bool:
        """Whether this broker handed the id out (in this run): only then is its epoch bumped."""
        return any(start <= producer_id < min(end, self._next) for start, end in self._issued)
