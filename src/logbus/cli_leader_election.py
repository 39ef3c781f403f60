"""`logbus leader-election`: preferred or unclean leader election, in the words of Kafka's `kafka-leader-election`.

The election goes through confluent-kafka's AdminClient (ElectLeaders), so the command works the
same against logbus and Apache Kafka.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from logbus.cli_topics import CONTROLLER_ATTEMPT_S, DEFAULT_BOOTSTRAP, TIMEOUT_S, with_controller_retry

ELECTION_TYPES = ("PREFERRED", "UNCLEAN")
ERROR_PREFIX = "Error while executing leader election command : "


class ElectionCommandError(Exception):
    """Reported as one line on stderr, exit status 1."""


def add_leader_election_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    e = subparsers.add_parser(
        "leader-election",
        help="preferred or unclean leader election (like kafka-leader-election)",
        description=(
            "Ask the cluster to elect leaders: PREFERRED moves leadership back to each partition's first replica when it "
            "is live and in the ISR; UNCLEAN elects a live replica out of the ISR (an observer, too) for partitions "
            "without a leader, and records it lacks are lost. Exit status 1 when any election fails."
        ),
    )
    e.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT",
        default=os.environ.get("LOGBUS_BOOTSTRAP_SERVERS") or DEFAULT_BOOTSTRAP,
        help=f"broker(s) to connect to (default: $LOGBUS_BOOTSTRAP_SERVERS, else {DEFAULT_BOOTSTRAP})",
    )
    e.add_argument(
        "--election-type",
        required=True,
        type=lambda v: v.upper(),
        choices=ELECTION_TYPES,
        metavar="PREFERRED|UNCLEAN",
        help="type of election (case-insensitive)",
    )
    e.add_argument("--topic", metavar="TOPIC", help="topic of the partition to elect; without --partition, all its partitions")
    e.add_argument("--partition", type=int, metavar="N", help="partition to elect (with --topic)")
    e.add_argument("--all-topic-partitions", action="store_true", help="elect every partition of every topic")
    e.add_argument(
        "--path-to-json-file",
        metavar="FILE",
        help='JSON file of partitions: {"partitions": [{"topic": "t", "partition": 0}, ...]}',
    )
    e.add_argument("--json", action="store_true", help="print machine-readable JSON")
    e.set_defaults(func=lambda args: run_leader_election(args, e))
    return e


def run_leader_election(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    _check_usage(args, parser)
    try:
        return _elect(args)
    except ElectionCommandError as err:
        print(ERROR_PREFIX + str(err), file=sys.stderr)
        return 1


def _check_usage(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    chosen = [name for name, given in (("--topic", args.topic is not None), ("--all-topic-partitions", args.all_topic_partitions),
                                       ("--path-to-json-file", args.path_to_json_file is not None)) if given]
    if len(chosen) != 1:
        parser.error("exactly one of --topic, --all-topic-partitions or --path-to-json-file must be given"
                     + (f" (got {', '.join(chosen)})" if chosen else ""))
    if args.partition is not None and args.topic is None:
        parser.error("--partition needs --topic")
    if args.partition is not None and args.partition < 0:
        parser.error("--partition must be 0 or more")


def read_partitions_file(path: str) -> list[tuple[str, int]]:
    """Kafka's election JSON: {"partitions": [{"topic": "t", "partition": 0}]} (an optional "version" is allowed)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise ElectionCommandError(f"cannot read {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise ElectionCommandError(f"{path} is not valid JSON: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("partitions"), list):
        raise ElectionCommandError(f'{path} must be an object with a "partitions" list: {{"partitions": [{{"topic": "t", "partition": 0}}]}}')
    found: list[tuple[str, int]] = []
    for i, entry in enumerate(data["partitions"]):
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("topic"), str)
            or not entry["topic"]
            or not isinstance(entry.get("partition"), int)
            or isinstance(entry.get("partition"), bool)
            or entry["partition"] < 0
        ):
            raise ElectionCommandError(f'{path}: partitions[{i}] must be {{"topic": "<name>", "partition": <number>}}, not {json.dumps(entry)}')
        found.append((entry["topic"], entry["partition"]))
    if not found:
        raise ElectionCommandError(f"{path} names no partitions")
    duplicates = sorted({f"{t}-{p}" for t, p in found if found.count((t, p)) > 1})
    if duplicates:
        raise ElectionCommandError(f"Replica election data contains duplicate partitions: {', '.join(duplicates)}")
    return found


