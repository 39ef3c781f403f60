"""The core APIs as clients see them: long poll, byte limits, acks, configs, cluster, restarts."""

import threading
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewPartitions
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KPConfigResource
from kafka.admin import ConfigResourceType

from kafkawire import WireConnection, make_batch
from logbus.protocol.errors import ErrorCode


def test_fetch_long_poll_wakes_on_append(broker):
    conn = WireConnection(broker.bootstrap, timeout=40)
    conn.create_topic("lp", 1)
    empty = conn.fetch("lp", 0, 0, max_wait_ms=200)
    assert empty.error_code == ErrorCode.none and not empty.records and empty.high_watermark == 0

    result = {}
    waiter = threading.Thread(target=lambda: result.update(r=conn.fetch("lp", 0, 0, max_wait_ms=30000, min_bytes=1)))
    waiter.start()
    time.sleep(0.5)
    producer = WireConnection(broker.bootstrap)
    assert producer.produce("lp", 0, make_batch([b"wake"])).error_code == ErrorCode.none
    waiter.join(timeout=15)
    assert not waiter.is_alive(), "the fetch did not wake up when data arrived"
    assert result["r"].records and result["r"].high_watermark == 1
    producer.close()
    conn.close()


def test_fetch_min_bytes_waits_then_returns_what_there_is(broker):
    conn = WireConnection(broker.bootstrap)
    conn.create_topic("mb", 1)
    conn.produce("mb", 0, make_batch([b"small"]))
    r = conn.fetch("mb", 0, 0, max_wait_ms=300, min_bytes=1_000_000)
    assert r.error_code == ErrorCode.none and r.records and r.high_watermark == 1
    conn.close()


def test_fetch_byte_limits_and_oversized_first_batch(broker):
    conn = WireConnection(broker.bootstrap)
    conn.create_topic("lim", 2)
    batch = make_batch([b"x" * 1000])
    for p in (0, 1):
        for _ in range(10):
            assert conn.produce("lim", p, batch).error_code == ErrorCode.none
    size = len(batch)

    def fetch_two(max_bytes, partition_max):
        resp = conn.request(1, 12, {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": max_bytes, "isolation_level": 0,
                                    "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
                                    "topics": [{"topic": "lim", "partitions": [{"partition": p, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                                                                               "log_start_offset": -1, "partition_max_bytes": partition_max} for p in (0, 1)]}]})
        return [len(p.records or b"") for p in resp.responses[0].partitions]

    assert fetch_two(1 << 20, int(size * 2.5)) == [2 * size, 2 * size]  # per-partition limit, whole batches only
    assert fetch_two(int(size * 1.5), 1 << 20) == [size, 0]  # request limit spent by the first partition
    assert fetch_two(10, 10) == [size, 0]  # KIP-74: the first batch comes whole even over the limits
    conn.close()


def test_acks_zero_gets_no_response_and_is_stored(broker):
    conn = WireConnection(broker.bootstrap)
    conn.create_topic("fire", 1)
    conn.correlation_id += 1
    from logbus.protocol.codec import encode_request

    conn.send_raw(encode_request(0, 9, conn.correlation_id, {"acks": 0, "timeout": 1000, "topic_data": [{"name": "fire", "partition_data": [{"index": 0, "records": make_batch([b"a", b"b"])}]}]}))
    meta = conn.request(3, 12, {"topics": [{"name": "fire"}]})  # asserts the next frame answers this request
    assert meta.topics[0].error_code == ErrorCode.none
    assert conn.fetch("fire", 0, 0).high_watermark == 2
    conn.close()


def test_min_insync_replicas_refuses_acks_all(broker):
    conn = WireConnection(broker.bootstrap)
    conn.create_topic("misr", 1, {"min.insync.replicas": "2"})
    refused = conn.produce("misr", 0, make_batch([b"a"]), acks=-1)
    assert refused.error_code == ErrorCode.not_enough_replicas
    assert conn.produce("misr", 0, make_batch([b"a"]), acks=1).error_code == ErrorCode.none
    conn.close()


def test_list_offsets_max_timestamp_and_metadata_by_topic_id(broker):
    conn = WireConnection(broker.bootstrap)
    created = conn.create_topic("ts", 1)
    for ts in (5000, 9000, 7000):
        conn.produce("ts", 0, make_batch([b"v"], timestamp_ms=ts))
    resp = conn.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [{"name": "ts", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -3}]}]})
    p = resp.topics[0].partitions[0]
    assert (p.offset, p.timestamp) == (1, 9000)
    meta = conn.request(3, 12, {"topics": [{"topic_id": created.topic_id, "name": None}]})
    assert meta.topics[0].name == "ts" and meta.topics[0].topic_id == created.topic_id
    conn.close()


