"""The group coordinator: Kafka's classic group membership protocol and offset storage.

States follow Kafka's GroupCoordinator: Empty -> PreparingRebalance (members (re)join) ->
CompletingRebalance (the leader computes the assignment) -> Stable (SyncGroup delivered it).
A member that misses its session timeout, leaves, or does not rejoin within the rebalance
timeout is removed and the group rebalances. Every change that must survive a restart (offsets,
the assignment of a generation) is appended to `__consumer_offsets` before it is acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from logbus.protocol.errors import ErrorCode

from .model import CommittedOffset, Group, GroupState, Member
from .offsets_log import OFFSETS_TOPIC, encode_records, group_key, group_value, load_groups, offset_key, offset_value, partition_for

if TYPE_CHECKING:
    from logbus.broker.broker import Broker

log = logging.getLogger(__name__)

MAX_METADATA_BYTES = 4096  # offset.metadata.max.bytes
EXPIRY_CHECK_S = 0.1
REPLICATION_TIMEOUT_S = 5.0  # offsets.commit.timeout.ms


@dataclass
class JoinResult:
    error: ErrorCode
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[Member] | None = None


class GroupError(Exception):
    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code


class GroupCoordinator:
    def __init__(self, broker: "Broker") -> None:
        self.broker = broker
        self.config = broker.config
        self.groups: dict[str, Group] = {}
        self._loaded: set[int] = set()  # offsets partitions whose groups are coordinated here
        self._background: set[asyncio.Task] = set()
        self._expiry_task: asyncio.Task | None = None

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self._expiry_task = asyncio.create_task(self._expire_loop())

    def stop(self) -> None:
        if self._expiry_task:
            self._expiry_task.cancel()

    # --- which groups this broker coordinates -----------------------------------------------

    def on_metadata(self, image) -> None:
        """Coordinate the groups of the offsets partitions this broker leads (Kafka's onElection):
        load them when leadership arrives, forget them when it leaves."""
        topic = image.topic(OFFSETS_TOPIC)
        if topic is None:
            return
        leading = {p.partition for p in topic.partitions if p.leader == self.config.broker_id}
        count = len(topic.partitions)
        for partition in sorted(leading - self._loaded):
            self._load_partition(partition, count)
        for partition in self._loaded - leading:
            for group_id in [g for g in self.groups if partition_for(g, count) == partition]:
                group = self.groups.pop(group_id)
                for m in group.members.values():
                    for fut in (m.join_future, m.sync_future):
                        if fut and not fut.done():
                            fut.set_result(JoinResult(ErrorCode.not_coordinator, member_id=m.member_id) if fut is m.join_future else (ErrorCode.not_coordinator, b""))
            log.info("no longer coordinating the groups of %s-%d", OFFSETS_TOPIC, partition)
        self._loaded = leading

    def _load_partition(self, partition: int, count: int) -> None:
        local = self.broker.replicas.get(OFFSETS_TOPIC, partition)
        if local is None:
            return
        started = time.monotonic()
        loaded: dict[str, Group] = {}
        load_groups(local.log, loaded)
        now = time.monotonic()
        for group_id, group in loaded.items():
            if partition_for(group_id, count) != partition:
                continue
            for m in group.members.values():
                m.heartbeat_deadline = now + m.session_timeout_ms / 1000
            self.groups[group_id] = group
        if loaded:
            log.info("loaded %d groups from %s-%d in %.2fs", len(loaded), OFFSETS_TOPIC, partition, time.monotonic() - started)

    def coordinator_for(self, group_id: str) -> int:
        """The broker leading the group's offsets partition (creating the offsets topic on first use)."""
        count = self._offsets_partition_count()
        state = self.broker.image.partition(OFFSETS_TOPIC, partition_for(group_id, count))
        return state.leader if state is not None else -1

    def owns(self, group_id: str) -> bool:
        topic = self.broker.image.topic(OFFSETS_TOPIC)
        return topic is not None and partition_for(group_id, len(topic.partitions)) in self._loaded

    def _offsets_partition_count(self) -> int:
        topic = self.broker.image.topic(OFFSETS_TOPIC)
        if topic is None:
            from logbus.broker.handlers.topic_admin import create_topic
            from logbus.protocol.errors import KafkaProtocolError

            replication = min(self.config.offsets_topic_replication_factor, self.broker.live_broker_count)
            try:
                # Kafka's offsets topic: compacted there; here kept (retention.ms=-1) until compaction exists.
                topic = create_topic(self.broker, OFFSETS_TOPIC, self.config.offsets_topic_num_partitions, replication,
                                     {"retention.ms": "-1", "segment.bytes": "104857600"})
                log.info("created %s with %d partitions, replication factor %d", OFFSETS_TOPIC, len(topic.partitions), replication)
            except KafkaProtocolError as e:
                if e.code != ErrorCode.topic_already_exists:
                    raise
                self.broker.refresh_metadata()
                topic = self.broker.image.topic(OFFSETS_TOPIC)
        return len(topic.partitions)

    async def _persist(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> ErrorCode:
        """Append to the group's offsets partition and wait for the ISR, as Kafka does."""
        partition = partition_for(group_id, self._offsets_partition_count())
        outcome = self.broker.replicas.append(OFFSETS_TOPIC, partition, encode_records(records), acks=-1)
        error = outcome.error
        if error == ErrorCode.none and outcome.replicated is not None:
            try:
                error = await asyncio.wait_for(outcome.replicated, REPLICATION_TIMEOUT_S)
            except asyncio.TimeoutError:
                error = ErrorCode.request_timed_out
        if error == ErrorCode.none:
            return error
        log.error("could not store group %s state: %s %s", group_id, error.name, outcome.message or "")
        # Kafka's mapping of offsets-log write failures for clients
        if error in (ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition):
            return ErrorCode.not_coordinator
        return ErrorCode.coordinator_not_available

    def _persist_later(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> None:
        task = asyncio.get_running_loop().create_task(self._persist(group_id, records))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # --- JoinGroup -------------------------------------------------------------------------

    async def join(self, group_id: str, member_id: str, group_instance_id: str | None, client_id: str, client_host: str,
                   session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str, protocols: list[tuple[str, bytes]],
                   require_known_member_id: bool) -> JoinResult:
        if not group_id:
            return JoinResult(ErrorCode.invalid_group_id, member_id=member_id)
        if not self.owns(group_id):
            return JoinResult(ErrorCode.not_coordinator, member_id=member_id)
        if not self.config.group_min_session_timeout_ms <= session_timeout_ms <= self.config.group_max_session_timeout_ms:
            return JoinResult(ErrorCode.invalid_session_timeout, member_id=member_id)
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return JoinResult(ErrorCode.unknown_member_id, member_id=member_id)
            group = self.groups[group_id] = Group(group_id)
        if group.state == GroupState.DEAD:
            return JoinResult(ErrorCode.coordinator_not_available, member_id=member_id)
        if not group.supports_protocols(protocol_type, [name for name, _ in protocols]):
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id=member_id)

        if not member_id:
            if group_instance_id and group_instance_id in group.static_members:
                return await self._rejoin_static(group, group_instance_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms, protocols)
            new_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if require_known_member_id and not group_instance_id:
                group.pending_members.add(new_id)  # KIP-394: the client rejoins with this id
                return JoinResult(ErrorCode.member_id_required, member_id=new_id)
            member_id = new_id
        elif member_id in group.pending_members:
            group.pending_members.discard(member_id)
        elif member_id not in group.members:
            code = ErrorCode.fenced_instance_id if group_instance_id and group.static_members.get(group_instance_id) not in (None, member_id) else ErrorCode.unknown_member_id
            return JoinResult(code, member_id=member_id)
        else:
            existing = group.members[member_id]
            if group_instance_id and group.static_members.get(group_instance_id) != member_id:
                return JoinResult(ErrorCode.fenced_instance_id, member_id=member_id)
            if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE) and existing.protocols == protocols and member_id != group.leader_id:
                # Nothing changed for a follower: hand back the current generation without a rebalance.
                existing.heartbeat_deadline = time.monotonic() + existing.session_timeout_ms / 1000
                return self._join_result(group, existing)

        member = group.members.get(member_id)
        if member is None:
            member = Member(member_id, group_instance_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms, protocol_type, list(protocols))
            group.members[member_id] = member
            if group_instance_id:
                group.static_members[group_instance_id] = member_id
            if group.protocol_type is None or len(group.members) == 1:
                group.protocol_type = protocol_type
        else:
            member.protocols = list(protocols)
            member.session_timeout_ms = session_timeout_ms
            member.rebalance_timeout_ms = rebalance_timeout_ms
        return await self._await_join(group, member)

    async def _rejoin_static(self, group: Group, instance_id: str, client_id: str, client_host: str, session_timeout_ms: int,
                             rebalance_timeout_ms: int, protocols: list[tuple[str, bytes]]) -> JoinResult:
        """A known group.instance.id comes back: it takes a new member id and fences the old one (KIP-345)."""
        old_id = group.static_members[instance_id]
        old = group.members.pop(old_id)
        for fut in (old.join_future, old.sync_future):
            if fut and not fut.done():
                fut.set_result(JoinResult(ErrorCode.fenced_instance_id, member_id=old_id))
        new_id = f"{client_id or 'member'}-{uuid.uuid4()}"
        member = Member(new_id, instance_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms, old.protocol_type, list(protocols), assignment=old.assignment)
        group.members[new_id] = member
        group.static_members[instance_id] = new_id
        if group.leader_id == old_id:
            group.leader_id = new_id
        if group.state == GroupState.STABLE and old.protocols == member.protocols:
            member.heartbeat_deadline = time.monotonic() + session_timeout_ms / 1000
            error = await self._persist(group.group_id, [(group_key(group.group_id), group_value(group))])
            if error != ErrorCode.none:
                return JoinResult(error, member_id=new_id)
            return self._join_result(group, member)
        return await self._await_join(group, member)

    async def _await_join(self, group: Group, member: Member) -> JoinResult:
        loop = asyncio.get_running_loop()
        waiting = member.join_future = loop.create_future()
        member.heartbeat_deadline = time.monotonic() + member.session_timeout_ms / 1000
        if group.state != GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, f"member {member.member_id} joined")
        self._maybe_complete_join(group)
        return await waiting

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.state == GroupState.COMPLETING_REBALANCE:
            for m in group.members.values():  # their SyncGroup must retry: the generation is over
                if m.sync_future and not m.sync_future.done():
                    m.sync_future.set_result((ErrorCode.rebalance_in_progress, b""))
                m.sync_future = None
        was_empty = group.state == GroupState.EMPTY
        group.initial_delay = was_empty
        group.state = GroupState.PREPARING_REBALANCE
        timeout_ms = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        if was_empty:
            # group.initial.rebalance.delay.ms: let the first members of a new group arrive together
            timeout_ms = min(timeout_ms, self.config.group_initial_rebalance_delay_ms)
        group.join_deadline = time.monotonic() + timeout_ms / 1000
        log.info("group %s rebalancing (generation %d): %s", group.group_id, group.generation_id, reason)
        asyncio.get_running_loop().call_later(timeout_ms / 1000 + 0.001, self._join_deadline_passed, group, group.join_deadline)

    def _join_deadline_passed(self, group: Group, deadline: float) -> None:
        if group.state == GroupState.PREPARING_REBALANCE and group.join_deadline == deadline:
            self._complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state == GroupState.PREPARING_REBALANCE and group.all_members_joined() and not group.initial_delay:
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        for member_id in [mid for mid, m in group.members.items() if m.join_future is None]:
            self._remove_member(group, member_id, reason="did not rejoin in time")
        group.pending_members.clear()
        group.generation_id += 1
        group.join_deadline = None
        if not group.members:
            group.state = GroupState.EMPTY
            group.protocol_name = None
            group.leader_id = None
            self._persist_later(group.group_id, [(group_key(group.group_id), group_value(group))])
            log.info("group %s is empty at generation %d", group.group_id, group.generation_id)
            return
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.state = GroupState.COMPLETING_REBALANCE
        log.info("group %s generation %d: %d members, protocol %s, leader %s", group.group_id, group.generation_id,
                 len(group.members), group.protocol_name, group.leader_id)
        now = time.monotonic()
        for m in group.members.values():
            m.assignment = b""
            m.heartbeat_deadline = now + m.session_timeout_ms / 1000
            fut, m.join_future = m.join_future, None
            if fut and not fut.done():
                fut.set_result(self._join_result(group, m))

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        is_leader = member.member_id == group.leader_id
        return JoinResult(ErrorCode.none, group.generation_id, group.protocol_type, group.protocol_name, group.leader_id or "",
                          member.member_id, list(group.members.values()) if is_leader else [])

    def _remove_member(self, group: Group, member_id: str, reason: str) -> None:
        member = group.members.pop(member_id, None)
        if member is None:
            return
        log.info("group %s: removing member %s (%s)", group.group_id, member_id, reason)
        if member.group_instance_id and group.static_members.get(member.group_instance_id) == member_id:
            del group.static_members[member.group_instance_id]
        for fut in (member.join_future, member.sync_future):
            if fut and not fut.done():
                fut.set_result(JoinResult(ErrorCode.unknown_member_id, member_id=member_id) if fut is member.join_future else (ErrorCode.unknown_member_id, b""))

    def _member_gone(self, group: Group, member_id: str, reason: str) -> None:
        self._remove_member(group, member_id, reason)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, reason)
        self._maybe_complete_join(group)
        if group.state == GroupState.PREPARING_REBALANCE and not group.members:
            self._complete_join(group)

    # --- SyncGroup, Heartbeat, LeaveGroup --------------------------------------------------

    def _check_member(self, group: Group | None, member_id: str, generation_id: int, group_instance_id: str | None) -> Member:
        if group is None or group.state == GroupState.DEAD:
            raise GroupError(ErrorCode.unknown_member_id)
        if group_instance_id and group.static_members.get(group_instance_id) not in (None, member_id):
            raise GroupError(ErrorCode.fenced_instance_id)
        member = group.members.get(member_id)
        if member is None:
            raise GroupError(ErrorCode.unknown_member_id)
        if generation_id != group.generation_id:
            raise GroupError(ErrorCode.illegal_generation)
        return member

    async def sync(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes]) -> tuple[ErrorCode, bytes]:
        if not self.owns(group_id):
            return ErrorCode.not_coordinator, b""
        group = self.groups.get(group_id)
        try:
            member = self._check_member(group, member_id, generation_id, group_instance_id)
        except GroupError as e:
            return e.code, b""
        if (protocol_type and protocol_type != group.protocol_type) or (protocol_name and protocol_name != group.protocol_name):
            return ErrorCode.inconsistent_group_protocol, b""
        member.heartbeat_deadline = time.monotonic() + member.session_timeout_ms / 1000
        if group.state == GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress, b""
        if group.state == GroupState.STABLE:
            return ErrorCode.none, member.assignment
        waiting = member.sync_future = asyncio.get_running_loop().create_future()
        if member_id == group.leader_id:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            error = await self._persist(group_id, [(group_key(group_id), group_value(group))])
            if group.state == GroupState.COMPLETING_REBALANCE and group.generation_id == generation_id:
                if error != ErrorCode.none:
                    for m in group.members.values():
                        m.assignment = b""
                    self._prepare_rebalance(group, "could not store the assignment")
                else:
                    group.state = GroupState.STABLE
                    for m in group.members.values():
                        fut, m.sync_future = m.sync_future, None
                        if fut and not fut.done():
                            fut.set_result((ErrorCode.none, m.assignment))
        return await waiting

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> ErrorCode:
        if not self.owns(group_id):
            return ErrorCode.not_coordinator
        group = self.groups.get(group_id)
        try:
            member = self._check_member(group, member_id, generation_id, group_instance_id)
        except GroupError as e:
            if e.code == ErrorCode.illegal_generation and group.state == GroupState.PREPARING_REBALANCE:
                return ErrorCode.rebalance_in_progress
            return e.code
        member.heartbeat_deadline = time.monotonic() + member.session_timeout_ms / 1000
        if group.state == GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        if not self.owns(group_id):
            return ErrorCode.not_coordinator, [(m, i, ErrorCode.not_coordinator) for m, i in members]
        group = self.groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            return ErrorCode.unknown_member_id, [(m, i, ErrorCode.unknown_member_id) for m, i in members]
        results = []
        for member_id, instance_id in members:
            if instance_id:
                known = group.static_members.get(instance_id)
                if known is None:
                    results.append((member_id, instance_id, ErrorCode.unknown_member_id))
                    continue
                if member_id and member_id != known:
                    results.append((member_id, instance_id, ErrorCode.fenced_instance_id))
                    continue
                member_id = known
            if member_id not in group.members:
                results.append((member_id, instance_id, ErrorCode.unknown_member_id))
                continue
            self._member_gone(group, member_id, "left the group")
            results.append((member_id, instance_id, ErrorCode.none))
        return ErrorCode.none, results

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(EXPIRY_CHECK_S)
            now = time.monotonic()
            for group in list(self.groups.values()):
                for member_id, m in list(group.members.items()):
                    # a member waiting in JoinGroup or SyncGroup is alive by definition
                    if m.heartbeat_deadline < now and m.join_future is None and m.sync_future is None:
                        self._member_gone(group, member_id, f"session timeout of {m.session_timeout_ms} ms expired")

    # --- offsets ---------------------------------------------------------------------------

    async def commit(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
               offsets: dict[tuple[str, int], CommittedOffset]) -> dict[tuple[str, int], ErrorCode]:
        group = self.groups.get(group_id)
        if not group_id:
            return {tp: ErrorCode.invalid_group_id for tp in offsets}
        if not self.owns(group_id):
            return {tp: ErrorCode.not_coordinator for tp in offsets}
        if generation_id < 0 and not member_id:
            # a simple consumer (assign() with a group.id): allowed while the group has no members
            if group is not None and group.members:
                return {tp: ErrorCode.unknown_member_id for tp in offsets}
            group = group or self.groups.setdefault(group_id, Group(group_id))
        else:
            try:
                member = self._check_member(group, member_id, generation_id, group_instance_id)
            except GroupError as e:
                return {tp: e.code for tp in offsets}
            if group.state == GroupState.COMPLETING_REBALANCE:
                return {tp: ErrorCode.rebalance_in_progress for tp in offsets}
            member.heartbeat_deadline = time.monotonic() + member.session_timeout_ms / 1000
        results: dict[tuple[str, int], ErrorCode] = {}
        accepted: dict[tuple[str, int], CommittedOffset] = {}
        for tp, committed in offsets.items():
            if committed.metadata is not None and len(committed.metadata.encode()) > MAX_METADATA_BYTES:
                results[tp] = ErrorCode.offset_metadata_too_large
            elif self.broker.image.partition(*tp) is None:
                results[tp] = ErrorCode.unknown_topic_or_partition
            else:
                accepted[tp] = committed
        if accepted:
            error = await self._persist(group_id, [(offset_key(group_id, t, p), offset_value(o)) for (t, p), o in accepted.items()])
            for tp in accepted:
                results[tp] = error
            if error == ErrorCode.none:
                group.offsets.update(accepted)
        return results

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None) -> dict[tuple[str, int], CommittedOffset | None]:
        group = self.groups.get(group_id)
        committed = group.offsets if group else {}
        if partitions is None:
            return dict(committed)
        return {tp: committed.get(tp) for tp in partitions}

    async def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        if not self.owns(group_id):
            return ErrorCode.not_coordinator, {}
        group = self.groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            return ErrorCode.group_id_not_found, {}
        subscribed = group.subscribed_topics() if group.members else set()
        if group.members and subscribed is None:
            return ErrorCode.non_empty_group, {}
        results = {}
        tombstones = []
        for tp in partitions:
            if tp[0] in subscribed:
                results[tp] = ErrorCode.group_subscribed_to_topic
            else:
                results[tp] = ErrorCode.none
                if tp in group.offsets:
                    tombstones.append(tp)
        if tombstones:
            error = await self._persist(group_id, [(offset_key(group_id, t, p), None) for t, p in tombstones])
            if error != ErrorCode.none:
                return error, {}
            for tp in tombstones:
                group.offsets.pop(tp, None)
        return ErrorCode.none, results

    async def delete_group(self, group_id: str) -> ErrorCode:
        if not self.owns(group_id):
            return ErrorCode.not_coordinator
        group = self.groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            return ErrorCode.group_id_not_found
        if group.state != GroupState.EMPTY or group.members:
            return ErrorCode.non_empty_group
        records = [(offset_key(group_id, t, p), None) for t, p in group.offsets] + [(group_key(group_id), None)]
        error = await self._persist(group_id, records)
        if error != ErrorCode.none:
            return error
        group.state = GroupState.DEAD
        del self.groups[group_id]
        return ErrorCode.none

    def list_groups(self) -> list[Group]:
        return [g for g in self.groups.values() if g.state != GroupState.DEAD]

