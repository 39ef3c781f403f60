"""`logbus topics`: create, list, describe, alter and delete topics, in the words of Kafka's `kafka-topics`.

Everything goes through confluent-kafka's AdminClient, so the command works the same against a
logbus broker and against Apache Kafka.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import Any

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
TIMEOUT_S = 15.0
ERROR_PREFIX = "Error while executing topic command : "
PLACEMENT_CONFIG = "confluent.placement.constraints"  # Confluent's topic config for replica placement


class TopicCommandError(Exception):
    """A failure reported to the user as kafka-topics does: one line on stderr, exit status 1."""


def add_topics_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    t = subparsers.add_parser(
        "topics",
        help="create, list, describe, alter and delete topics (like kafka-topics)",
        description="Create, list, describe, alter and delete topics. Works against logbus and Apache Kafka.",
    )
    t.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT",
        default=os.environ.get("LOGBUS_BOOTSTRAP_SERVERS") or DEFAULT_BOOTSTRAP,
        help=f"broker(s) to connect to (default: $LOGBUS_BOOTSTRAP_SERVERS, else {DEFAULT_BOOTSTRAP})",
    )
    action = t.add_mutually_exclusive_group(required=True)
    action.add_argument("--create", action="store_true", help="create a new topic")
    action.add_argument("--list", action="store_true", help="list the topics")
    action.add_argument("--describe", action="store_true", help="describe topics: partitions, leaders, replicas, ISR, configs")
    action.add_argument("--delete", action="store_true", help="delete topics")
    action.add_argument("--alter", action="store_true", help="add partitions to topics or change their configs")
    t.add_argument("--topic", metavar="TOPIC", help="topic name; for --list, --describe, --alter and --delete a regular expression")
    t.add_argument("--partitions", type=int, metavar="N", help="partitions of the topic (--create), or the new total (--alter)")
    t.add_argument("--replication-factor", type=int, metavar="N", help="replicas of each partition (--create); not needed with --replica-placement")
    t.add_argument(
        "--replica-placement",
        metavar="FILE",
        help=f"replica placement constraints (Confluent's JSON: replicas and observers by rack), set as {PLACEMENT_CONFIG} (--create, --alter)",
    )
    t.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="topic config override; repeatable (--create, --alter)")
    t.add_argument("--delete-config", action="append", default=[], metavar="KEY", help="remove a topic config override; repeatable (--alter)")
    t.add_argument("--if-exists", action="store_true", help="with --alter, --delete, --describe: do nothing if the topic does not exist")
    t.add_argument("--if-not-exists", action="store_true", help="with --create: do nothing if the topic already exists")
    t.add_argument("--json", action="store_true", help="print machine-readable JSON")
    t.set_defaults(func=lambda args: run_topics(args, t))
    return t


def run_topics(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    configs = _check_usage(args, parser)
    try:
        return _TopicCommand(args, configs).run()
    except TopicCommandError as e:
        print(ERROR_PREFIX + str(e), file=sys.stderr)
        return 1


def _check_usage(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict[str, str]:
    """Reject option combinations kafka-topics rejects; exits 2 with argparse's message."""
    if (args.create or args.alter or args.delete) and not args.topic:
        parser.error("--topic is required with --create, --alter and --delete")
    if args.replication_factor is not None and not args.create:
        parser.error("--replication-factor can only be used with --create")
    if args.partitions is not None and not (args.create or args.alter):
        parser.error("--partitions can only be used with --create or --alter")
    if args.partitions is not None and args.partitions < 1:
        parser.error("--partitions must be at least 1")
    if args.replication_factor is not None and args.replication_factor < 1:
        parser.error("--replication-factor must be at least 1")
    if args.config and not (args.create or args.alter):
        parser.error("--config can only be used with --create or --alter")
    if args.delete_config and not args.alter:
        parser.error("--delete-config can only be used with --alter")
    if args.if_exists and not (args.alter or args.delete or args.describe):
        parser.error("--if-exists can only be used with --alter, --delete or --describe")
    if args.if_not_exists and not args.create:
        parser.error("--if-not-exists can only be used with --create")
    if args.replica_placement is not None and not (args.create or args.alter):
        parser.error("--replica-placement can only be used with --create or --alter")
    if args.alter and args.partitions is None and not args.config and not args.delete_config and args.replica_placement is None:
        parser.error("--alter needs --partitions, --config, --delete-config or --replica-placement")
    configs: dict[str, str] = {}
    for item in args.config:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            parser.error(f'invalid --config {item!r}: configs must be in the format "key=value"')
        configs[key.strip()] = value.strip()
    if args.replica_placement is not None and PLACEMENT_CONFIG in configs:
        parser.error(f"give the placement either with --replica-placement or with --config {PLACEMENT_CONFIG}=..., not both")
    return configs


