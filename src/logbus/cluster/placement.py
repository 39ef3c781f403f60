"""Replica placement: Kafka's rack-aware assignment and Confluent's replica placement constraints.

Placement constraints are the JSON of Confluent Server's Multi-Region Clusters, given per topic
(`confluent.placement.constraints`, `logbus topics --create --replica-placement FILE`) or as the
cluster default (`log.placement.constraints`)::

    {"version": 2,
     "replicas":  [{"count": 3, "constraints": {"rack": "us-west"}}],
     "observers": [{"count": 2, "constraints": {"rack": "us-east"}}],
     "observerPromotionPolicy": "under-min-isr"}

`replicas` are the synchronous replicas (the ISR candidates), `observers` the asynchronous ones.
A rack may appear in one entry only, across both lists (overlapping constraints are invalid).
`observerPromotionPolicy` exists only in version 2 (default `under-min-isr`); version 1 always
behaves as `leader-is-observer` (observers join the ISR only through an unclean election).

`assign_replicas` returns, per partition, the replica list (synchronous replicas first, the
preferred leader first among them, then the observers) and the observer list:

- without constraints it is Kafka's `AdminUtils.assignReplicasToBrokers`: brokers ordered
  alternating racks, a (random or seeded) start index, followers shifted so that leaders and
  followers spread evenly, and each partition's replicas on as many racks as possible;
- with constraints each entry takes `count` brokers of its rack, rotating by partition, so the
  leaders spread over the brokers of the first `replicas` entry's rack (the preferred leader
  always comes from the first entry: list the rack that should lead first).
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass

from logbus.protocol.errors import ErrorCode

PROMOTION_POLICIES = ("under-min-isr", "under-replicated", "leader-is-observer")
DEFAULT_PROMOTION_POLICY = "under-min-isr"
VERSION_1_PROMOTION_POLICY = "leader-is-observer"

_TOP_KEYS = {"version", "replicas", "observers", "observerPromotionPolicy"}
_ENTRY_KEYS = {"count", "constraints"}
_CONSTRAINT_KEYS = {"rack"}


class InvalidPlacementError(ValueError):
    """The placement JSON is malformed or breaks a rule; answered as INVALID_CONFIG."""

    code_name = "INVALID_CONFIG"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def error_code(self) -> ErrorCode:
        return ErrorCode.invalid_config


class PlacementError(Exception):
    """Replicas cannot be assigned; `code_name` is the Kafka error to answer with."""

    def __init__(self, code_name: str, message: str) -> None:
        super().__init__(message)
        self.code_name = code_name
        self.message = message

    @property
    def error_code(self) -> ErrorCode:
        return ErrorCode[self.code_name.lower()]


@dataclass(frozen=True)
class PlacementConstraint:
    """One entry of `replicas` or `observers`: `count` brokers whose broker.rack is `rack`."""

    count: int
    rack: str

    def to_dict(self) -> dict:
        return {"count": self.count, "constraints": {"rack": self.rack}}


@dataclass(frozen=True)
class PlacementConstraints:
    version: int
    replicas: tuple[PlacementConstraint, ...]
    observers: tuple[PlacementConstraint, ...] = ()
    # The effective policy: version 1 always behaves as "leader-is-observer".
    observer_promotion_policy: str = DEFAULT_PROMOTION_POLICY

    @property
    def replication_factor(self) -> int:
        """The number of synchronous replicas (ISR candidates) per partition."""
        return sum(c.count for c in self.replicas)

    @property
    def observer_count(self) -> int:
        return sum(c.count for c in self.observers)

    @property
    def total_replicas(self) -> int:
        """Synchronous replicas plus observers: the length of a partition's replica list."""
        return self.replication_factor + self.observer_count

    def to_dict(self) -> dict:
        out: dict = {"version": self.version, "replicas": [c.to_dict() for c in self.replicas]}
        if self.observers:
            out["observers"] = [c.to_dict() for c in self.observers]
        if self.version >= 2:
            out["observerPromotionPolicy"] = self.observer_promotion_policy
        return out

    def to_json(self) -> str:
        """Compact JSON in Confluent's shape; `parse_placement(c.to_json()) == c`."""
        return json.dumps(self.to_dict(), separators=(",", ":"))


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _parse_entries(raw: object, field: str, *, required: bool) -> tuple[PlacementConstraint, ...]:
    if raw is None:
        if required:
            raise InvalidPlacementError(f"Replica placement needs a non-empty '{field}' list")
        return ()
    if not isinstance(raw, list):
        raise InvalidPlacementError(f"Replica placement '{field}' must be a list, not {type(raw).__name__}")
    if required and not raw:
        raise InvalidPlacementError(f"Replica placement needs a non-empty '{field}' list")
    entries = []
    for i, entry in enumerate(raw):
        where = f"{field}[{i}]"
        if not isinstance(entry, dict):
            raise InvalidPlacementError(f"Replica placement {where} must be an object with 'count' and 'constraints'")
        unknown = sorted(set(entry) - _ENTRY_KEYS)
        if unknown:
            raise InvalidPlacementError(f"Replica placement {where} has unknown keys {unknown}; allowed: count, constraints")
        count = entry.get("count")
        if not _is_int(count) or count < 1:
            raise InvalidPlacementError(f"Replica placement {where}.count must be an integer of at least 1, not {count!r}")
        constraints = entry.get("constraints")
        if not isinstance(constraints, dict):
            raise InvalidPlacementError(f"Replica placement {where} needs 'constraints': {{\"rack\": \"...\"}}")
        unknown = sorted(set(constraints) - _CONSTRAINT_KEYS)
        if unknown:
            raise InvalidPlacementError(f"Replica placement {where}.constraints has unknown keys {unknown}; allowed: rack")
        rack = constraints.get("rack")
        if not isinstance(rack, str) or not rack:
            raise InvalidPlacementError(f"Replica placement {where}.constraints.rack must be a non-empty string, not {rack!r}")
        entries.append(PlacementConstraint(count, rack))
    return tuple(entries)


