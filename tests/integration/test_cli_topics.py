"""`logbus topics` as a user runs it: a subprocess against a real broker process."""

from __future__ import annotations

import json
import subprocess
import sys

ERROR_PREFIX = "Error while executing topic command : "


def topics(bootstrap: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "logbus.cli", "topics", "--bootstrap-server", bootstrap, *args],
        capture_output=True, text=True, timeout=timeout,
    )


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    return result.stdout


def listed(bootstrap: str) -> list[str]:
    return ok(topics(bootstrap, "--list")).split()


def describe_json(bootstrap: str, topic: str) -> dict:
    described = json.loads(ok(topics(bootstrap, "--describe", "--topic", topic, "--json")))
    assert [t["topic"] for t in described] == [topic]
    return described[0]


def test_create_list_describe_alter_delete(broker):
    b = broker.bootstrap
    out = ok(topics(b, "--create", "--topic", "events", "--partitions", "3", "--replication-factor", "1"))
    assert "Created topic events." in out
    assert "events" in listed(b)

    text = ok(topics(b, "--describe", "--topic", "events"))
    lines = text.splitlines()
    assert lines[0].startswith("Topic: events\t")
    assert "PartitionCount: 3" in lines[0] and "ReplicationFactor: 1" in lines[0]
    partition_lines = [line for line in lines[1:] if line.startswith("\tTopic: events\tPartition: ")]
    assert len(partition_lines) == 3
    assert "\tLeader: 0\tReplicas: 0\tIsr: 0\t" in partition_lines[0]

    desc = describe_json(b, "events")
    assert desc["partition_count"] == 3 and desc["replication_factor"] == 1
    assert [p["partition"] for p in desc["partitions"]] == [0, 1, 2]
    for p in desc["partitions"]:
        assert p["leader"] == 0 and p["replicas"] == [0] and p["isr"] == [0] and p["offline"] == []
    assert "retention.ms" not in desc["configs"]  # only overrides are shown

    ok(topics(b, "--alter", "--topic", "events", "--config", "retention.ms=1000"))
    assert "retention.ms=1000" in ok(topics(b, "--describe", "--topic", "events")).splitlines()[0]
    assert describe_json(b, "events")["configs"]["retention.ms"] == "1000"

    ok(topics(b, "--alter", "--topic", "events", "--delete-config", "retention.ms"))
    assert "retention.ms" not in describe_json(b, "events")["configs"]

    ok(topics(b, "--alter", "--topic", "events", "--partitions", "5"))
    assert describe_json(b, "events")["partition_count"] == 5

    ok(topics(b, "--delete", "--topic", "events"))
    assert "events" not in listed(b)


def test_create_with_config_and_regex_describe(broker):
    b = broker.bootstrap
    ok(topics(b, "--create", "--topic", "logs.a", "--partitions", "1", "--config", "retention.ms=60000", "--config", "segment.bytes=1048576"))
    ok(topics(b, "--create", "--topic", "logs.b", "--partitions", "2"))
    ok(topics(b, "--create", "--topic", "other", "--partitions", "1"))
    assert describe_json(b, "logs.a")["configs"] == {"retention.ms": "60000", "segment.bytes": "1048576"}
    described = json.loads(ok(topics(b, "--describe", "--topic", "logs\\..*", "--json")))
    assert [t["topic"] for t in described] == ["logs.a", "logs.b"]
    assert json.loads(ok(topics(b, "--list", "--topic", "logs.*", "--json"))) == ["logs.a", "logs.b"]


def test_create_twice_fails_unless_if_not_exists(broker):
    b = broker.bootstrap
    ok(topics(b, "--create", "--topic", "twice", "--partitions", "1"))
    again = topics(b, "--create", "--topic", "twice", "--partitions", "1")
    assert again.returncode == 1
    assert again.stderr.startswith(ERROR_PREFIX) and "already exists" in again.stderr
    ok(topics(b, "--create", "--topic", "twice", "--partitions", "1", "--if-not-exists"))


def test_bad_config_is_rejected_with_a_clear_message(broker):
    b = broker.bootstrap
    bad = topics(b, "--create", "--topic", "badcfg", "--partitions", "1", "--config", "retention.ms=abc")
    assert bad.returncode == 1, bad
    assert bad.stderr.startswith(ERROR_PREFIX) and "retention.ms" in bad.stderr
    assert "badcfg" not in listed(b)

    ok(topics(b, "--create", "--topic", "goodcfg", "--partitions", "1"))
    bad = topics(b, "--alter", "--topic", "goodcfg", "--config", "retention.ms=abc")
    assert bad.returncode == 1, bad
    assert bad.stderr.startswith(ERROR_PREFIX) and "retention.ms" in bad.stderr
    assert "retention.ms" not in describe_json(b, "goodcfg")["configs"]


def test_unknown_topic(broker):
    b = broker.bootstrap
    for action in ("--describe", "--delete"):
        missing = topics(b, action, "--topic", "nope")
        assert missing.returncode == 1, missing
        assert missing.stderr.strip() == ERROR_PREFIX + "Topic 'nope' does not exist as expected"
        assert topics(b, action, "--topic", "nope", "--if-exists").returncode == 0


def test_shrinking_partitions_fails(broker):
    b = broker.bootstrap
    ok(topics(b, "--create", "--topic", "shrink", "--partitions", "3"))
    shrink = topics(b, "--alter", "--topic", "shrink", "--partitions", "2")
    assert shrink.returncode == 1 and shrink.stderr.startswith(ERROR_PREFIX), shrink
    assert describe_json(b, "shrink")["partition_count"] == 3


def test_usage_errors_exit_2(broker):
    b = broker.bootstrap
    for args in (["--create", "--list"], ["--create"], ["--list", "--partitions", "3"], ["--create", "--topic", "x", "--config", "novalue"]):
        result = topics(b, *args)
        assert result.returncode == 2, (args, result)
        assert "usage: logbus topics" in result.stderr


def test_unreachable_broker_fails_within_bounds():
    from brokerproc import free_port

    result = topics(f"127.0.0.1:{free_port()}", "--list", timeout=45)
    assert result.returncode == 1
    assert result.stderr.startswith(ERROR_PREFIX) and "could not get metadata" in result.stderr