def read_placement_file(path: str) -> str:
    """The placement JSON of FILE, validated like the broker does, as compact JSON for the topic config."""
    from logbus.cluster.placement import InvalidPlacementError, parse_placement

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise TopicCommandError(f"cannot read the replica placement file {path}: {e.strerror or e}") from None
    try:
        parse_placement(text)
    except InvalidPlacementError as e:
        raise TopicCommandError(f"invalid replica placement in {path}: {e.message}") from None
    return json.dumps(json.loads(text), separators=(",", ":"))


def placement_racks(text: str | None) -> tuple[set[str], int] | None:
    """(observer racks, synchronous replica count) of a placement config value, or None if there is none or it is invalid."""
    if not text:
        return None
    from logbus.cluster.placement import InvalidPlacementError, parse_placement

    try:
        constraints = parse_placement(text)
    except InvalidPlacementError:
        return None
    return {c.rack for c in constraints.observers}, constraints.replication_factor


def observers_of(replicas: list[int], placement: tuple[set[str], int] | None, racks: dict[int, str | None]) -> list[int]:
    """The observers among a partition's replicas.

    The Kafka protocol has no observers field: a replica is an observer when its broker's rack is
    one of the placement's observer racks (constraints never overlap, so this is exact). The rack of
    a broker that is not live is unknown; such a replica is an observer when it stands after the
    synchronous replicas, where placement puts observers.
    """
    if placement is None:
        return []
    observer_racks, sync_count = placement
    if not observer_racks:
        return []
    found = []
    for position, r in enumerate(replicas):
        if r in racks:
            if racks[r] in observer_racks:
                found.append(r)
        elif position >= sync_count:
            found.append(r)
    return found


def broker_racks(admin, timeout: float = TIMEOUT_S) -> dict[int, str | None]:
    """Racks of the live brokers (DescribeCluster); empty if the cluster does not say."""
    try:
        cluster = admin.describe_cluster(request_timeout=timeout).result(timeout=timeout + 5)
    except Exception:  # noqa: BLE001 - racks only refine the observers; the caller falls back to positions
        return {}
    return {node.id: node.rack for node in cluster.nodes}


def _topic_filter(pattern: str | None):
    """kafka-topics treats --topic as a regular expression matched against the whole name."""
    if pattern is None:
        return lambda name: True
    try:
        rx = re.compile(pattern)
    except re.error:
        return lambda name: name == pattern
    return lambda name: name == pattern or rx.fullmatch(name) is not None


CONTROLLER_ATTEMPT_S = 5.0


def waiting_for_controller(exc: BaseException) -> bool:
    """librdkafka's error when the controller it knows of does not answer (it died; a new one may be elected)."""
    return "waiting for controller" in str(exc)


def with_controller_retry(make_admin, call, total_s: float = TIMEOUT_S):
    """`call(admin)` for requests librdkafka sends to the controller.

    A client keeps waiting for the controller it learnt of at start, even when that broker died and
    another took over a moment later; a new client asks again. So: short attempts, a new client after
    each attempt that timed out waiting for the controller, within `total_s`.
    """
    deadline = time.monotonic() + total_s
    admin = make_admin()
    while True:
        try:
            return call(admin)
        except Exception as e:  # noqa: BLE001 - only the controller wait is retried
            if not waiting_for_controller(e) or time.monotonic() + 1 >= deadline:
                raise
        admin = make_admin()


def _kafka_message(exc: BaseException) -> str:
    """The broker's message from a confluent-kafka exception, without librdkafka's decoration."""
    from confluent_kafka import KafkaError, KafkaException

    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0].str()
    return str(exc) or type(exc).__name__


