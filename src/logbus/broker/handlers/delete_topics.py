"""DeleteTopics (20): by name, or by topic id from v6."""

import uuid

from logbus.broker.topics import INTERNAL_TOPICS
from logbus.protocol.errors import ErrorCode, KafkaProtocolError

API_KEY, MIN_VERSION, MAX_VERSION = 20, 1, 6

_ZERO = uuid.UUID(int=0)


async def handle(ctx, request) -> dict:
    broker = ctx.broker
    names = getattr(request, "topic_names", None)  # v1-v5 name topics; v6 names or ids them
    wanted = [(n, None) for n in names] if names is not None else [(t.name, t.topic_id) for t in request.topics]
    results = []
    for name, topic_id in wanted:
        if name is None and topic_id not in (None, _ZERO):
            topic = broker.image.topic_by_id(str(topic_id))
            if topic is None:
                results.append({"name": None, "topic_id": topic_id, "error_code": ErrorCode.unknown_topic_id, "error_message": f"Topic id {topic_id} not found"})
                continue
            name = topic.name
        if name in INTERNAL_TOPICS:
            results.append({"name": name, "topic_id": _ZERO, "error_code": ErrorCode.invalid_topic_exception, "error_message": f"Topic {name} is internal and can't be deleted"})
            continue
        try:
            topic = broker.control.delete_topic(name)
        except KafkaProtocolError as e:
            results.append({"name": name, "topic_id": _ZERO, "error_code": e.code, "error_message": e.message})
            continue
        results.append({"name": topic.name, "topic_id": uuid.UUID(topic.topic_id), "error_code": ErrorCode.none, "error_message": None})
    broker.refresh_metadata()
    return {"throttle_time": 0, "responses": results}
