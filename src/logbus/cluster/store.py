"""The metadata store: the one place a cluster's brokers agree on brokers, topics and partitions.

Two backends implement it: `local` (a SQLite file shared by the broker processes of one host;
the embedded default) and `zookeeper` (kazoo). Partition state changes are compare-and-set on
the partition epoch, so two writers (a leader shrinking its ISR, the controller electing a new
leader) can never both win. Everything a restart needs is here or on disk.

Methods are synchronous and quick (milliseconds); brokers call them from their event loop.
"""

from __future__ import annotations

import abc

from logbus.broker.topics import BrokerInfo, PartitionState, TopicState

BrokerRegistration = BrokerInfo  # what a broker announces: id, advertised host and port, rack


class TopicExistsError(Exception):
    pass


class UnknownTopicError(Exception):
    pass


class MetadataStore(abc.ABC):
    """What brokers and the controller need from the metadata store."""

    # --- identity ------------------------------------------------------------------------
    @abc.abstractmethod
    def cluster_id(self) -> str:
        """The cluster's id, created by the first caller and the same for everyone after."""

    # --- brokers and liveness --------------------------------------------------------------
    @abc.abstractmethod
    def register_broker(self, registration: BrokerRegistration) -> None:
        """Announce a live broker. It stays live while `heartbeat` is called within the session
        timeout (local) or while its ZooKeeper session lives. Re-registering replaces the entry."""

    @abc.abstractmethod
    def heartbeat(self, broker_id: int) -> None:
        """Keep a registration (and a held controller lease) alive."""

    @abc.abstractmethod
    def unregister_broker(self, broker_id: int) -> None:
        """Clean shutdown: the broker is no longer live, immediately."""

    @abc.abstractmethod
    def live_brokers(self) -> dict[int, BrokerRegistration]:
        """Brokers whose registration is alive now."""

    # --- controller lease -----------------------------------------------------------------
    @abc.abstractmethod
    def try_acquire_controller(self, broker_id: int) -> bool:
        """Take the controller lease if nobody live holds it, or keep it if we do. True if held."""

    @abc.abstractmethod
    def controller_id(self) -> int | None:
        """The live holder of the controller lease, if any."""

    @abc.abstractmethod
    def resign_controller(self, broker_id: int) -> None:
        """Give the lease up (only if held by broker_id)."""

    # --- topics and partitions -----------------------------------------------------------
    @abc.abstractmethod
    def topics(self) -> dict[str, TopicState]:
        """A consistent snapshot of every topic with its partitions and configs."""

    @abc.abstractmethod
    def create_topic(self, topic: TopicState) -> None:
        """Create atomically; TopicExistsError if the name is taken."""

    @abc.abstractmethod
    def delete_topic(self, name: str) -> None:
        """UnknownTopicError if absent."""

    @abc.abstractmethod
    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """Replace the topic's config overrides. UnknownTopicError if absent."""

    @abc.abstractmethod
    def add_partitions(self, name: str, partitions: list[PartitionState]) -> None:
        """Append new partitions (their indexes follow the existing ones)."""

    @abc.abstractmethod
    def update_partition(self, topic: str, state: PartitionState, expected_partition_epoch: int) -> bool:
        """Compare-and-set: store `state` with partition_epoch = expected + 1 if the stored epoch is
        `expected_partition_epoch`; False (nothing written) otherwise. On success `state.partition_epoch`
        is updated in place."""

    # --- change detection and ids ----------------------------------------------------------
    @abc.abstractmethod
    def version(self) -> int:
        """A number that grows whenever brokers, the controller, topics or partitions change;
        brokers poll it cheaply and reload `topics()` / `live_brokers()` when it moves."""

    @abc.abstractmethod
    def allocate_producer_ids(self, count: int) -> int:
        """Reserve `count` producer ids unique in the cluster forever; returns the first."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections; a registered broker's liveness ends (ZooKeeper) or lapses (local)."""


def open_store(url: str, *, session_timeout_ms: int = 6000) -> MetadataStore:
    """`local:///path/to/metadata.db` or `zk://host:port[,host:port]/chroot`."""
    if url.startswith("local://"):
        from logbus.cluster.local_store import LocalMetadataStore

        return LocalMetadataStore(url[len("local://"):], session_timeout_ms=session_timeout_ms)
    if url.startswith("zk://"):
        from logbus.cluster.zk_store import ZooKeeperMetadataStore

        hosts, _, chroot = url[len("zk://"):].partition("/")
        return ZooKeeperMetadataStore(hosts, "/" + chroot if chroot else "/logbus", session_timeout_ms=session_timeout_ms)
    raise ValueError(f"metadata store must be local:///path or zk://host:port/chroot, not {url!r}")