class _TopicCommand:
    def __init__(self, args: argparse.Namespace, configs: dict[str, str]) -> None:
        self.args = args
        self.configs = configs
        self.bootstrap = args.bootstrap_server
        self.admin = self._new_admin()

    def _new_admin(self):
        from confluent_kafka.admin import AdminClient

        debug = getattr(self.args, "log_level", "INFO").upper() == "DEBUG"
        return AdminClient(
            {
                "bootstrap.servers": self.bootstrap,
                "socket.timeout.ms": int(TIMEOUT_S * 1000),
                "socket.connection.setup.timeout.ms": int(TIMEOUT_S * 1000),
                # librdkafka logs every refused connection on stderr; the command reports it once itself.
                "log_level": 7 if debug else 0,
            }
        )

    # --- plumbing -------------------------------------------------------------------------

    def _metadata(self):
        from confluent_kafka import KafkaException

        try:
            return self.admin.list_topics(timeout=TIMEOUT_S)
        except KafkaException as e:
            raise TopicCommandError(
                f"could not get metadata from {self.bootstrap} within {TIMEOUT_S:g} s "
                f"(is the broker running and reachable?): {_kafka_message(e)}"
            ) from None

    def _wait(self, future, what: str):
        try:
            return future.result(timeout=TIMEOUT_S + 5)
        except FutureTimeoutError:
            raise TopicCommandError(f"timed out after {TIMEOUT_S:g} s waiting for {self.bootstrap} to {what}") from None
        except Exception as e:  # KafkaException carrying the broker's error
            raise TopicCommandError(_kafka_message(e)) from None

    def _matching(self, metadata) -> list[str]:
        match = _topic_filter(self.args.topic)
        return sorted(name for name in metadata.topics if match(name))

    def _existing_or_fail(self, metadata) -> list[str]:
        names = self._matching(metadata)
        if not names and not self.args.if_exists:
            raise TopicCommandError(f"Topic '{self.args.topic}' does not exist as expected")
        return names

    def _print_json(self, value: Any) -> None:
        print(json.dumps(value, indent=2, sort_keys=False))

    # --- actions --------------------------------------------------------------------------

    def run(self) -> int:
        a = self.args
        if a.create:
            return self.create()
        if a.list:
            return self.list()
        if a.describe:
            return self.describe()
        if a.delete:
            return self.delete()
        return self.alter()

    def create(self) -> int:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import NewTopic

        a = self.args
        if a.replica_placement is not None:
            self.configs[PLACEMENT_CONFIG] = read_placement_file(a.replica_placement)
        self._metadata()  # a clear message when the broker is unreachable
        new = NewTopic(
            a.topic,
            num_partitions=a.partitions if a.partitions is not None else -1,
            replication_factor=a.replication_factor if a.replication_factor is not None else -1,
            config=self.configs,
        )
        futures = self.admin.create_topics([new], operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)
        created = True
        try:
            futures[a.topic].result(timeout=TIMEOUT_S + 5)
        except FutureTimeoutError:
            raise TopicCommandError(f"timed out after {TIMEOUT_S:g} s waiting for {self.bootstrap} to create the topic") from None
        except KafkaException as e:
            err = e.args[0] if e.args else None
            if a.if_not_exists and isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                created = False
            else:
                raise TopicCommandError(_kafka_message(e)) from None
        if a.json:
            self._print_json({"topic": a.topic, "created": created})
        elif created:
            print(f"Created topic {a.topic}.")
        return 0

    def list(self) -> int:
        names = self._matching(self._metadata())
        if self.args.json:
            self._print_json(names)
        else:
            for name in names:
                print(name)
        return 0

    def describe(self) -> int:
        metadata = self._metadata()
        names = self._existing_or_fail(metadata)
        alive = set(metadata.brokers)
        ids = self._topic_ids(names)
        all_configs = self._configs(names)
        configs = {name: _non_default(entries) for name, entries in all_configs.items()}
        placements = {name: placement_racks(_value(entries, PLACEMENT_CONFIG)) for name, entries in all_configs.items()}
        racks = broker_racks(self.admin) if any(placements.values()) else {}
        topics = []
        for name in names:
            tm = metadata.topics[name]
            if tm.error is not None:
                raise TopicCommandError(f"Topic '{name}': {tm.error.str()}")
            partitions = []
            for pid in sorted(tm.partitions):
                pm = tm.partitions[pid]
                partitions.append(
                    {
                        "partition": pid,
                        "leader": pm.leader if pm.leader >= 0 else None,
                        "replicas": list(pm.replicas),
                        "isr": list(pm.isrs),
                        "offline": [r for r in pm.replicas if r not in alive],
                        "observers": observers_of(list(pm.replicas), placements.get(name), racks),
                    }
                )
            topics.append(
                {
                    "topic": name,
                    "topic_id": ids.get(name),
                    "partition_count": len(partitions),
                    "replication_factor": len(partitions[0]["replicas"]) if partitions else 0,
                    "configs": configs.get(name, {}),
                    "placement": placements.get(name) is not None,
                    "partitions": partitions,
                }
            )
        if self.args.json:
            for t in topics:
                del t["placement"]
            self._print_json(topics)
            return 0
        for t in topics:
            cfg = ",".join(f"{k}={v}" for k, v in t["configs"].items())
            print(
                f"Topic: {t['topic']}\tTopicId: {t['topic_id'] or ''}\tPartitionCount: {t['partition_count']}\t"
                f"ReplicationFactor: {t['replication_factor']}\tConfigs: {cfg}"
            )
            for p in t["partitions"]:
                leader = "none" if p["leader"] is None else p["leader"]
                line = (
                    f"\tTopic: {t['topic']}\tPartition: {p['partition']}\tLeader: {leader}\t"
                    f"Replicas: {_ids(p['replicas'])}\tIsr: {_ids(p['isr'])}\tOffline: {_ids(p['offline'])}"
                )
                if t["placement"]:  # Confluent's tools print observers for topics with placement constraints
                    line += f"\tObservers: {_ids(p['observers'])}"
                print(line)
        return 0

    def _topic_ids(self, names: list[str]) -> dict[str, str]:
        """Topic ids come from DescribeTopics; a cluster that does not give them leaves the field empty."""
        if not names:
            return {}
        try:
            from confluent_kafka import TopicCollection

            futures = self.admin.describe_topics(TopicCollection(names), request_timeout=TIMEOUT_S)
        except (ImportError, AttributeError, TypeError):
            return {}
        ids: dict[str, str] = {}
        for name, future in futures.items():
            try:
                desc = future.result(timeout=TIMEOUT_S + 5)
            except Exception:  # noqa: BLE001 - an id is a nicety; the rest of the description stands
                continue
            if desc.topic_id is not None:
                ids[name] = str(desc.topic_id)
        return ids

    def _configs(self, names: list[str]) -> dict[str, dict[str, Any]]:
        """All config entries of each topic (DescribeConfigs), by name."""
        from confluent_kafka.admin import ConfigResource, ResourceType

        if not names:
            return {}
        resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
        return describe_topic_configs(self._new_admin, resources)

    def delete(self) -> int:
        names = self._existing_or_fail(self._metadata())
        deleted = []
        if names:
            futures = self.admin.delete_topics(names, operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)
            for name in names:
                self._wait(futures[name], f"delete topic {name}")
                deleted.append(name)
        if self.args.json:
            self._print_json({"deleted": deleted})
        else:
            for name in deleted:
                print(f"Deleted topic {name}.")
        return 0

    def alter(self) -> int:
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, ResourceType

        a = self.args
        if a.replica_placement is not None:
            self.configs[PLACEMENT_CONFIG] = read_placement_file(a.replica_placement)
        metadata = self._metadata()
        names = self._existing_or_fail(metadata)
        report: dict[str, dict[str, Any]] = {name: {} for name in names}
        if a.partitions is not None and names:
            futures = self.admin.create_partitions(
                [NewPartitions(name, a.partitions) for name in names], operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S
            )
            for name in names:
                self._wait(futures[name], f"add partitions to {name}")
                report[name]["partitions"] = a.partitions
        if (self.configs or a.delete_config) and names:
            ops = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in self.configs.items()]
            ops += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in a.delete_config]
            resources = [ConfigResource(ResourceType.TOPIC, name, incremental_configs=ops) for name in names]
            futures = self.admin.incremental_alter_configs(resources, request_timeout=TIMEOUT_S)
            for resource, future in futures.items():
                self._wait(future, f"alter the configs of {resource.name}")
                report[resource.name]["set"] = dict(self.configs)
                report[resource.name]["deleted"] = list(a.delete_config)
        if a.json:
            self._print_json([{"topic": name, **changes} for name, changes in report.items()])
        else:
            for name in names:
                print(f"Altered topic {name}.")
        return 0