def test_auto_topic_creation_when_enabled(broker_factory):
    b = broker_factory("auto_create_topics = true\nnum_partitions = 3\n")
    conn = WireConnection(b.bootstrap)
    meta = conn.request(3, 12, {"topics": [{"name": "born"}], "allow_auto_topic_creation": True})
    assert meta.topics[0].error_code == ErrorCode.none and len(meta.topics[0].partitions) == 3
    not_asked = conn.request(3, 12, {"topics": [{"name": "unborn"}], "allow_auto_topic_creation": False})
    assert not_asked.topics[0].error_code == ErrorCode.unknown_topic_or_partition
    conn.close()


def test_configs_and_cluster_through_admin_clients(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    from confluent_kafka.admin import NewTopic

    admin.create_topics([NewTopic("cfg", 2, 1, config={"retention.ms": "3600000"})])["cfg"].result(10)
    res = ConfigResource(ConfigResource.Type.TOPIC, "cfg")
    entries = admin.describe_configs([res])[res].result(10)
    assert entries["retention.ms"].value == "3600000" and entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["segment.bytes"].value == "1073741824" and entries["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value

    change = ConfigResource(ConfigResource.Type.TOPIC, "cfg", incremental_configs=[
        ConfigEntry("retention.bytes", "1000000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    admin.incremental_alter_configs([change])[change].result(10)
    entries = admin.describe_configs([res])[res].result(10)
    assert entries["retention.bytes"].value == "1000000"
    assert entries["retention.ms"].value == "604800000" and entries["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value

    bad = ConfigResource(ConfigResource.Type.TOPIC, "cfg", incremental_configs=[ConfigEntry("segment.bytes", "1", incremental_operation=AlterConfigOpType.SET)])
    try:
        admin.incremental_alter_configs([bad])[bad].result(10)
        raise AssertionError("segment.bytes=1 was accepted")
    except Exception as e:  # KafkaException(INVALID_CONFIG)
        assert "segment.bytes" in str(e)

    admin.create_partitions([NewPartitions("cfg", 4)])["cfg"].result(10)
    assert len(admin.list_topics(timeout=10).topics["cfg"].partitions) == 4

    cluster = admin.describe_cluster().result(10)
    assert cluster.controller.id == 0 and [n.id for n in cluster.nodes] == [0] and cluster.cluster_id

    broker_res = ConfigResource(ConfigResource.Type.BROKER, "0")
    broker_entries = admin.describe_configs([broker_res])[broker_res].result(10)
    assert broker_entries["listen"].value == broker.bootstrap and broker_entries["listen"].is_read_only

    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    kp.alter_configs([KPConfigResource(ConfigResourceType.TOPIC, "cfg", configs={"max.message.bytes": "2048"})], incremental=False)
    entries = admin.describe_configs([res])[res].result(10)
    assert entries["max.message.bytes"].value == "2048"

    # kafka-python merges current overrides into its AlterConfigs; on the wire the request replaces them all
    conn = WireConnection(broker.bootstrap)
    r = conn.request(33, 2, {"resources": [{"resource_type": 2, "resource_name": "cfg", "configs": [{"name": "cleanup.policy", "value": "delete"}]}], "validate_only": False})
    assert r.responses[0].error_code == ErrorCode.none
    entries = admin.describe_configs([res])[res].result(10)
    assert entries["retention.bytes"].value == "-1" and entries["max.message.bytes"].value == "1048588"
    assert entries["cleanup.policy"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    conn.close()
    kp.close()


def test_clean_restart_keeps_topics_configs_and_data(broker_factory, tmp_path):
    b = broker_factory()
    conn = WireConnection(b.bootstrap)
    created = conn.create_topic("keep", 2, {"retention.ms": "123456"})
    for i in range(5):
        conn.produce("keep", i % 2, make_batch([b"r%d" % i]))
    conn.close()
    assert b.stop() == 0
    assert (Path(b.data_dir) / ".logbus_cleanshutdown").exists()
    assert "stopped cleanly" in b.log()
    b.start()
    conn = WireConnection(b.bootstrap)
    meta = conn.request(3, 12, {"topics": [{"name": "keep"}]})
    assert meta.topics[0].topic_id == created.topic_id and len(meta.topics[0].partitions) == 2
    assert conn.fetch("keep", 0, 0).high_watermark == 3 and conn.fetch("keep", 1, 0).high_watermark == 2
    assert conn.produce("keep", 0, make_batch([b"after"])).base_offset == 3
    cfg = conn.request(32, 4, {"resources": [{"resource_type": 2, "resource_name": "keep", "configuration_keys": ["retention.ms"]}], "include_synonyms": False, "include_documentation": True})
    entry = cfg.results[0].configs[0]
    assert entry.value == "123456" and entry.documentation
    conn.close()
