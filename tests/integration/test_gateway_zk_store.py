"""What only the ZooKeeper gateway store has: its URL, its node layout, the index's buckets and their size bound, and a bounded, clear
failure when the ensemble cannot be reached. The shared behaviour is in test_gateway_store_contract.py."""

from __future__ import annotations

import os
import random
import socket
import time
import uuid
import zlib

import pytest
from kazoo.client import KazooClient
from zkserver import ZooKeeperServer, zookeeper  # noqa: F401 - the fixture

from logbus.cluster.zk_store import MetadataStoreUnavailableError
from logbus.gateway.store import open_store
from logbus.gateway.zk_store import INDEX_BUCKETS, INDEX_MAX_BYTES, IndexTooLargeError, ZooKeeperGatewayStore

TOPIC = "dc1.acme.logs.web"


@pytest.fixture
def chroot() -> str:
    return f"/gw-zk-{uuid.uuid4().hex[:8]}"


def test_open_store_urls(zookeeper, chroot):  # noqa: F811
    s = open_store(f"zk://{zookeeper}{chroot}")
    try:
        assert isinstance(s, ZooKeeperGatewayStore) and s.root == f"{chroot}/gateway"
    finally:
        s.close()
    s = open_store(f"zk://{zookeeper}")
    try:
        assert s.root == "/logbus/gateway"  # the cluster store's default chroot; the gateway's nodes sit apart
    finally:
        s.close()
    with pytest.raises(ValueError, match="names no ZooKeeper server"):
        open_store("zk:///logbus")
    with pytest.raises(ValueError, match="zk://host:port/chroot"):
        open_store("etcd://127.0.0.1:2379")


def test_every_name_is_one_znode(zookeeper, chroot):  # noqa: F811
    s = ZooKeeperGatewayStore(zookeeper, chroot)
    raw = KazooClient(hosts=zookeeper)
    raw.start(timeout=10)
    try:
        s.take_ownership(TOPIC, "host-1/var/log/app.log", "gw-a", "inc-a")
        s.create_pin(TOPIC, "журнал 1", 0)
        s.create_pin(TOPIC, "..", 1)
        s.save_index(TOPIC, 2, 10, {"host-1/var/log/app.log": (1, 2)})
        root = f"{chroot}/gateway"
        assert raw.get_children(f"{root}/owners") == [TOPIC]
        assert raw.get_children(f"{root}/owners/{TOPIC}") == ["host-1%2Fvar%2Flog%2Fapp.log"]
        assert sorted(raw.get_children(f"{root}/pins/{TOPIC}")) == ["%2E%2E", "%D0%B6%D1%83%D1%80%D0%BD%D0%B0%D0%BB%201"]
        assert raw.get_children(f"{root}/index/{TOPIC}") == ["2"]
        bucket = zlib.crc32(b"host-1/var/log/app.log") % INDEX_BUCKETS
        assert raw.get_children(f"{root}/index/{TOPIC}/2") == [str(bucket)]
        assert s.pin_counts(TOPIC) == {0: 1, 1: 1}
    finally:
        raw.stop()
        raw.close()
        s.close()


def test_a_partition_index_holds_more_sources_than_one_znode_could(zookeeper, chroot):  # noqa: F811
    s = ZooKeeperGatewayStore(zookeeper, chroot)
    try:
        # random 32-hex-digit source ids compress to over 20 bytes each: 100,000 of them are 2 MB, twice a znode
        sources = {os.urandom(16).hex(): (i + 1, i) for i in range(100_000)}
        s.save_index(TOPIC, 0, 100_000, sources)
        assert s.index_position(TOPIC, 0) == 100_000
        for source in random.Random(1).sample(sorted(sources), 200):
            assert s.index_lookup(TOPIC, 0, source) == (100_000, sources[source])
    finally:
        s.close()


def test_an_index_bucket_over_the_znode_limit_is_refused_clearly(zookeeper, chroot):  # noqa: F811
    s = ZooKeeperGatewayStore(zookeeper, chroot)
    try:
        s.save_index(TOPIC, 0, 10, {"a": (1, 5)})
        # 50,000 random source ids that all hash to one bucket do not fit in its znode
        one_bucket: dict[str, tuple[int, int]] = {}
        while len(one_bucket) < INDEX_MAX_BYTES // 20:
            source = os.urandom(16).hex()
            if zlib.crc32(source.encode()) % INDEX_BUCKETS == 0:
                one_bucket[source] = (1, len(one_bucket))
        with pytest.raises(IndexTooLargeError, match=r"dc1\.acme\.logs\.web\[0\]"):
            s.save_index(TOPIC, 0, 20, one_bucket)
        assert s.index_lookup(TOPIC, 0, "a") == (10, (1, 5))  # the position did not move
    finally:
        s.close()


def test_unreachable_ensemble_fails_within_bound():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here once the socket is closed
    t0 = time.monotonic()
    with pytest.raises(MetadataStoreUnavailableError, match=f"127.0.0.1:{port}"):
        ZooKeeperGatewayStore(f"127.0.0.1:{port}", "/x", connect_timeout=2)
    assert time.monotonic() - t0 < 6


def test_calls_fail_clearly_when_the_ensemble_stays_down(tmp_path):
    """A gateway's heartbeat must fail, not hang, so its lease lapses and it refuses writes."""
    server = ZooKeeperServer(tmp_path / "zk").start()
    s = ZooKeeperGatewayStore(server.hosts, "/down", session_timeout_ms=2000)
    try:
        assert s.take_ownership(TOPIC, "x", "gw-a", "inc-a") == (1, None)
        server.stop()
        t0 = time.monotonic()
        with pytest.raises(MetadataStoreUnavailableError, match="unreachable"):
            s.take_ownership(TOPIC, "x", "gw-a", "inc-a")
        assert time.monotonic() - t0 < s.retry_deadline + 5
    finally:
        s.close()
        server.stop()
