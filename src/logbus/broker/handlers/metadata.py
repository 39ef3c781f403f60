"""Metadata (3): brokers, topics, partitions with leader, replicas, ISR and offline replicas."""

import uuid

from logbus.broker.handlers.topic_admin import create_topic
from logbus.broker.topics import validate_topic_name
from logbus.protocol.errors import ErrorCode, KafkaProtocolError

API_KEY, MIN_VERSION, MAX_VERSION = 3, 0, 12

_ZERO_UUID = uuid.UUID(int=0)


def topic_metadata(topic) -> dict:
    return {
        "error_code": ErrorCode.none,
        "name": topic.name,
        "topic_id": uuid.UUID(topic.topic_id),
        "is_internal": topic.name.startswith("__"),
        "partitions": [
            {
                "error_code": ErrorCode.none,
                "partition_index": p.partition,
                "leader_id": p.leader,
                "leader_epoch": p.leader_epoch,
                "replica_nodes": p.replicas,
                "isr_nodes": p.isr,
                "offline_replicas": [],
            }
            for p in topic.partitions
        ],
        "topic_authorized_operations": -2147483648,
    }


async def handle(ctx, request) -> dict:
    broker = ctx.broker
    registry = broker.topics
    if request.topics is None or (ctx.api_version == 0 and not request.topics):
        topics = [topic_metadata(t) for t in registry.topics.values()]
    else:
        allow_auto = getattr(request, "allow_auto_topic_creation", True) and broker.config.auto_create_topics
        topics = [_one_topic(broker, t, allow_auto) for t in request.topics]
    host, port = broker.config.advertised_host_port
    return {
        "throttle_time": 0,
        "brokers": [{"node_id": broker.config.broker_id, "host": host, "port": port, "rack": broker.config.rack}],
        "cluster_id": broker.cluster_id,
        "controller_id": broker.config.broker_id,
        "topics": topics,
        "cluster_authorized_operations": -2147483648,
    }


def _one_topic(broker, requested, allow_auto: bool) -> dict:
    name = requested.name
    topic_id = getattr(requested, "topic_id", None)
    if name is None and topic_id not in (None, _ZERO_UUID):
        topic = broker.topics.by_id(str(topic_id))
        if topic is None:
            return {"error_code": ErrorCode.unknown_topic_id, "name": None, "topic_id": topic_id, "partitions": []}
        return topic_metadata(topic)
    topic = broker.topics.get(name)
    if topic is None:
        try:
            validate_topic_name(name)
            if not allow_auto:
                return {"error_code": ErrorCode.unknown_topic_or_partition, "name": name, "partitions": []}
            topic = create_topic(broker, name, -1, -1, {})
        except KafkaProtocolError as e:
            return {"error_code": e.code, "name": name, "partitions": []}
    return topic_metadata(topic)
