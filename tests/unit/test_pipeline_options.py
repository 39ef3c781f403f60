"""Fast checks of the pipeline's pure parts: source options, offsets, rate limits, DC prefix rules, header parsing,
and the stateful step (transactions, dedup) with a stand-in for Spark's GroupState."""

import json

import pandas as pd
import pytest

from logbus.pipeline.deliver_args import DeliverConfig  # noqa: E402
from logbus.pipeline.kafka_io import parse_headers  # noqa: E402
from logbus.pipeline.options import OptionError, parse_options, rate_limit, split_range  # noqa: E402
from logbus.pipeline.state import GroupLogic, LAKE_COLUMNS  # noqa: E402
from logbus.pipeline.topics import LogicalTopic, plan_reads  # noqa: E402

B = {"bootstrap.servers": "127.0.0.1:1"}


def test_options_need_servers_and_one_strategy():
    with pytest.raises(OptionError, match="bootstrap.servers"):
        parse_options({"subscribe": "a"}, streaming=True)
    with pytest.raises(OptionError, match="exactly one"):
        parse_options({**B}, streaming=True)
    with pytest.raises(OptionError, match="exactly one"):
        parse_options({**B, "subscribe": "a", "subscribePattern": "b.*"}, streaming=True)
    with pytest.raises(OptionError, match="unknown option"):
        parse_options({**B, "subscribe": "a", "startingOffset": "earliest"}, streaming=True)


def test_options_spark_names_case_insensitive():
    o = parse_options({"kafka.bootstrap.servers": "h:1", "SUBSCRIBE": "a,b", "maxOffsetsPerTrigger": "10",
                       "failOnDataLoss": "false", "client.rack": "r1", "kafka.fetch.max.bytes": "1000"}, streaming=True)
    assert o.subscribe == ("a", "b") and o.max_offsets_per_trigger == 10 and not o.fail_on_data_loss
    conf = o.consumer_config()
    assert conf["client.rack"] == "r1" and conf["fetch.max.bytes"] == "1000" and conf["enable.auto.commit"] == "false"
    with pytest.raises(OptionError, match="kafka.group.id"):
        parse_options({**B, "subscribe": "a", "kafka.group.id": "g"}, streaming=True)


def test_starting_and_ending_offsets():
    o = parse_options({**B, "subscribe": "t", "startingOffsets": json.dumps({"t": {"0": 5, "1": -2}})}, streaming=True)
    assert o.starting.spec_for(("t", 0), "latest") == ("offset", 5)
    assert o.starting.spec_for(("t", 1), "latest") == ("earliest", None)
    assert o.starting.spec_for(("t", 2), "latest") == ("latest", None)
    assert parse_options({**B, "subscribe": "t"}, streaming=False).starting.kind == "earliest"
    assert parse_options({**B, "subscribe": "t"}, streaming=True).starting.kind == "latest"
    ts = parse_options({**B, "subscribe": "t", "startingTimestamp": "1700000000000"}, streaming=True)
    assert ts.starting.spec_for(("t", 3), "latest") == ("timestamp", 1700000000000)
    with pytest.raises(OptionError, match="startingOffsets"):
        parse_options({**B, "subscribe": "t", "startingOffsets": "{bad"}, streaming=True)
    with pytest.raises(OptionError, match="batch"):
        parse_options({**B, "subscribe": "t", "endingOffsets": "latest"}, streaming=True)
    with pytest.raises(OptionError, match="latest"):
        parse_options({**B, "subscribe": "t", "startingOffsets": "latest"}, streaming=False)


def test_logical_topics_and_prefixes():
    o = parse_options({**B, "topics": "acme/web/access", "prefixes": "dc1,dc2"}, streaming=True)
    import re

    p = re.compile(o.subscribe_pattern)
    assert p.search("dc1.acme.web.access") and p.search("dc2.acme.web.access")
    assert not p.search("dc3.acme.web.access") and not p.search("dc1.acme.web.accessx")
    anyp = re.compile(parse_options({**B, "topics": "acme/*/access"}, streaming=True).subscribe_pattern)
    assert anyp.search("dc9.acme.api.access") and not anyp.search("dc9.other.api.access")
    with pytest.raises(OptionError, match="tenant/namespace/topic"):
        parse_options({**B, "topics": "acme.web"}, streaming=True)
    assert str(LogicalTopic.parse("a/b/c")) == "a/b/c"


