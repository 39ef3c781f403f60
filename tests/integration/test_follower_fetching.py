"""Follower fetching (KIP-392): consumers with client.rack read from an in-sync replica in their rack."""

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from kafkawire import WireConnection
from logbus.protocol.errors import ErrorCode


def fetch(conn: WireConnection, version: int, rack: str, epoch: int = -1):
    resp = conn.request(1, version, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": "ff", "partitions": [{"partition": 0, "current_leader_epoch": epoch, "fetch_offset": 0, "last_fetched_epoch": -1,
                                                  "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": rack,
    })
    return resp.responses[0].partitions[0]


def test_consumer_in_another_rack_reads_from_its_replica(cluster_factory):
    cluster = cluster_factory(brokers=3, racks=["r0", "r1", "r2"])
    admin = cluster.admin()
    admin.create_topics([NewTopic("ff", 1, 3)])["ff"].result(10)
    cluster.wait_until(lambda: len(cluster.partition("ff", 0)[2]) == 3, what="a full ISR")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(500):
        producer.produce("ff", b"%d" % i, partition=0)
    assert producer.flush(15) == 0
    leader = cluster.partition("ff", 0)[0]
    follower = (leader + 1) % 3
    rack = f"r{follower}"

    to_leader = WireConnection(cluster.brokers[leader].bootstrap)
    redirected = fetch(to_leader, 11, rack)
    assert redirected.error_code == ErrorCode.none and redirected.preferred_read_replica == follower and not redirected.records
    same_rack = fetch(to_leader, 11, f"r{leader}")
    assert same_rack.preferred_read_replica == -1 and same_rack.records
    to_leader.close()

    to_follower = WireConnection(cluster.brokers[follower].bootstrap)
    served = cluster.wait_until(lambda: (r := fetch(to_follower, 11, rack)).high_watermark == 500 and r, what="the follower's high watermark")
    assert served.error_code == ErrorCode.none and served.records
    assert fetch(to_follower, 10, rack).error_code == ErrorCode.not_leader_or_follower, "before v11 only the leader serves consumers"
    to_follower.close()

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "ff", "client.rack": rack, "enable.auto.commit": False})
    consumer.assign([TopicPartition("ff", 0, OFFSET_BEGINNING)])
    values = []
    deadline = time.monotonic() + 30
    while len(values) < 500 and time.monotonic() < deadline:
        values += [m.value() for m in consumer.consume(500, 0.5) if not m.error()]
    consumer.close()
    assert values == [b"%d" % i for i in range(500)]
