"""Leader elections as pure functions over a partition's state and the live brokers (Kafka's rules).

- clean: the first replica, in assignment order, that is live and in the ISR;
- unclean: failing that, the first live replica (observers included): data may be lost;
- preferred: the first replica of the assignment, if it is live and in the ISR.
A new leader always gets a new leader epoch; the ISR keeps only live members (the new leader alone
after an unclean election).
"""

from __future__ import annotations

from logbus.broker.topics import NO_LEADER, PartitionState


def clean_candidate(state: PartitionState, live: set[int]) -> int | None:
    return next((r for r in state.replicas if r in live and r in state.isr), None)


def unclean_candidate(state: PartitionState, live: set[int]) -> int | None:
    return next((r for r in state.replicas if r in live), None)


def with_leader(state: PartitionState, leader: int, live: set[int], unclean: bool = False) -> PartitionState:
    if unclean and leader not in state.isr:
        isr = [leader]
    else:
        isr = [r for r in state.isr if r in live] or [leader]
        if leader not in isr:
            isr.insert(0, leader)
    return state.copy(leader=leader, leader_epoch=state.leader_epoch + 1, isr=isr)


def offline_election(state: PartitionState, live: set[int], unclean_allowed: bool) -> PartitionState | None:
    """The new state of a partition whose leader is gone, or None if nothing changes."""
    leader = clean_candidate(state, live)
    unclean = False
    if leader is None and unclean_allowed:
        leader = unclean_candidate(state, live)
        unclean = leader is not None
    if leader is None:
        if state.leader == NO_LEADER:
            return None
        # no eligible replica: the partition is offline; the ISR is kept as the last known one
        return state.copy(leader=NO_LEADER, leader_epoch=state.leader_epoch + 1)
    return with_leader(state, leader, live, unclean)


def without_dead_from_isr(state: PartitionState, live: set[int]) -> PartitionState | None:
    """Drop dead followers from the ISR of a partition whose leader is alive (never empties it)."""
    isr = [r for r in state.isr if r in live]
    if state.leader in live and isr and len(isr) != len(state.isr):
        return state.copy(isr=isr)
    return None


def preferred_election(state: PartitionState, live: set[int]) -> PartitionState | None:
    preferred = state.replicas[0] if state.replicas else None
    if preferred is None or preferred == state.leader or preferred not in live or preferred not in state.isr:
        return None
    return with_leader(state, preferred, live)