def _kafka_error(value: Any) -> tuple[str, str]:
    """(error name, message) of a KafkaException / KafkaError."""
    from confluent_kafka import KafkaError, KafkaException

    err = value.args[0] if isinstance(value, KafkaException) and value.args else value
    if isinstance(err, KafkaError):
        return err.name(), err.str()
    return type(value).__name__, str(value)


def _elect(args: argparse.Namespace) -> int:
    from confluent_kafka import ElectionType, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient

    bootstrap = args.bootstrap_server

    def make_admin(timeout_s: float = TIMEOUT_S):
        return AdminClient(
            {
                "bootstrap.servers": bootstrap,
                "socket.timeout.ms": int(timeout_s * 1000),
                "socket.connection.setup.timeout.ms": int(TIMEOUT_S * 1000),
                "log_level": 0,
            }
        )

    admin = make_admin()
    election_type = ElectionType[args.election_type]
    wanted: list[tuple[str, int]] | None
    if args.all_topic_partitions:
        wanted = None
    elif args.path_to_json_file is not None:
        wanted = read_partitions_file(args.path_to_json_file)
    elif args.partition is not None:
        wanted = [(args.topic, args.partition)]
    else:  # --topic alone: every partition of the topic, as Confluent's examples use it
        try:
            md = admin.list_topics(args.topic, timeout=TIMEOUT_S)
        except KafkaException as e:
            raise ElectionCommandError(f"could not get metadata from {bootstrap}: {_kafka_error(e)[1]}") from None
        tm = md.topics.get(args.topic)
        if tm is None or tm.error is not None or not tm.partitions:
            raise ElectionCommandError(f"Topic '{args.topic}' does not exist")
        wanted = [(args.topic, p) for p in sorted(tm.partitions)]

    partitions = None if wanted is None else [TopicPartition(t, p) for t, p in wanted]
    def call(client):
        # No timeout keywords: confluent-kafka 2.16's elect_leaders fails with SystemError when given any;
        # the request is bounded by the client's socket.timeout.ms.
        return client.elect_leaders(election_type, partitions).result(timeout=TIMEOUT_S + 5)

    try:
        # ElectLeaders goes to the controller: short attempts, a new client when the known controller is gone
        results = with_controller_retry(lambda: make_admin(CONTROLLER_ATTEMPT_S), call)
    except KafkaException as e:
        name, message = _kafka_error(e)
        raise ElectionCommandError(f"{name}: {message}") from None
    except Exception as e:  # noqa: BLE001 - a timeout of the future
        raise ElectionCommandError(f"no answer from {bootstrap} within {TIMEOUT_S:g} s: {e or type(e).__name__}") from None

    succeeded: list[str] = []
    noop: list[str] = []
    failed: list[tuple[str, str, str]] = []
    for tp in sorted(results, key=lambda tp: (tp.topic, tp.partition)):
        label = f"{tp.topic}-{tp.partition}"
        error = results[tp]
        if error is None:
            succeeded.append(label)
            continue
        name, message = _kafka_error(error)
        if name == "ELECTION_NOT_NEEDED":
            noop.append(label)
        else:
            failed.append((label, name, message))

    kind = args.election_type
    if args.json:
        print(json.dumps({
            "election_type": kind,
            "succeeded": succeeded,
            "not_needed": noop,
            "failed": [{"partition": label, "error": name, "message": message} for label, name, message in failed],
        }, indent=2))
    else:
        if succeeded:
            print(f"Successfully completed leader election ({kind}) for partitions {', '.join(succeeded)}")
        if noop:
            print(f"Valid replica already elected for partitions {', '.join(noop)}")
        for label, name, message in failed:
            print(f"Error completing leader election ({kind}) for partition: {label}: {name}: {message}")
        if not (succeeded or noop or failed):
            print(f"No partition needed a leader election ({kind})")
    if failed:
        print(ERROR_PREFIX + f"{len(failed)} replica(s) could not be elected", file=sys.stderr)
        return 1
    return 0
