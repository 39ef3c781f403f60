"""Topic helpers shared by CreateTopics, Metadata auto-creation and the group coordinator."""

from __future__ import annotations


def create_topic(broker, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str]):
    """Create through the control plane and take the new metadata in at once."""
    topic = broker.control.create_topic(name, num_partitions, replication_factor, configs)
    broker.refresh_metadata()
    return topic