def describe_topic_configs(make_admin, resources, tolerate_errors: bool = False) -> dict[str, dict[str, Any]]:
    """DescribeConfigs of topics (librdkafka sends it to the controller), retried as `with_controller_retry` says.

    With `tolerate_errors` a topic whose configs cannot be described (deleted meanwhile) gets {}.
    """

    def call(admin):
        futures = admin.describe_configs(resources, request_timeout=CONTROLLER_ATTEMPT_S)
        result = {}
        for resource, future in futures.items():
            try:
                result[resource.name] = future.result(timeout=CONTROLLER_ATTEMPT_S + 5)
            except FutureTimeoutError:
                raise TopicCommandError(f"timed out waiting for the configs of {resource.name}") from None
            except Exception as e:  # noqa: BLE001
                if waiting_for_controller(e) or not tolerate_errors:
                    raise
                result[resource.name] = {}
        return result

    try:
        return with_controller_retry(make_admin, call)
    except TopicCommandError:
        raise
    except Exception as e:  # KafkaException carrying the broker's error
        raise TopicCommandError(_kafka_message(e)) from None


def _non_default(entries: dict[str, Any]) -> dict[str, str]:
    from confluent_kafka.admin import ConfigSource

    return {
        e.name: e.value
        for e in sorted(entries.values(), key=lambda e: e.name)
        if not e.is_default and getattr(e.source, "value", e.source) != ConfigSource.DEFAULT_CONFIG.value and not e.is_sensitive
    }


def _value(entries: dict[str, Any], name: str) -> str | None:
    entry = entries.get(name)
    return None if entry is None else entry.value


def _ids(values: list[int]) -> str:
    return ",".join(str(v) for v in values)
