"""Replica placement: Confluent's placement JSON and Kafka's rack-aware assignment."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from logbus.cluster.placement import (
    InvalidPlacementError,
    PlacementConstraint,
    PlacementConstraints,
    PlacementError,
    _assign_rack_aware,
    _assign_rack_unaware,
    _rack_alternated,
    assign_replicas,
    parse_placement,
)
from logbus.protocol.errors import ErrorCode

# The examples of Confluent's Multi-Region Clusters documentation.
DOC_EXAMPLE = """
{
    "version": 2,
    "replicas": [{"count": 3, "constraints": {"rack": "us-west"}}],
    "observers": [{"count": 2, "constraints": {"rack": "us-east"}}],
    "observerPromotionPolicy":"under-min-isr"
}
"""
DOC_INVALID_OVERLAP = {
    "version": 2,
    "replicas": [
        {"count": 2, "constraints": {"rack": "us-west"}},
        {"count": 1, "constraints": {"rack": "us-east"}},
    ],
    "observers": [{"count": 1, "constraints": {"rack": "us-east"}}],
}
DOC_VALID = {
    "version": 2,
    "replicas": [
        {"count": 2, "constraints": {"rack": "us-west"}},
        {"count": 1, "constraints": {"rack": "us-east-a"}},
    ],
    "observers": [{"count": 1, "constraints": {"rack": "us-east-b"}}],
}
DOC_DEFAULT_V1 = '{"version": 1,"replicas": [{"count": 2, "constraints": {"rack": "west"}}], "observers": [{"count": 2, "constraints": {"rack": "east"}}]}'

MRC_BROKERS = {1: "us-west", 2: "us-west", 3: "us-west", 4: "us-east", 5: "us-east"}


def entry(count, rack):
    return {"count": count, "constraints": {"rack": rack}}


# --- parsing ----------------------------------------------------------------------------------


def test_documentation_example_parses():
    c = parse_placement(DOC_EXAMPLE)
    assert c == PlacementConstraints(2, (PlacementConstraint(3, "us-west"),), (PlacementConstraint(2, "us-east"),), "under-min-isr")
    assert c.replication_factor == 3
    assert c.observer_count == 2
    assert c.total_replicas == 5
    assert c.to_json() == (
        '{"version":2,"replicas":[{"count":3,"constraints":{"rack":"us-west"}}],'
        '"observers":[{"count":2,"constraints":{"rack":"us-east"}}],"observerPromotionPolicy":"under-min-isr"}'
    )


def test_version_1_has_no_policy_in_json_and_behaves_as_leader_is_observer():
    c = parse_placement(DOC_DEFAULT_V1)
    assert c.version == 1
    assert c.observer_promotion_policy == "leader-is-observer"
    # The shape Confluent prints in `kafka-topics --describe`.
    assert c.to_json() == (
        '{"version":1,"replicas":[{"count":2,"constraints":{"rack":"west"}}],'
        '"observers":[{"count":2,"constraints":{"rack":"east"}}]}'
    )


def test_version_2_defaults_to_under_min_isr():
    c = parse_placement({"version": 2, "replicas": [entry(1, "a")]})
    assert c.observer_promotion_policy == "under-min-isr"
    assert c.observers == ()
    assert json.loads(c.to_json()) == {"version": 2, "replicas": [entry(1, "a")], "observerPromotionPolicy": "under-min-isr"}


@pytest.mark.parametrize("policy", ["under-min-isr", "under-replicated", "leader-is-observer"])
def test_every_promotion_policy(policy):
    c = parse_placement({**DOC_VALID, "observerPromotionPolicy": policy})
    assert c.observer_promotion_policy == policy


@pytest.mark.parametrize("source", [DOC_EXAMPLE, DOC_VALID, DOC_DEFAULT_V1, {"version": 1, "replicas": [entry(3, "x")]}])
def test_to_json_round_trips(source):
    c = parse_placement(source)
    assert parse_placement(c.to_json()) == c
    assert parse_placement(c.to_json().encode()) == c


def test_documentation_valid_example():
    c = parse_placement(json.dumps(DOC_VALID))
    assert [(e.count, e.rack) for e in c.replicas] == [(2, "us-west"), (1, "us-east-a")]
    assert [(e.count, e.rack) for e in c.observers] == [(1, "us-east-b")]
    assert c.replication_factor == 3


def test_documentation_invalid_example_overlapping_constraints():
    with pytest.raises(InvalidPlacementError, match=r"overlap.*'us-east'.*replicas\[1\].*observers\[0\]"):
        parse_placement(DOC_INVALID_OVERLAP)


@pytest.mark.parametrize(
    "source, match",
    [
        ("{not json", "not valid JSON"),
        ("", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('"text"', "must be a JSON object"),
        ({"replicas": [entry(1, "a")]}, "'version' must be 1 or 2"),
        ({"version": 3, "replicas": [entry(1, "a")]}, "'version' must be 1 or 2, not 3"),
        ({"version": "2", "replicas": [entry(1, "a")]}, "'version' must be 1 or 2"),
        ({"version": True, "replicas": [entry(1, "a")]}, "'version' must be 1 or 2"),
        ({"version": 2}, "non-empty 'replicas'"),
        ({"version": 2, "replicas": []}, "non-empty 'replicas'"),
        ({"version": 2, "replicas": entry(1, "a")}, "'replicas' must be a list"),
        ({"version": 2, "replicas": [entry(1, "a")], "observers": {}}, "'observers' must be a list"),
        ({"version": 2, "replicas": ["a"]}, r"replicas\[0\] must be an object"),
        ({"version": 2, "replicas": [{"constraints": {"rack": "a"}}]}, r"replicas\[0\].count must be an integer"),
        ({"version": 2, "replicas": [entry(0, "a")]}, r"count must be an integer of at least 1, not 0"),
        ({"version": 2, "replicas": [entry(-1, "a")]}, r"at least 1, not -1"),
        ({"version": 2, "replicas": [entry("2", "a")]}, r"at least 1, not '2'"),
        ({"version": 2, "replicas": [entry(1.5, "a")]}, r"at least 1, not 1.5"),
        ({"version": 2, "replicas": [entry(True, "a")]}, r"at least 1, not True"),
        ({"version": 2, "replicas": [entry(1, "a")], "observers": [{"count": 1}]}, r"observers\[0\] needs 'constraints'"),
        ({"version": 2, "replicas": [{"count": 1, "constraints": {}}]}, r"constraints.rack must be a non-empty string"),
        ({"version": 2, "replicas": [entry(1, 7)]}, r"rack must be a non-empty string, not 7"),
        ({"version": 2, "replicas": [entry(1, "")]}, r"rack must be a non-empty string"),
        ({"version": 2, "replicas": [entry(1, "a")], "extra": 1}, r"unknown keys \['extra'\]"),
        ({"version": 2, "replicas": [{**entry(1, "a"), "weight": 2}]}, r"replicas\[0\] has unknown keys \['weight'\]"),
        ({"version": 2, "replicas": [{"count": 1, "constraints": {"rack": "a", "zone": "z"}}]}, r"constraints has unknown keys \['zone'\]"),
        ({"version": 2, "replicas": [entry(1, "a"), entry(1, "a")]}, r"overlap: rack 'a' appears in replicas\[0\] and replicas\[1\]"),
        ({"version": 2, "replicas": [entry(1, "a")], "observers": [entry(1, "b"), entry(2, "b")]}, "overlap"),
        ({"version": 1, "replicas": [entry(1, "a")], "observerPromotionPolicy": "under-min-isr"}, "needs version 2"),
        ({"version": 2, "replicas": [entry(1, "a")], "observerPromotionPolicy": "always"}, "must be one of under-min-isr, under-replicated, leader-is-observer, not 'always'"),
        ({"version": 2, "replicas": [entry(1, "a")], "observerPromotionPolicy": None}, "must be one of"),
    ],
)
def test_invalid_placements(source, match):
    with pytest.raises(InvalidPlacementError, match=match) as info:
        parse_placement(source)
    assert info.value.code_name == "INVALID_CONFIG"
    assert info.value.error_code == ErrorCode.invalid_config


# --- Kafka's assignment without constraints -----------------------------------------------------


def test_rack_unaware_matches_kafka():
    # Kafka's AdminZkClientTest: brokers 0..4, 10 partitions, RF 3, fixed start index 0.
    assert _assign_rack_unaware(10, 3, [0, 1, 2, 3, 4], 0, 0, 0) == [
        [0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 0], [4, 0, 1],
        [0, 2, 3], [1, 3, 4], [2, 4, 0], [3, 0, 1], [4, 1, 2],
    ]  # fmt: skip


def test_rack_aware_matches_kafka():
    # Kafka's AdminRackAwareTest.testGetRackAlternatedBrokerListAndAssignReplicasToBrokers.
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert _rack_alternated(racks) == [0, 3, 1, 5, 4, 2]
    assert _rack_alternated({b: r for b, r in racks.items() if b != 5}) == [0, 3, 1, 4, 2]
    assert _assign_rack_aware(7, 3, racks, 0, 0, 0) == [
        [0, 3, 1], [3, 1, 5], [1, 5, 4], [5, 4, 2], [4, 2, 0], [2, 0, 3], [0, 4, 2],
    ]  # fmt: skip


@pytest.mark.parametrize("seed", range(8))
def test_rack_aware_spreads_leaders_and_racks(seed):
    brokers = {1: "r1", 2: "r1", 3: "r2", 4: "r2", 5: "r3", 6: "r3"}
    result = assign_replicas(12, brokers, replication_factor=3, seed=seed)
    assert len(result) == 12
    for replicas, observers in result:
        assert observers == []
        assert len(set(replicas)) == 3
        assert {brokers[b] for b in replicas} == {"r1", "r2", "r3"}  # one replica per rack
    leaders = Counter(r[0] for r, _ in result)
    assert sorted(leaders.values()) == [2] * 6  # 12 partitions over 6 brokers: 2 leaders each
    all_replicas = Counter(b for r, _ in result for b in r)
    assert sorted(all_replicas.values()) == [6] * 6


@pytest.mark.parametrize("seed", range(8))
def test_rack_unaware_spreads_leaders(seed):
    brokers = {1: None, 2: None, 3: None, 4: None}
    result = assign_replicas(8, brokers, replication_factor=2, seed=seed)
    for replicas, _ in result:
        assert len(set(replicas)) == 2
    assert sorted(Counter(r[0] for r, _ in result).values()) == [2, 2, 2, 2]


def test_rack_aware_with_more_replicas_than_racks():
    brokers = {1: "a", 2: "a", 3: "b", 4: "b"}
    for replicas, _ in assign_replicas(8, brokers, replication_factor=3, seed=3):
        assert len(set(replicas)) == 3
        assert {brokers[b] for b in replicas} == {"a", "b"}


def test_seed_makes_assignment_reproducible_and_start_partition_continues():
    brokers = {i: f"r{i % 3}" for i in range(6)}
    a = assign_replicas(10, brokers, replication_factor=3, seed=42)
    assert a == assign_replicas(10, brokers, replication_factor=3, seed=42)
    # Adding partitions later continues the pattern of the same start index.
    assert assign_replicas(4, brokers, replication_factor=3, seed=42, start_partition=6) == a[6:]


def test_replication_factor_larger_than_brokers():
    with pytest.raises(PlacementError, match=r"^Replication factor: 3 larger than available brokers: 2\.$") as info:
        assign_replicas(1, {1: None, 2: None}, replication_factor=3)
    assert info.value.code_name == "INVALID_REPLICATION_FACTOR"
    assert info.value.error_code == ErrorCode.invalid_replication_factor


@pytest.mark.parametrize(
    "kwargs, code, match",
    [
        ({"num_partitions": 0, "replication_factor": 1}, "INVALID_PARTITIONS", "Number of partitions must be larger than 0."),
        ({"num_partitions": 1, "replication_factor": 0}, "INVALID_REPLICATION_FACTOR", "Replication factor must be larger than 0."),
        ({"num_partitions": 1}, "INVALID_REPLICATION_FACTOR", "A replication factor is needed"),
    ],
)
def test_bad_counts(kwargs, code, match):
    n = kwargs.pop("num_partitions")
    with pytest.raises(PlacementError, match=match) as info:
        assign_replicas(n, {1: None}, **kwargs)
    assert info.value.code_name == code


def test_only_some_brokers_with_racks_fails_like_kafka():
    with pytest.raises(PlacementError, match=r"Not all brokers have rack information.*brokers \[2, 4\] have no broker.rack") as info:
        assign_replicas(3, {1: "a", 2: None, 3: "b", 4: None}, replication_factor=2)
    assert info.value.code_name == "INVALID_REPLICATION_FACTOR"
    # Without rack awareness (kafka-topics --disable-rack-aware) it works.
    result = assign_replicas(3, {1: "a", 2: None, 3: "b", 4: None}, replication_factor=2, rack_aware=False, seed=0)
    assert all(len(set(r)) == 2 for r, _ in result)


# --- assignment with placement constraints ---------------------------------------------------


def test_documentation_example_assignment():
    c = parse_placement(DOC_EXAMPLE)
    result = assign_replicas(3, MRC_BROKERS, constraints=c, seed=1)
    # The same layout as the `kafka-topics --describe` output in Confluent's documentation.
    assert result == [
        ([1, 2, 3, 4, 5], [4, 5]),
        ([2, 3, 1, 5, 4], [5, 4]),
        ([3, 1, 2, 4, 5], [4, 5]),
    ]


@pytest.mark.parametrize("seed", range(6))
def test_constraints_place_replicas_and_observers_by_rack(seed):
    brokers = {1: "us-west", 2: "us-west", 3: "us-east-a", 4: "us-east-a", 5: "us-east-b", 6: "us-east-b", 7: "other"}
    c = parse_placement(DOC_VALID)
    result = assign_replicas(8, brokers, constraints=c, seed=seed)
    for replicas, observers in result:
        assert len(replicas) == 4 and len(set(replicas)) == 4
        sync = replicas[:3]
        assert replicas[3:] == observers
        assert [brokers[b] for b in sync] == ["us-west", "us-west", "us-east-a"]
        assert [brokers[b] for b in observers] == ["us-east-b"]
        assert 7 not in replicas
    # Leaders rotate over the brokers of the first rack; observers over theirs.
    assert sorted(Counter(r[0] for r, _ in result).values()) == [4, 4]
    assert sorted(Counter(o[0] for _, o in result).values()) == [4, 4]
    assert sorted(Counter(r[2] for r, _ in result).values()) == [4, 4]


def test_constraints_with_more_brokers_than_needed_spread_leaders():
    brokers = {i: "west" for i in range(1, 6)} | {i: "east" for i in range(6, 9)}
    c = parse_placement({"version": 2, "replicas": [entry(3, "west")], "observers": [entry(1, "east")]})
    result = assign_replicas(10, brokers, constraints=c, seed=7)
    assert sorted(Counter(r[0] for r, _ in result).values()) == [2, 2, 2, 2, 2]
    for replicas, observers in result:
        assert len(set(replicas)) == 4 and len(observers) == 1 and brokers[observers[0]] == "east"


def test_constraints_not_satisfiable_too_few_brokers():
    c = parse_placement(DOC_EXAMPLE)
    brokers = {1: "us-west", 2: "us-west", 3: "us-west", 4: "us-east"}
    with pytest.raises(PlacementError) as info:
        assign_replicas(3, brokers, constraints=c)
    e = info.value
    assert e.code_name == "INVALID_REPLICATION_FACTOR"
    assert "observers need 2 broker(s) in rack 'us-east'" in e.message
    assert "has only 1 live broker(s) [4]" in e.message
    assert "known racks: us-east (brokers [4]), us-west (brokers [1, 2, 3])" in e.message


def test_constraints_not_satisfiable_unknown_rack():
    c = parse_placement({"version": 1, "replicas": [entry(2, "mars")]})
    with pytest.raises(PlacementError, match=r"replicas need 2 broker\(s\) in rack 'mars', but rack 'mars' has no live broker; known racks: us-east"):
        assign_replicas(1, MRC_BROKERS, constraints=c)


def test_constraints_with_brokers_without_rack():
    c = parse_placement({"version": 1, "replicas": [entry(1, "west")]})
    with pytest.raises(PlacementError, match="no live broker has a rack"):
        assign_replicas(1, {1: None, 2: None}, constraints=c)
    # Brokers without a rack are simply never chosen when enough others match.
    assert assign_replicas(2, {1: None, 2: "west"}, constraints=c) == [([2], []), ([2], [])]


def test_constraints_and_a_different_replication_factor_conflict():
    c = parse_placement(DOC_EXAMPLE)
    with pytest.raises(PlacementError, match="give one of them") as info:
        assign_replicas(1, MRC_BROKERS, constraints=c, replication_factor=5)
    assert info.value.code_name == "INVALID_REQUEST"
    # The same replication factor as the constraints (or -1, "broker default") is accepted.
    assert assign_replicas(1, MRC_BROKERS, constraints=c, replication_factor=3, seed=1) == [([1, 2, 3, 4, 5], [4, 5])]
    assert assign_replicas(1, MRC_BROKERS, constraints=c, replication_factor=-1, seed=1) == [([1, 2, 3, 4, 5], [4, 5])]
