"""`logbus cluster up`, `logbus cluster status`, `logbus leader-election` and placement in `logbus topics`,
run as a user runs them: subprocesses against real broker processes, faults by SIGKILL, every wait bounded."""

from __future__ import annotations

import json
import os
import queue
import random
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest
from brokerproc import wait_until

LOGBUS = [sys.executable, "-m", "logbus.cli"]
TOPICS_ERROR = "Error while executing topic command : "
ELECTION_ERROR = "Error while executing leader election command : "
FAST = "session_timeout_ms = 2000\nreplica_lag_time_max_ms = 3000\n"
# 2 synchronous replicas in rack a, 1 observer in rack b (brokers 0, 1 in a; broker 2 in b)
PLACEMENT = {
    "version": 2,
    "replicas": [{"count": 2, "constraints": {"rack": "a"}}],
    "observers": [{"count": 1, "constraints": {"rack": "b"}}],
    "observerPromotionPolicy": "under-min-isr",
}


def logbus(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*LOGBUS, *args], capture_output=True, text=True, timeout=timeout)


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    return result.stdout


def free_port_range(n: int) -> int:
    """A base port P such that P..P+n-1 are free on 127.0.0.1 right now."""
    for _ in range(200):
        base = random.randint(20000, 60000 - n)
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port range")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it is gone for our purposes
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


class ClusterUp:
    """`logbus cluster up --json` as a subprocess; its JSON event lines are read by a thread."""

    def __init__(self, root: Path, brokers: int, racks: str | None = None, extra: list[str] | None = None) -> None:
        self.root = root
        self.port = free_port_range(brokers)
        args = ["cluster", "up", "--brokers", str(brokers), "--dir", str(root), "--port", str(self.port), "--json"]
        if racks:
            args += ["--racks", racks]
        self.stderr_path = root.parent / f"{root.name}-up.stderr"
        self._stderr = open(self.stderr_path, "w")
        self.proc = subprocess.Popen([*LOGBUS, *args, *(extra or [])], stdout=subprocess.PIPE, stderr=self._stderr, text=True)
        self.events: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.up: dict = {}

    def _read(self) -> None:
        for line in self.proc.stdout:
            line = line.strip()
            if line:
                self.events.put(json.loads(line))

    def next_event(self, timeout: float) -> dict:
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no event from cluster up within {timeout} s; stderr:\n{self.stderr_path.read_text()}") from None

    def wait_up(self, timeout: float = 90) -> dict:
        event = self.next_event(timeout)
        assert event["event"] == "up", event
        self.up = event
        return event

    @property
    def bootstrap(self) -> str:
        return self.up["bootstrap_servers"]

    def pids(self) -> list[int]:
        return [b["pid"] for b in self.up.get("brokers", [])]

    def terminate(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self._stderr.close()

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for pid in self.pids():
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def cluster_up(tmp_path):
    started: list[ClusterUp] = []

    def make(brokers: int = 3, racks: str | None = None, extra: list[str] | None = None) -> ClusterUp:
        c = ClusterUp(tmp_path / f"cluster{len(started)}", brokers, racks, extra)
        started.append(c)
        c.wait_up()
        return c

    yield make
    for c in started:
        c.cleanup()


def describe(bootstrap: str, topic: str) -> dict:
    described = json.loads(ok(logbus("topics", "--bootstrap-server", bootstrap, "--describe", "--topic", topic, "--json")))
    return described[0]


def partition(bootstrap: str, topic: str, index: int) -> dict:
    return next(p for p in describe(bootstrap, topic)["partitions"] if p["partition"] == index)


def status(bootstrap: str) -> dict:
    return json.loads(ok(logbus("cluster", "status", "--bootstrap-server", bootstrap, "--json")))


def produce(bootstrap: str, topic: str, n: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "message.timeout.ms": 30000})
    failed = []
    for i in range(n):
        p.produce(topic, value=f"record-{i}".encode(), partition=i % 2,
                  on_delivery=lambda err, msg: failed.append(err) if err else None)
    assert p.flush(40) == 0
    assert failed == []