def test_reading_rules_across_data_centres():
    clusters = {"dc1": "h1:9092", "dc2": "h2:9092", "dc3": "h3:9092"}
    local = plan_reads(clusters, "dc2")
    assert [(r.dc, r.bootstrap_servers, r.prefixes) for r in local] == [("dc2", "h2:9092", None)]
    remote = plan_reads(clusters, "dc9")
    assert [(r.dc, r.prefixes) for r in remote] == [("dc1", ["dc1"]), ("dc2", ["dc2"]), ("dc3", ["dc3"])]
    assert plan_reads(clusters, None) == remote


def test_rate_limit_is_proportional_to_lag():
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 100}
    latest = {("t", 0): 900, ("t", 1): 100, ("t", 2): 100}
    end = rate_limit(start, latest, 100)
    assert end == {("t", 0): 90, ("t", 1): 10, ("t", 2): 100}
    assert rate_limit(start, latest, 10_000) == latest
    tiny = rate_limit({("t", 0): 0, ("t", 1): 0}, {("t", 0): 1000, ("t", 1): 1}, 10)
    assert tiny[("t", 1)] == 1  # a partition with a little lag still moves (ceil below one record)


def test_split_range():
    assert split_range(0, 10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert split_range(5, 7, 10) == [(5, 6), (6, 7)]


def test_parse_headers():
    f, bad = parse_headers([("lb.source", b"s1"), ("lb.seqno", b"42"), ("lb.created", b"1700000000000"), ("x", b"\xff")])
    assert bad is None and f["source"] == "s1" and f["seqno"] == 42 and f["created"] == 1700000000000
    assert "not a decimal number" in parse_headers([("lb.source", b"s"), ("lb.seqno", b"4x2")])[1]
    assert "lb.seqno without lb.source" in parse_headers([("lb.seqno", b"1")])[1]
    assert "lb.commit marker without lb.txn" in parse_headers([("lb.commit", b"")])[1]
    assert "not UTF-8" in parse_headers([("lb.source", b"\xff"), ("lb.seqno", b"1")])[1]
    assert parse_headers(None) == ({}, None)
    f, bad = parse_headers([("lb.txn", b"T1"), ("lb.commit", None)])
    assert bad is None and f["commit"] is True and f["txn"] == "T1"


def test_deliver_config_layers(tmp_path):
    toml = tmp_path / "d.toml"
    toml.write_text('lake = "/lake"\nbootstrap_servers = "h:1"\ntopics = ["a/b/c"]\ncommit_window_s = 30\n')
    cfg = DeliverConfig.load(toml, env={"LOGBUS_DELIVER_MASTER": "local[2]"}, format="delta")
    assert (cfg.lake, cfg.commit_window_s, cfg.master, cfg.format) == ("/lake", 30.0, "local[2]", "delta")
    assert cfg.checkpoint_path == "/lake/_checkpoint" and cfg.quarantine_path == "/lake-quarantine"
    with pytest.raises(ValueError, match="exactly one"):
        DeliverConfig.load(None, env={}, lake="/l", bootstrap_servers="h:1")
    with pytest.raises(ValueError, match="unknown deliver setting"):
        DeliverConfig.load(None, env={}, lake="/l", bootstrap_servers="h:1", topics=["a/b/c"], nope=1)


# ---------------------------------------------------------------- the stateful step


class FakeState:
    """Spark's GroupState, as applyInPandasWithState hands it to the function."""

    def __init__(self, now: int, value=None, timed_out=False):
        self.now, self.value, self.hasTimedOut, self.removed = now, value, timed_out, False

    @property
    def exists(self):
        return self.value is not None

    @property
    def get(self):
        return self.value

    def update(self, v):
        self.value = v

    def remove(self):
        self.value, self.removed = None, True

    def setTimeoutDuration(self, ms):
        self.timeout = ms

    def getCurrentProcessingTimeMs(self):
        return self.now


def rows(*recs):
    names = [n for n, _ in LAKE_COLUMNS]
    out = []
    for i, r in enumerate(recs):
        d = {n: None for n in names}
        d.update(topic="t", partition=0, offset=i, commit=False)
        d.update(r)
        d["timestamp"] = pd.Timestamp(d.get("ts", 0), unit="ms", tz="UTC")
        d.pop("ts", None)
        out.append(d)
    return pd.DataFrame(out)


def run(logic, key, df, state):
    res = list(logic((key,), iter([df]), state))
    return pd.concat(res) if res else pd.DataFrame()


def test_dedup_drops_repeats_across_partitions_and_batches():
    logic = GroupLogic(60_000, 600_000)
    st = FakeState(now=1000)
    out = run(logic, "s:a", rows({"source": "a", "seqno": 1, "partition": 0}, {"source": "a", "seqno": 1, "partition": 3},
                                 {"source": "a", "seqno": 2}), st)
    assert sorted(out["seqno"]) == [1, 2]
    st.now = 2000
    out = run(logic, "s:a", rows({"source": "a", "seqno": 2, "partition": 5}, {"source": "a", "seqno": 3}), st)
    assert list(out["seqno"]) == [3]


def test_dedup_forgets_only_after_the_window_in_both_times():
    logic = GroupLogic(60_000, 10_000)
    st = FakeState(now=0)
    run(logic, "s:a", rows({"source": "a", "seqno": 1, "ts": 0}), st)
    st.now = 20_000  # processing time passed, bus time did not: still remembered
    assert run(logic, "s:a", rows({"source": "a", "seqno": 1, "ts": 1}), st).empty
    st.now = 40_000  # now bus time moved on too: forgotten
    run(logic, "s:a", rows({"source": "a", "seqno": 9, "ts": 30_000}), st)
    assert list(run(logic, "s:a", rows({"source": "a", "seqno": 1, "ts": 30_001}), st)["seqno"]) == [1]


def test_transaction_waits_for_its_marker_and_honours_the_window():
    logic = GroupLogic(60_000, 600_000)
    st = FakeState(now=0)
    data = rows({"source": "b", "seqno": 0, "txn": "T", "ts": 1000}, {"source": "b", "seqno": 1, "txn": "T", "ts": 1000},
                {"source": "b", "seqno": 0, "txn": "T", "ts": 1000, "partition": 2})
    assert run(logic, "t:T", data, st).empty  # held until the marker
    marker = rows({"txn": "T", "commit": True, "ts": 2000})
    out = run(logic, "t:T", marker, st)
    assert sorted(out["seqno"]) == [0, 1]  # repeat dropped, marker not emitted
    late = rows({"source": "b", "seqno": 2, "txn": "T", "ts": 1500})
    assert list(run(logic, "t:T", late, st)["seqno"]) == [2]  # after the marker, still within the window


def test_transaction_with_a_late_or_missing_marker_is_dropped():
    logic = GroupLogic(60_000, 600_000)
    st = FakeState(now=0)
    run(logic, "t:L", rows({"source": "c", "seqno": 0, "txn": "L", "ts": 0}), st)
    assert run(logic, "t:L", rows({"txn": "L", "commit": True, "ts": 61_000}), st).empty
    st2 = FakeState(now=0)
    run(logic, "t:U", rows({"source": "d", "seqno": 0, "txn": "U", "ts": 0}), st2)
    st2.now, st2.hasTimedOut = 600_001, True
    assert run(logic, "t:U", rows(), st2).empty and st2.removed


def test_records_without_source_pass_through():
    logic = GroupLogic(60_000, 600_000)
    out = run(logic, "p:t-0", rows({}, {}), FakeState(now=0))
    assert len(out) == 2
