"""Groups and members as the coordinator keeps them in memory."""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field
from enum import Enum


class GroupState(str, Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_timestamp: int


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_future: asyncio.Future | None = None
    sync_future: asyncio.Future | None = None
    heartbeat_deadline: float = 0.0

    def metadata_for(self, protocol: str | None) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]


@dataclass
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    pending_members: set[str] = field(default_factory=set)  # ids handed out with MEMBER_ID_REQUIRED
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    join_deadline: float | None = None  # when a rebalance in progress completes regardless
    initial_delay: bool = False  # an empty group waits group.initial.rebalance.delay.ms for more members

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.join_future is not None for m in self.members.values())

    def select_protocol(self) -> str | None:
        """Kafka's vote: among protocols every member supports, each member votes for its first choice."""
        members = list(self.members.values())
        if not members:
            return None
        common = set(members[0].protocol_names)
        for m in members[1:]:
            common &= set(m.protocol_names)
        votes: dict[str, int] = {}
        for m in members:
            choice = next((p for p in m.protocol_names if p in common), None)
            if choice is not None:
                votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda p: votes[p]) if votes else None

    def supports_protocols(self, protocol_type: str, names: list[str]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(names)
        if protocol_type != self.protocol_type:
            return False
        common = set(names)
        for m in self.members.values():
            common &= set(m.protocol_names)
        return bool(common)

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol only); None if unknown."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            parsed = parse_consumer_subscription(m.metadata_for(self.protocol_name))
            if parsed is None:
                return None
            topics |= parsed
        return topics


def parse_consumer_subscription(metadata: bytes) -> set[str] | None:
    """Topics of a ConsumerProtocolSubscription (version int16, then an array of int16-length strings)."""
    try:
        (count,) = struct.unpack_from(">i", metadata, 2)
        pos, topics = 6, set()
        for _ in range(count):
            (n,) = struct.unpack_from(">h", metadata, pos)
            topics.add(metadata[pos + 2 : pos + 2 + n].decode())
            pos += 2 + n
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