def test_cluster_up_placement_status_failover_and_preferred_election(cluster_up, tmp_path):
    config = tmp_path / "fast.toml"
    config.write_text(FAST)
    c = cluster_up(brokers=3, racks="a,a,b", extra=["--config", str(config), "--stop-timeout", "10"])
    b = c.bootstrap
    up = c.up
    assert b == ",".join(f"127.0.0.1:{c.port + i}" for i in range(3))
    assert [(x["id"], x["rack"]) for x in up["brokers"]] == [(0, "a"), (1, "a"), (2, "b")]
    for x in up["brokers"]:
        assert Path(x["log"]) == c.root / f"broker-{x['id']}.log" and Path(x["log"]).exists()
        assert Path(x["pid_file"]).read_text().strip() == str(x["pid"]) and pid_alive(x["pid"])
    assert json.loads((c.root / "cluster.json").read_text())["bootstrap_servers"] == b
    assert up["metadata"] == f"local://{c.root / 'metadata.db'}"

    # a topic with 2 synchronous replicas in rack a and 1 observer in rack b, without a replication factor
    placement = tmp_path / "placement.json"
    placement.write_text(json.dumps(PLACEMENT, indent=2))
    out = ok(logbus("topics", "--bootstrap-server", b, "--create", "--topic", "obs", "--partitions", "2",
                    "--replica-placement", str(placement), "--config", "min.insync.replicas=2"))
    assert "Created topic obs." in out

    desc = wait_until(lambda: (d := describe(b, "obs")) and all(len(p["isr"]) == 2 for p in d["partitions"]) and d,
                      30, "both synchronous replicas in the ISR")
    assert json.loads(desc["configs"]["confluent.placement.constraints"]) == PLACEMENT
    for p in desc["partitions"]:
        assert sorted(p["replicas"]) == [0, 1, 2] and p["observers"] == [2]
        assert sorted(p["isr"]) == [0, 1] and p["offline"] == [] and p["leader"] == p["replicas"][0]
    text = ok(logbus("topics", "--bootstrap-server", b, "--describe", "--topic", "obs"))
    lines = [line for line in text.splitlines() if line.startswith("\tTopic: obs\tPartition: ")]
    assert len(lines) == 2
    for line in lines:
        assert line.endswith("\tObservers: 2"), line
        assert "\tOffline: \t" in line

    st = status(b)
    assert [(x["id"], x["rack"]) for x in st["brokers"]] == [(0, "a"), (1, "a"), (2, "b")]
    assert st["controller"] in (0, 1, 2) and st["cluster_id"] == up["cluster_id"]
    assert st["summary"]["under_replicated"] == 0 and st["summary"]["offline"] == 0
    human = ok(logbus("cluster", "status", "--bootstrap-server", b))
    assert "Live brokers: 3" in human and "Every partition has a leader and a full ISR." in human

    produce(b, "obs", 200)

    # SIGKILL the preferred leader of obs-0: another replica leads, the ISR shrinks below min.insync.replicas
    victim = desc["partitions"][0]["replicas"][0]
    other = desc["partitions"][0]["replicas"][1]
    victim_info = up["brokers"][victim]
    os.kill(victim_info["pid"], signal.SIGKILL)
    event = c.next_event(15)
    assert event["event"] == "broker_exited" and event["id"] == victim and event["returncode"] == -signal.SIGKILL, event

    def failed_over():
        p = partition(b, "obs", 0)
        return p["leader"] == other and p["isr"] == [other] and p["offline"] == [victim] and p
    wait_until(failed_over, 30, "obs-0 led by the surviving synchronous replica")

    def reported():
        s = status(b)
        t = next(t for t in s["topics"] if t["topic"] == "obs")
        return 0 in t["under_replicated"] and 0 in t["under_min_isr"] and len(s["brokers"]) == 2 and s
    st = wait_until(reported, 30, "status reporting obs-0 under-replicated and under min ISR")
    row = next(p for p in st["unhealthy_partitions"] if p["topic"] == "obs" and p["partition"] == 0)
    assert row["offline_replicas"] == [victim] and row["observers"] == [2] and "under-min-isr" in row["states"]
    human = ok(logbus("cluster", "status", "--bootstrap-server", b))
    assert "Live brokers: 2" in human and "under-replicated" in human

    # the other brokers keep running; the victim comes back with the command cluster up printed
    assert all(pid_alive(x["pid"]) for x in up["brokers"] if x["id"] != victim)
    argv = shlex.split(victim_info["command"])
    assert argv[0] == "logbus"
    with open(victim_info["log"], "ab") as log:
        restarted = subprocess.Popen([*LOGBUS, *argv[1:]], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: sorted(partition(b, "obs", 0)["isr"]) == sorted([victim, other]), 45,
                   "the restarted broker back in the ISR of obs-0")
        assert partition(b, "obs", 0)["leader"] == other  # still led by the replica that took over

        # preferred election moves leadership back to the first replica
        out = ok(logbus("leader-election", "--bootstrap-server", b, "--election-type", "preferred", "--all-topic-partitions"))
        assert "Successfully completed leader election (PREFERRED) for partitions obs-0" in out, out
        wait_until(lambda: partition(b, "obs", 0)["leader"] == victim, 15, "obs-0 led by its preferred replica")
        out = ok(logbus("leader-election", "--bootstrap-server", b, "--election-type", "PREFERRED", "--topic", "obs", "--partition", "0"))
        assert out.strip() == "Valid replica already elected for partitions obs-0"
        election = json.loads(ok(logbus("leader-election", "--bootstrap-server", b, "--election-type", "PREFERRED",
                                        "--topic", "obs", "--json")))
        assert election == {"election_type": "PREFERRED", "succeeded": [], "not_needed": ["obs-0", "obs-1"], "failed": []}

        # every acknowledged record is still there, read from the leaders
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": b, "group.id": "check", "enable.auto.commit": False})
        consumer.assign([TopicPartition("obs", 0, 0), TopicPartition("obs", 1, 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 200 and time.monotonic() < deadline:
            for m in consumer.consume(500, timeout=1):
                if m.error() is None:
                    got.append(m.value().decode())
        consumer.close()
        assert sorted(got) == sorted(f"record-{i}" for i in range(200))
    finally:
        restarted.send_signal(signal.SIGTERM)
        restarted.wait(timeout=30)

    # SIGTERM: cluster up stops every broker it runs and exits 0
    assert c.terminate(timeout=60) == 0
    events = []
    while not c.events.empty():
        events.append(c.events.get())
    stopped = next(e for e in events if e["event"] == "stopped")
    assert {x["id"] for x in stopped["brokers"] if x["stopped_by_us"]} == {x["id"] for x in up["brokers"]} - {victim}
    slow = [x["id"] for x in stopped["brokers"] if x["killed_after_timeout"]]
    if slow:  # the command did its part (SIGKILL after the bound); a broker that ignores SIGTERM is the broker's bug
        warnings.warn(f"brokers {slow} did not stop within --stop-timeout after SIGTERM; see their logs in {c.root}")
    assert not any(pid_alive(pid) for pid in c.pids())
    assert not list(c.root.glob("broker-*.pid")) and not (c.root / "cluster.json").exists()


def test_cluster_up_human_output_and_ctrl_c(tmp_path):
    """Without --json: a table, the bootstrap line, where the logs are; SIGINT (Ctrl-C) stops it with exit 0."""
    port = free_port_range(2)
    root = tmp_path / "c"
    proc = subprocess.Popen([*LOGBUS, "cluster", "up", "--brokers", "2", "--dir", str(root), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    try:
        seen = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not any(s.startswith("Press Ctrl-C") for s in seen):
            try:
                seen.append(lines.get(timeout=1))
            except queue.Empty:
                assert proc.poll() is None, proc.stderr.read()
        text = "".join(seen)
        assert f"Bootstrap servers: 127.0.0.1:{port},127.0.0.1:{port + 1}" in text, text
        assert str(root / "broker-0.log") in text and "Press Ctrl-C" in text
        pids = [int((root / f"broker-{i}.pid").read_text()) for i in range(2)]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        assert "Stopped the cluster." in proc.stderr.read()
        assert not any(pid_alive(pid) for pid in pids)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_bad_placement_and_unknown_partition_election(broker, tmp_path):
    b = broker.bootstrap
    overlapping = tmp_path / "overlap.json"
    overlapping.write_text(json.dumps({"version": 2, "replicas": [{"count": 1, "constraints": {"rack": "a"}}],
                                       "observers": [{"count": 1, "constraints": {"rack": "a"}}]}))
    bad = logbus("topics", "--bootstrap-server", b, "--create", "--topic", "p1", "--partitions", "1", "--replica-placement", str(overlapping))
    assert bad.returncode == 1, bad
    assert bad.stderr.startswith(TOPICS_ERROR + f"invalid replica placement in {overlapping}: ") and "overlap" in bad.stderr

    not_json = tmp_path / "bad.json"
    not_json.write_text("{version: 2")
    bad = logbus("topics", "--bootstrap-server", b, "--create", "--topic", "p1", "--replica-placement", str(not_json))
    assert bad.returncode == 1 and "not valid JSON" in bad.stderr, bad
    bad = logbus("topics", "--bootstrap-server", b, "--create", "--topic", "p1", "--replica-placement", str(tmp_path / "missing.json"))
    assert bad.returncode == 1 and "cannot read the replica placement file" in bad.stderr, bad

    # valid JSON, but no broker has the rack: the broker refuses with its own clear error
    unknown_rack = tmp_path / "rack.json"
    unknown_rack.write_text(json.dumps({"version": 1, "replicas": [{"count": 1, "constraints": {"rack": "nowhere"}}]}))
    bad = logbus("topics", "--bootstrap-server", b, "--create", "--topic", "p1", "--replica-placement", str(unknown_rack))
    assert bad.returncode == 1 and bad.stderr.startswith(TOPICS_ERROR) and "nowhere" in bad.stderr, bad
    assert "p1" not in ok(logbus("topics", "--bootstrap-server", b, "--list")).split()
    # --alter validates the file the same way before asking the broker
    ok(logbus("topics", "--bootstrap-server", b, "--create", "--topic", "plain", "--partitions", "1"))
    bad = logbus("topics", "--bootstrap-server", b, "--alter", "--topic", "plain", "--replica-placement", str(overlapping))
    assert bad.returncode == 1 and "overlap" in bad.stderr, bad
    # a topic without placement keeps Kafka's describe line (no Observers column)
    line = next(x for x in ok(logbus("topics", "--bootstrap-server", b, "--describe", "--topic", "plain")).splitlines() if "Partition: 0" in x)
    assert line.endswith("\tOffline: ") and "Observers" not in line

    # an election for a partition that does not exist fails with the broker's error, exit 1
    bad = logbus("leader-election", "--bootstrap-server", b, "--election-type", "PREFERRED", "--topic", "nope", "--partition", "0")
    assert bad.returncode == 1, bad
    assert "Error completing leader election (PREFERRED) for partition: nope-0: UNKNOWN_TOPIC_OR_PART" in bad.stdout
    assert bad.stderr.strip() == ELECTION_ERROR + "1 replica(s) could not be elected"
    election_file = tmp_path / "election.json"
    election_file.write_text(json.dumps({"version": 1, "partitions": [{"topic": "plain", "partition": 0}, {"topic": "plain", "partition": 5}]}))
    bad = logbus("leader-election", "--bootstrap-server", b, "--election-type", "unclean", "--path-to-json-file", str(election_file), "--json")
    assert bad.returncode == 1, bad
    result = json.loads(bad.stdout)
    assert result["election_type"] == "UNCLEAN" and result["not_needed"] == ["plain-0"]
    assert [f["partition"] for f in result["failed"]] == ["plain-5"] and result["failed"][0]["error"] == "UNKNOWN_TOPIC_OR_PART"

    duplicate = tmp_path / "dup.json"
    duplicate.write_text(json.dumps({"partitions": [{"topic": "plain", "partition": 0}, {"topic": "plain", "partition": 0}]}))
    bad = logbus("leader-election", "--bootstrap-server", b, "--election-type", "PREFERRED", "--path-to-json-file", str(duplicate))
    assert bad.returncode == 1 and "duplicate partitions: plain-0" in bad.stderr, bad
    bad = logbus("leader-election", "--bootstrap-server", b, "--election-type", "PREFERRED", "--topic", "nope")
    assert bad.returncode == 1 and "Topic 'nope' does not exist" in bad.stderr, bad

    # usage errors exit 2 like the other commands
    assert logbus("leader-election", "--bootstrap-server", b, "--all-topic-partitions").returncode == 2
    assert logbus("leader-election", "--bootstrap-server", b, "--election-type", "sideways", "--all-topic-partitions").returncode == 2
    both = logbus("leader-election", "--bootstrap-server", b, "--election-type", "PREFERRED", "--topic", "plain", "--all-topic-partitions")
    assert both.returncode == 2 and "exactly one of" in both.stderr


def test_cluster_up_refuses_busy_ports_and_bad_settings(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        busy = logbus("cluster", "up", "--brokers", "2", "--dir", str(tmp_path / "c1"), "--port", str(port), timeout=30)
    assert busy.returncode == 1 and f"port(s) {port}" in busy.stderr and "are in use" in busy.stderr, busy
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text("no_such_setting = 1\n")
    bad = logbus("cluster", "up", "--brokers", "1", "--dir", str(tmp_path / "c2"), "--port", str(free_port_range(1)),
                 "--config", str(bad_toml), timeout=30)
    assert bad.returncode == 1 and "no_such_setting" in bad.stderr, bad
    assert not list((tmp_path / "c2").glob("broker-*.pid"))
