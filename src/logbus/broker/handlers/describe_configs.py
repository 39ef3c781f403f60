"""DescribeConfigs (32): topic configs (override or default, with source, type and documentation) and broker settings."""

from dataclasses import asdict

from logbus.broker.config import BROKER_SETTINGS_DOC
from logbus.broker.topics import PLACEMENT_CONFIG
from logbus.protocol.errors import ErrorCode
from logbus.storage.config import CONFIG_KEYS, LogConfig

API_KEY, MIN_VERSION, MAX_VERSION = 32, 1, 4

TOPIC, BROKER = 2, 4
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
CONFIG_TYPES = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7}


def topic_config_entries(broker, overrides: dict[str, str]) -> list[dict]:
    values = broker.control.log_config(overrides).to_kafka_dict()
    kafka_defaults = LogConfig().to_kafka_dict()
    entries = []
    for name, definition in CONFIG_KEYS.items():
        if name in overrides:
            source = DYNAMIC_TOPIC_CONFIG
        elif values[name] != kafka_defaults[name]:
            source = STATIC_BROKER_CONFIG
        else:
            source = DEFAULT_CONFIG
        entries.append(
            {
                "name": name,
                "value": values[name],
                "read_only": False,
                "config_source": source,
                "is_default": source == DEFAULT_CONFIG,
                "is_sensitive": False,
                "synonyms": [],
                "config_type": CONFIG_TYPES["list" if name == "cleanup.policy" else definition.type],
                "documentation": definition.doc,
            }
        )
    placement = overrides.get(PLACEMENT_CONFIG) or broker.config.log_placement_constraints
    if placement:
        entries.append(
            {
                "name": PLACEMENT_CONFIG,
                "value": placement,
                "read_only": False,
                "config_source": DYNAMIC_TOPIC_CONFIG if PLACEMENT_CONFIG in overrides else STATIC_BROKER_CONFIG,
                "is_default": False,
                "is_sensitive": False,
                "synonyms": [],
                "config_type": CONFIG_TYPES["string"],
                "documentation": "Replica placement constraints (JSON): sync replicas and observers by rack.",
            }
        )
    return entries


def _broker_entries(broker) -> list[dict]:
    settings = asdict(broker.config)
    settings.pop("topic_defaults")
    return [
        {
            "name": name,
            "value": None if value is None else str(value).lower() if isinstance(value, bool) else str(value),
            "read_only": True,
            "config_source": STATIC_BROKER_CONFIG,
            "is_default": False,
            "is_sensitive": False,
            "synonyms": [],
            "config_type": CONFIG_TYPES["boolean" if isinstance(value, bool) else "int" if isinstance(value, int) else "string"],
            "documentation": BROKER_SETTINGS_DOC.get(name),
        }
        for name, value in settings.items()
    ]


async def handle(ctx, request) -> dict:
    broker = ctx.broker
    results = []
    for r in request.resources:
        base = {"resource_type": r.resource_type, "resource_name": r.resource_name}
        if r.resource_type == TOPIC:
            topic = broker.image.topic(r.resource_name)
            if topic is None:
                results.append({**base, "error_code": ErrorCode.unknown_topic_or_partition, "error_message": f"Topic '{r.resource_name}' does not exist.", "configs": []})
                continue
            entries = topic_config_entries(broker, topic.configs)
        elif r.resource_type == BROKER:
            if r.resource_name not in ("", str(broker.config.broker_id)):
                results.append({**base, "error_code": ErrorCode.invalid_request, "error_message": f"Unexpected broker id, expected {broker.config.broker_id} or empty string, but received {r.resource_name}", "configs": []})
                continue
            entries = _broker_entries(broker)
        else:
            results.append({**base, "error_code": ErrorCode.invalid_request, "error_message": f"Unsupported resource type {r.resource_type}", "configs": []})
            continue
        if r.configuration_keys is not None:
            keys = set(r.configuration_keys)
            entries = [e for e in entries if e["name"] in keys]
        if not getattr(request, "include_documentation", False):
            for e in entries:
                e["documentation"] = None
        results.append({**base, "error_code": ErrorCode.none, "error_message": None, "configs": entries})
    return {"throttle_time": 0, "results": results}