def parse_placement(source: str | bytes | Mapping) -> PlacementConstraints:
    """Parse and validate Confluent's replica placement JSON (text or an already decoded dict)."""
    if isinstance(source, (str, bytes, bytearray)):
        try:
            data = json.loads(source)
        except ValueError as e:
            raise InvalidPlacementError(f"Replica placement is not valid JSON: {e}") from None
    else:
        data = source
    if not isinstance(data, Mapping):
        raise InvalidPlacementError(f"Replica placement must be a JSON object, not {type(data).__name__}")
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise InvalidPlacementError(
            f"Replica placement has unknown keys {unknown}; allowed: version, replicas, observers, observerPromotionPolicy"
        )
    version = data.get("version")
    if not _is_int(version) or version not in (1, 2):
        raise InvalidPlacementError(f"Replica placement 'version' must be 1 or 2, not {version!r}")
    replicas = _parse_entries(data.get("replicas"), "replicas", required=True)
    observers = _parse_entries(data.get("observers"), "observers", required=False)

    seen: dict[str, str] = {}
    for field, entries in (("replicas", replicas), ("observers", observers)):
        for i, c in enumerate(entries):
            where = f"{field}[{i}]"
            if c.rack in seen:
                raise InvalidPlacementError(
                    f"Replica placement constraints overlap: rack {c.rack!r} appears in {seen[c.rack]} and {where}; "
                    "each rack may appear in one entry only"
                )
            seen[c.rack] = where

    if "observerPromotionPolicy" in data:
        policy = data["observerPromotionPolicy"]
        if version == 1:
            raise InvalidPlacementError(
                "Replica placement 'observerPromotionPolicy' needs version 2; version 1 always behaves as leader-is-observer"
            )
        if policy not in PROMOTION_POLICIES:
            raise InvalidPlacementError(
                f"Replica placement 'observerPromotionPolicy' must be one of {', '.join(PROMOTION_POLICIES)}, not {policy!r}"
            )
    else:
        policy = DEFAULT_PROMOTION_POLICY if version == 2 else VERSION_1_PROMOTION_POLICY
    return PlacementConstraints(version, replicas, observers, policy)


# --- assignment ----------------------------------------------------------------------------


def _describe_racks(brokers: Mapping[int, str | None]) -> str:
    by_rack: dict[str, list[int]] = {}
    for b, r in brokers.items():
        if r is not None:
            by_rack.setdefault(r, []).append(b)
    if not by_rack:
        return "no live broker has a rack (broker.rack)"
    return "known racks: " + ", ".join(f"{r} (brokers {sorted(ids)})" for r, ids in sorted(by_rack.items()))


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n


def _rack_alternated(brokers: Mapping[int, str]) -> list[int]:
    """Kafka's getRackAlternatedBrokerList: one broker of each rack (sorted) in turn."""
    by_rack: dict[str, list[int]] = {}
    for b in sorted(brokers):
        by_rack.setdefault(brokers[b], []).append(b)
    iters = [iter(by_rack[r]) for r in sorted(by_rack)]
    out: list[int] = []
    while len(out) < len(brokers):
        for it in iters:
            b = next(it, None)
            if b is not None:
                out.append(b)
    return out


def _assign_rack_unaware(n_parts: int, rf: int, ids: list[int], start_partition: int, start: int, shift: int) -> list[list[int]]:
    """Kafka's assignReplicasToBrokersRackUnaware with a start index and a first follower shift."""
    n = len(ids)
    out = []
    for p in range(start_partition, start_partition + n_parts):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        out.append([ids[first]] + [ids[_replica_index(first, shift, j, n)] for j in range(rf - 1)])
    return out


