"""The control plane as brokers use it: every change of cluster metadata goes through here.

Topic creation places replicas (rack-aware, or by Confluent-style placement constraints with
observers), partition changes are compare-and-set on the partition epoch, and elections follow
`elections`. Any broker may call these; the metadata store serialises them.
"""

from __future__ import annotations

import logging
import uuid

from logbus.broker.topics import PLACEMENT_CONFIG, BrokerInfo, MetadataImage, PartitionState, TopicState, validate_topic_name
from logbus.cluster import elections
from logbus.cluster.placement import InvalidPlacementError, PlacementError, assign_replicas, parse_placement
from logbus.cluster.store import MetadataStore, TopicExistsError, UnknownTopicError
from logbus.protocol.errors import ErrorCode, KafkaProtocolError
from logbus.storage.config import InvalidConfigError, LogConfig

log = logging.getLogger(__name__)

PREFERRED, UNCLEAN = 0, 1  # ElectLeaders election types


def _or_none(broker_id: int | None) -> int:
    return -1 if broker_id is None else broker_id


class ControlPlane:
    def __init__(self, store: MetadataStore, config) -> None:
        self.store = store
        self.config = config

    # --- what brokers read ----------------------------------------------------------------

    def image(self) -> MetadataImage:
        version = self.store.version()
        live = self.store.live_brokers()
        return MetadataImage(
            cluster_id=self.store.cluster_id(),
            controller_id=_or_none(self.store.controller_id()),
            brokers={i: BrokerInfo(b.broker_id, b.host, b.port, b.rack) for i, b in live.items()},
            topics=self.store.topics(),
            version=version,
        )

    def register(self, info: BrokerInfo) -> None:
        """Join the cluster, and race for the controller lease at once (as Kafka brokers do on
        start), so clients never see a cluster without a controller when one could be had."""
        self.store.register_broker(info)
        self.store.try_acquire_controller(info.broker_id)

    # --- topic configs ----------------------------------------------------------------------

    def log_config(self, configs: dict[str, str]) -> LogConfig:
        """The effective log config of a topic; placement is a cluster matter, not the log's."""
        try:
            return LogConfig.from_overrides(self.config.topic_defaults, {k: v for k, v in configs.items() if k != PLACEMENT_CONFIG})
        except InvalidConfigError as e:
            raise KafkaProtocolError(ErrorCode.invalid_config, str(e)) from None

    def placement(self, configs: dict[str, str]):
        text = configs.get(PLACEMENT_CONFIG) or self.config.log_placement_constraints
        if not text:
            return None
        try:
            return parse_placement(text)
        except InvalidPlacementError as e:
            raise KafkaProtocolError(ErrorCode.invalid_config, f"{PLACEMENT_CONFIG}: {e}") from None

    # --- topics -----------------------------------------------------------------------------

    def create_topic(self, name: str, num_partitions: int, replication_factor: int, configs: dict[str, str],
                     assignments: list[list[int]] | None = None, validate_only: bool = False) -> TopicState:
        validate_topic_name(name)
        if name in self.store.topics():
            raise KafkaProtocolError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        self.log_config(configs)
        constraints = self.placement(configs)
        live = self.store.live_brokers()
        if assignments:
            placed = [(list(a), []) for a in assignments]
            self._check_assignment(placed, live)
        else:
            if num_partitions == -1:
                num_partitions = self.config.num_partitions
            if num_partitions < 1:
                raise KafkaProtocolError(ErrorCode.invalid_partitions, "Number of partitions must be larger than 0.")
            if replication_factor == -1 and constraints is None:
                replication_factor = self.config.default_replication_factor
            if constraints is None and replication_factor < 1:
                raise KafkaProtocolError(ErrorCode.invalid_replication_factor, "Replication factor must be larger than 0.")
            try:
                placed = assign_replicas(num_partitions, {i: b.rack for i, b in live.items()},
                                         replication_factor=None if constraints else replication_factor, constraints=constraints)
            except PlacementError as e:
                raise KafkaProtocolError(ErrorCode[e.code_name.lower()], str(e)) from None
            if constraints is not None and replication_factor not in (-1, len(placed[0][0])):
                raise KafkaProtocolError(
                    ErrorCode.invalid_replication_factor,
                    f"Replication factor {replication_factor} disagrees with the replica placement constraints, which place {len(placed[0][0])} replicas.",
                )
        live_ids = set(live)
        partitions = []
        for index, (replicas, observers) in enumerate(placed):
            sync = [r for r in replicas if r not in observers]
            isr = [r for r in sync if r in live_ids] or sync[:1]
            leader = isr[0] if isr[0] in live_ids else -1
            partitions.append(PartitionState(index, leader, 0, replicas, isr, observers))
        topic = TopicState(name, str(uuid.uuid4()), partitions, dict(configs))
        if not validate_only:
            try:
                self.store.create_topic(topic)
            except TopicExistsError:
                raise KafkaProtocolError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.") from None
            log.info("created topic %s: %d partitions, replicas %s", name, len(partitions), [p.replicas for p in partitions[:4]])
        return topic

    def _check_assignment(self, placed: list[tuple[list[int], list[int]]], live: dict) -> None:
        sizes = {len(r) for r, _ in placed}
        if len(sizes) != 1:
            raise KafkaProtocolError(ErrorCode.invalid_replica_assignment, "All partitions should have the same number of replicas")
        for replicas, _ in placed:
            if len(set(replicas)) != len(replicas):
                raise KafkaProtocolError(ErrorCode.invalid_replica_assignment, f"Replica assignment {replicas} repeats a broker")
            unknown = [r for r in replicas if r not in live]
            if unknown:
                raise KafkaProtocolError(ErrorCode.invalid_replica_assignment, f"Replica assignment {replicas} names brokers that are not live: {unknown}")

    def delete_topic(self, name: str) -> TopicState:
        topic = self.store.topics().get(name)
        if topic is None:
            raise KafkaProtocolError(ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition.")
        try:
            self.store.delete_topic(name)
        except UnknownTopicError:
            raise KafkaProtocolError(ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition.") from None
        log.info("deleted topic %s", name)
        return topic

    def create_partitions(self, name: str, total: int, assignments: list[list[int]] | None, validate_only: bool) -> None:
        topic = self.store.topics().get(name)
        if topic is None:
            raise KafkaProtocolError(ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist.")
        current = len(topic.partitions)
        if total <= current:
            word = "the same as" if total == current else "higher than"
            raise KafkaProtocolError(ErrorCode.invalid_partitions, f"Topic currently has {current} partitions, which is {word} the requested {total}.")
        live = self.store.live_brokers()
        if assignments is not None:
            if len(assignments) != total - current:
                raise KafkaProtocolError(ErrorCode.invalid_replica_assignment, f"Increasing the number of partitions by {total - current} but {len(assignments)} assignments provided.")
            placed = [(list(a), []) for a in assignments]
            self._check_assignment(placed + [(topic.partitions[0].replicas, [])], live)
        else:
            constraints = self.placement(topic.configs)
            try:
                placed = assign_replicas(total - current, {i: b.rack for i, b in live.items()},
                                         replication_factor=None if constraints else topic.replication_factor,
                                         constraints=constraints, start_partition=current)
            except PlacementError as e:
                raise KafkaProtocolError(ErrorCode[e.code_name.lower()], str(e)) from None
        if validate_only:
            return
        new = []
        for i, (replicas, observers) in enumerate(placed):
            sync = [r for r in replicas if r not in observers]
            isr = [r for r in sync if r in live] or sync[:1]
            new.append(PartitionState(current + i, isr[0] if isr[0] in live else -1, 0, replicas, isr, observers))
        self.store.add_partitions(name, new)

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        self.log_config(configs)
        self.placement(configs)
        try:
            self.store.set_topic_configs(name, configs)
        except UnknownTopicError:
            raise KafkaProtocolError(ErrorCode.unknown_topic_or_partition, f"Topic '{name}' does not exist.") from None

    # --- partitions and elections --------------------------------------------------------

    def alter_partition(self, topic: str, state: PartitionState, expected_epoch: int) -> bool:
        return self.store.update_partition(topic, state, expected_epoch)

    def elect_leaders(self, election_type: int, partitions: list[tuple[str, int]] | None) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
        """ElectLeaders: preferred or unclean election of the given partitions (all when None)."""
        topics = self.store.topics()
        live = set(self.store.live_brokers())
        if partitions is None:
            partitions = [(t.name, p.partition) for t in topics.values() for p in t.partitions]
        results: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
        for topic_name, index in partitions:
            results[(topic_name, index)] = self._elect_one(election_type, topic_name, index, topics, live)
        return results

    def _elect_one(self, election_type: int, topic_name: str, index: int, topics: dict[str, TopicState], live: set[int]) -> tuple[ErrorCode, str | None]:
        for _ in range(3):  # the partition may change under us (ISR changes): read again and retry
            topic = topics.get(topic_name)
            if topic is None or not 0 <= index < len(topic.partitions):
                return ErrorCode.unknown_topic_or_partition, "The partition does not exist."
            state = topic.partitions[index]
            if election_type == PREFERRED:
                new = elections.preferred_election(state, live)
                if new is None:
                    if state.replicas and state.leader == state.replicas[0]:
                        return ErrorCode.election_not_needed, "The preferred replica is already the leader."
                    return ErrorCode.preferred_leader_not_available, f"The preferred replica {state.replicas[0]} is not live or not in the ISR."
            elif election_type == UNCLEAN:
                if state.leader in live:
                    return ErrorCode.election_not_needed, f"Partition {topic_name}-{index} has a live leader {state.leader}."
                candidate = elections.clean_candidate(state, live)
                if candidate is None:
                    candidate = elections.unclean_candidate(state, live)
                if candidate is None:
                    return ErrorCode.eligible_leaders_not_available, "No replica of the partition is live."
                new = elections.with_leader(state, candidate, live, unclean=candidate not in state.isr)
                if candidate not in state.isr:
                    log.warning("unclean election of %s-%d: %d becomes leader out of the ISR %s; records it lacks are lost",
                                topic_name, index, candidate, state.isr)
            else:
                return ErrorCode.invalid_request, f"Unknown election type {election_type}"
            if self.store.update_partition(topic_name, new, state.partition_epoch):
                return ErrorCode.none, None
            topics = self.store.topics()
        return ErrorCode.unknown_server_error, "The partition kept changing during the election; try again."

    def allocate_producer_ids(self, count: int) -> int:
        return self.store.allocate_producer_ids(count)
