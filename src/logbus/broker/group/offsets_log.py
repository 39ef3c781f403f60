"""Durable group state: committed offsets and group metadata as records of the internal topic
`__consumer_offsets`, a partitioned log like any other (so it replicates like any other).

Keys and values are small JSON documents; a value of null is a tombstone. The log is read from
its start when the broker starts, the last record for a key winning.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Iterator

from kio.records.readers import read_batch

from logbus.broker.topics import OFFSETS_TOPIC
from logbus.protocol.records import encode_batch

from .model import CommittedOffset, Group, GroupState, Member

log = logging.getLogger(__name__)

READ_CHUNK = 1 << 20


def java_string_hash(text: str) -> int:
    data = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h


def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's Utils.abs(groupId.hashCode) % partitions, so groups land where Kafka would put them."""
    return (java_string_hash(group_id) & 0x7FFFFFFF) % partitions


def offset_key(group_id: str, topic: str, partition: int) -> bytes:
    return json.dumps({"k": "offset", "g": group_id, "t": topic, "p": partition}, separators=(",", ":")).encode()


def group_key(group_id: str) -> bytes:
    return json.dumps({"k": "group", "g": group_id}, separators=(",", ":")).encode()


def offset_value(o: CommittedOffset) -> bytes:
    return json.dumps({"offset": o.offset, "leader_epoch": o.leader_epoch, "metadata": o.metadata, "ts": o.commit_timestamp}).encode()


def group_value(g: Group) -> bytes:
    return json.dumps(
        {
            "protocol_type": g.protocol_type,
            "generation": g.generation_id,
            "protocol": g.protocol_name,
            "leader": g.leader_id,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "session_timeout_ms": m.session_timeout_ms,
                    "rebalance_timeout_ms": m.rebalance_timeout_ms,
                    "protocol": g.protocol_name,
                    "metadata": base64.b64encode(m.metadata_for(g.protocol_name)).decode(),
                    "assignment": base64.b64encode(m.assignment).decode(),
                }
                for m in g.members.values()
            ],
        }
    ).encode()


def encode_records(records: list[tuple[bytes, bytes | None]]) -> bytes:
    now = int(time.time() * 1000)
    return encode_batch([v for _, v in records], keys=[k for k, _ in records], timestamps=[now] * len(records))


def iter_records(plog) -> Iterator[tuple[bytes, bytes | None]]:
    """Every (key, value) of a partition log, oldest first."""
    offset = plog.log_start_offset
    end = plog.log_end_offset
    while offset < end:
        data = plog.read(offset, READ_CHUNK)
        if not data:
            return
        pos = 0
        while pos < len(data):
            batch, size = read_batch(data, pos)  # kio readers return the size they consumed
            pos += size
            for r in batch.records:
                if r.key is not None:
                    yield r.key, r.value
            offset = batch.base_offset + batch.last_offset_delta + 1


def load_groups(plog, groups: dict[str, Group]) -> None:
    """Apply a partition of the offsets topic to `groups` (last record per key wins)."""
    for key, value in iter_records(plog):
        try:
            k = json.loads(key)
        except ValueError:
            log.warning("skipping an unreadable key in %s", OFFSETS_TOPIC)
            continue
        group_id = k.get("g")
        if k.get("k") == "offset":
            group = groups.setdefault(group_id, Group(group_id))
            tp = (k["t"], k["p"])
            if value is None:
                group.offsets.pop(tp, None)
            else:
                v = json.loads(value)
                group.offsets[tp] = CommittedOffset(v["offset"], v["leader_epoch"], v["metadata"], v["ts"])
        elif k.get("k") == "group":
            if value is None:
                groups.pop(group_id, None)
                continue
            group = groups.setdefault(group_id, Group(group_id))
            _restore_group(group, json.loads(value))


def _restore_group(group: Group, v: dict) -> None:
    group.protocol_type = v["protocol_type"]
    group.generation_id = v["generation"]
    group.protocol_name = v["protocol"]
    group.leader_id = v["leader"]
    group.members = {}
    group.static_members = {}
    for m in v["members"]:
        member = Member(
            member_id=m["member_id"],
            group_instance_id=m["group_instance_id"],
            client_id=m["client_id"],
            client_host=m["client_host"],
            session_timeout_ms=m["session_timeout_ms"],
            rebalance_timeout_ms=m["rebalance_timeout_ms"],
            protocol_type=v["protocol_type"] or "",
            protocols=[(m["protocol"], base64.b64decode(m["metadata"]))] if m["protocol"] else [],
            assignment=base64.b64decode(m["assignment"]),
        )
        group.members[member.member_id] = member
        if member.group_instance_id:
            group.static_members[member.group_instance_id] = member.member_id
    group.state = GroupState.STABLE if group.members else GroupState.EMPTY
