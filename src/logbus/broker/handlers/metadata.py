"""Metadata (3): brokers, topics, partitions with leader, replicas, ISR and offline replicas."""

import uuid

from logbus.broker.handlers.topic_admin import create_topic
from logbus.broker.topics import validate_topic_name
from logbus.protocol.errors import ErrorCode, KafkaProtocolError

API_KEY, MIN_VERSION, MAX_VERSION = 3, 0, 12

_ZERO_UUID = uuid.UUID(int=0)


def topic_metadata(topic, live) -> dict:
    return {
        "error_code": ErrorCode.none,
        "name": topic.name,
        "topic_id": uuid.UUID(topic.topic_id),
        "is_internal": topic.name.startswith("__"),
        "partitions": [
            {
                "error_code": ErrorCode.none if p.leader in live else ErrorCode.leader_not_available,
                "partition_index": p.partition,
                "leader_id": p.leader if p.leader in live else -1,
                "leader_epoch": p.leader_epoch,
                "replica_nodes": p.replicas,
                "isr_nodes": p.isr,
                "offline_replicas": [r for r in p.replicas if r not in live],
            }
            for p in topic.partitions
        ],
        "topic_authorized_operations": -2147483648,
    }


async def handle(ctx, request) -> dict:
    broker = ctx.broker
    if request.topics is None or (ctx.api_version == 0 and not request.topics):
        image = broker.image
        topics = [topic_metadata(t, image.brokers) for t in image.topics.values()]
    else:
        allow_auto = getattr(request, "allow_auto_topic_creation", True) and broker.config.auto_create_topics
        topics = [_one_topic(broker, t, allow_auto) for t in request.topics]
    image = broker.image
    return {
        "throttle_time": 0,
        "brokers": [{"node_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack} for b in image.brokers.values()],
        "cluster_id": image.cluster_id,
        # KRaft-style: any live broker serves admin requests, so clients send them here rather than
        # wait on a controller that may have just died (DescribeCluster names the lease holder)
        "controller_id": broker.config.broker_id,
        "topics": topics,
        "cluster_authorized_operations": -2147483648,
    }


def _one_topic(broker, requested, allow_auto: bool) -> dict:
    name = requested.name
    topic_id = getattr(requested, "topic_id", None)
    if name is None and topic_id not in (None, _ZERO_UUID):
        topic = broker.image.topic_by_id(str(topic_id))
        if topic is None:
            return {"error_code": ErrorCode.unknown_topic_id, "name": None, "topic_id": topic_id, "partitions": []}
        return topic_metadata(topic, broker.image.brokers)
    topic = broker.image.topic(name)
    if topic is None:
        try:
            validate_topic_name(name)
            if not allow_auto:
                return {"error_code": ErrorCode.unknown_topic_or_partition, "name": name, "partitions": []}
            topic = create_topic(broker, name, -1, -1, {})
        except KafkaProtocolError as e:
            return {"error_code": e.code, "name": name, "partitions": []}
    return topic_metadata(topic, broker.image.brokers)