def _assign_rack_aware(n_parts: int, rf: int, racks: Mapping[int, str], start_partition: int, start: int, shift: int) -> list[list[int]]:
    """Kafka's assignReplicasToBrokersRackAware with a start index and a first follower shift."""
    arranged = _rack_alternated(racks)
    n = len(arranged)
    n_racks = len(set(racks.values()))
    out = []
    for p in range(start_partition, start_partition + n_parts):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        leader = arranged[first]
        replicas = [leader]
        racks_used = {racks[leader]}
        k = 0
        for _ in range(rf - 1):
            while True:
                b = arranged[_replica_index(first, shift * n_racks, k, n)]
                k += 1
                # Skip a broker whose rack already has a replica while some rack has none, and a
                # broker that already has a replica while some broker has none.
                if (racks[b] not in racks_used or len(racks_used) == n_racks) and (b not in replicas or len(replicas) == n):
                    replicas.append(b)
                    racks_used.add(racks[b])
                    break
        out.append(replicas)
    return out


def assign_replicas(
    num_partitions: int,
    brokers: Mapping[int, str | None],
    *,
    replication_factor: int | None = None,
    constraints: PlacementConstraints | None = None,
    start_partition: int = 0,
    seed: int | None = None,
    rack_aware: bool = True,
) -> list[tuple[list[int], list[int]]]:
    """Assign replicas to partitions `start_partition .. start_partition + num_partitions - 1`.

    `brokers` maps each live broker id to its rack (None: no broker.rack). Returns one
    `(replicas, observers)` per partition; `replicas` holds the synchronous replicas (the
    preferred leader first) followed by the observers. `seed` makes the start index
    reproducible (None: random, like Kafka). `rack_aware=False` ignores racks (Kafka's
    `--disable-rack-aware`); it does not apply to placement constraints, which are racks.
    """
    if num_partitions < 1:
        raise PlacementError("INVALID_PARTITIONS", "Number of partitions must be larger than 0.")
    rng = random.Random(seed)
    if constraints is not None:
        if replication_factor is not None and replication_factor not in (-1, constraints.replication_factor):
            raise PlacementError(
                "INVALID_REQUEST",
                f"Both a replication factor ({replication_factor}) and replica placement constraints "
                f"({constraints.replication_factor} replicas, {constraints.observer_count} observers) are given; give one of them.",
            )
        return _assign_constrained(num_partitions, brokers, constraints, start_partition, rng)

    if replication_factor is None or replication_factor == -1:
        raise PlacementError("INVALID_REPLICATION_FACTOR", "A replication factor is needed when no replica placement constraints are given.")
    if replication_factor < 1:
        raise PlacementError("INVALID_REPLICATION_FACTOR", "Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise PlacementError(
            "INVALID_REPLICATION_FACTOR",
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}.",
        )
    with_rack = {b: r for b, r in brokers.items() if r is not None}
    start, shift = rng.randrange(len(brokers)), rng.randrange(len(brokers))
    if not rack_aware or not with_rack:
        lists = _assign_rack_unaware(num_partitions, replication_factor, sorted(brokers), start_partition, start, shift)
    else:
        without = sorted(b for b, r in brokers.items() if r is None)
        if without:
            raise PlacementError(
                "INVALID_REPLICATION_FACTOR",
                f"Not all brokers have rack information for replica rack aware assignment: brokers {without} have no "
                f"broker.rack ({_describe_racks(brokers)}). Set broker.rack on every broker or disable rack-aware assignment.",
            )
        lists = _assign_rack_aware(num_partitions, replication_factor, with_rack, start_partition, start, shift)
    return [(replicas, []) for replicas in lists]


def _assign_constrained(
    num_partitions: int,
    brokers: Mapping[int, str | None],
    constraints: PlacementConstraints,
    start_partition: int,
    rng: random.Random,
) -> list[tuple[list[int], list[int]]]:
    entries = [(c, False) for c in constraints.replicas] + [(c, True) for c in constraints.observers]
    pools: list[tuple[list[int], int]] = []
    for c, is_observer in entries:
        members = sorted(b for b, r in brokers.items() if r == c.rack)
        if len(members) < c.count:
            kind = "observers" if is_observer else "replicas"
            have = f"has only {len(members)} live broker(s) {members}" if members else "has no live broker"
            raise PlacementError(
                "INVALID_REPLICATION_FACTOR",
                f"Replica placement constraint cannot be met: {kind} need {c.count} broker(s) in rack {c.rack!r}, "
                f"but rack {c.rack!r} {have}; {_describe_racks(brokers)}.",
            )
        pools.append((members, rng.randrange(len(members))))
    out = []
    for p in range(start_partition, start_partition + num_partitions):
        replicas: list[int] = []
        observers: list[int] = []
        for (c, is_observer), (members, start) in zip(entries, pools):
            n = len(members)
            picked = [members[(start + p + j) % n] for j in range(c.count)]
            (observers if is_observer else replicas).extend(picked)
        out.append((replicas + observers, observers))
    return out
