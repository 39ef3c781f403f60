"""The other gateways sharing this gateway's state store: who is alive, who owns what, where a session lives.

- **Live gateways** are the store's registrations whose heartbeat is younger than `lease_ms`; the list is read
  again every few seconds. This gateway always counts itself as live.
- **Ownership of background work** (push subscriptions) is decided by rendezvous hashing over the live gateways:
  every gateway computes the same owner for a key without asking anybody, and when a gateway comes or goes only
  the keys it owned or takes over move. While the lists of two gateways differ (a few seconds after a change)
  both may run a key; push delivery is at least once, so that costs a repeat, never a loss.
- **Session ids** end in a tag of the gateway that holds the session (`<random>.<tag>`): a request for a session
  that lives on another gateway is forwarded there (see `Handlers` in logbus.gateway.server), so clients behind a
  load balancer, or connections spread over the workers of one gateway, need no stickiness.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import Any

from logbus.gateway.store import GatewayRecord


def gateway_tag(gateway_id: str) -> str:
    """A short fixed-length name of a gateway, safe in a URL path."""
    return hashlib.sha256(gateway_id.encode()).hexdigest()[:10]


def _weight(gateway_id: str, key: str) -> bytes:
    return hashlib.sha256(f"{gateway_id}\0{key}".encode()).digest()


class Peers:
    def __init__(self, gw: Any) -> None:
        self.gw = gw
        self.tag = gateway_tag(gw.gateway_id)
        self.live: list[GatewayRecord] = []   # other gateways with a fresh heartbeat
        self._by_tag: dict[str, GatewayRecord] = {}
        self._refreshed = 0.0

    async def refresh(self) -> None:
        gw = self.gw
        self._refreshed = time.monotonic()
        records = await gw.run_store(gw.store.gateways)
        now_ms = int(time.time() * 1000)
        self.live = [r for r in records if r.gateway_id != gw.gateway_id and r.heartbeat_ms + gw.config.lease_ms > now_ms]
        self._by_tag = {gateway_tag(r.gateway_id): r for r in self.live}

    def session_id(self) -> str:
        return f"{secrets.token_urlsafe(15)}.{self.tag}"

    async def holder_of(self, session_id: str) -> GatewayRecord | None:
        """The live gateway, other than this one, whose session this id names; None when it is this one's or unknown.
        An unknown tag reads the store again (at most once a second): the gateway may have started a moment ago."""
        _, _, tag = session_id.rpartition(".")
        if tag == self.tag:
            return None
        if tag not in self._by_tag and time.monotonic() - self._refreshed > 1.0:
            await self.refresh()
        return self._by_tag.get(tag)

    def owner(self, key: str) -> str:
        """The id of the live gateway that owns `key` (rendezvous hashing: the highest weight of id and key)."""
        return max([self.gw.gateway_id, *(r.gateway_id for r in self.live)], key=lambda g: _weight(g, key))

    def owns(self, key: str) -> bool:
        return self.owner(key) == self.gw.gateway_id
