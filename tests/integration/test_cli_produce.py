"""`logbus produce` with and without --failover, as a user pipes lines into it."""

import json
import subprocess
import sys

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def run(bootstrap, *args, stdin: bytes):
    return subprocess.run([sys.executable, "-m", "logbus.cli", "produce", "--bootstrap-server", bootstrap, *args],
                          input=stdin, capture_output=True, timeout=90)


def read(bootstrap, topic, partitions, n):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "cli-check", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out = []
    for _ in range(40):
        out += [m for m in c.consume(1000, timeout=0.5) if m.error() is None]
        if len(out) >= n:
            break
    c.close()
    return out


def create(bootstrap, name, partitions, configs=None):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, partitions, 1, config=configs or {})]).values():
        f.result(timeout=20)


def test_plain_and_failover_produce_lines(broker):
    create(broker.bootstrap, "lines", 3)
    lines = b"".join(b"line %d\n" % i for i in range(300))
    r = run(broker.bootstrap, "--topic", "lines", stdin=lines)
    assert r.returncode == 0, r.stderr
    assert b"300 of 300 records acknowledged" in r.stderr
    r = run(broker.bootstrap, "--topic", "lines", "--failover", "--source-id", "cli", "--key-separator", ":",
            "--header", "lb.host=h1", "--json", stdin=b"".join(b"k%d:v%d\n" % (i % 5, i) for i in range(200)))
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["read"] == 200 and summary["acknowledged"] == 200 and summary["failed"] == 0
    msgs = read(broker.bootstrap, "lines", 3, 500)
    plain = sorted(m.value() for m in msgs if m.key() is None)
    assert plain == sorted(b"line %d" % i for i in range(300))
    fo = [m for m in msgs if m.key() is not None]
    assert sorted(int(dict(m.headers())["lb.seqno"]) for m in fo) == list(range(200))
    assert all(dict(m.headers())["lb.source"] == b"cli" and dict(m.headers())["lb.host"] == b"h1" for m in fo)
    assert all(m.value() == b"v%s" % dict(m.headers())["lb.seqno"] for m in fo)


def test_produce_errors_are_clear(broker):
    r = run(broker.bootstrap, "--topic", "missing", "--failover", stdin=b"a\n")
    assert r.returncode == 1 and b"topic 'missing' does not exist" in r.stderr
    r = run(broker.bootstrap, "--topic", "missing", stdin=b"a\n")
    assert r.returncode == 1 and b"does not exist" in r.stderr
    create(broker.bootstrap, "tiny", 1, {"max.message.bytes": "1000"})
    r = run(broker.bootstrap, "--topic", "tiny", "--failover", stdin=b"ok\n" + b"x" * 3000 + b"\nafter\n")
    assert r.returncode == 1 and b"max.message.bytes=1000" in r.stderr
    assert b"1 of 1 records acknowledged" in r.stderr   # the line before was delivered; the rest not read
    r = run("127.0.0.1:1", "--topic", "t", "--failover", "--timeout", "2", stdin=b"a\n")
    assert r.returncode == 1 and b"cannot reach the cluster" in r.stderr
    # nothing online (RF 1 < min.insync.replicas 2): the line is reported as not delivered
    create(broker.bootstrap, "held", 1, {"min.insync.replicas": "2"})
    r = run(broker.bootstrap, "--topic", "held", "--failover", "--timeout", "2", stdin=b"a\nb\n")
    assert r.returncode == 1 and b"0 of 2 records acknowledged, 2 failed" in r.stderr and b"not delivered" in r.stderr
