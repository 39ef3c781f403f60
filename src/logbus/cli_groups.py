"""`logbus groups`: list, describe, reset, delete consumer groups, in the words of Kafka's `kafka-consumer-groups`.

Everything goes through confluent-kafka's AdminClient (ListGroups, DescribeGroups, OffsetFetch,
OffsetCommit, DeleteGroups, ListOffsets), so the command works the same against a logbus broker and
against Apache Kafka. `--delete-offsets` (OffsetDelete), which the AdminClient does not offer, is
sent to the group's coordinator over a plain Kafka protocol connection.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import sys
from concurrent.futures import TimeoutError as FutureTimeoutError
from datetime import datetime
from typing import Any

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_TIMEOUT_MS = 15000

# librdkafka's ConsumerGroupState names -> the names Kafka's brokers and tools use.
_STATE_NAMES = {
    "UNKNOWN": "Unknown",
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "STABLE": "Stable",
    "DEAD": "Dead",
    "EMPTY": "Empty",
}


class GroupCommandError(Exception):
    """A failure reported as kafka-consumer-groups does: `Error: <message>` on stderr, exit status 1."""


def add_groups_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    g = subparsers.add_parser(
        "groups",
        help="list, describe, reset and delete consumer groups (like kafka-consumer-groups)",
        description="List, describe, reset the offsets of, and delete consumer groups. Works against logbus and Apache Kafka.",
    )
    g.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT",
        default=os.environ.get("LOGBUS_BOOTSTRAP_SERVERS") or DEFAULT_BOOTSTRAP,
        help=f"broker(s) to connect to (default: $LOGBUS_BOOTSTRAP_SERVERS, else {DEFAULT_BOOTSTRAP})",
    )
    action = g.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list all consumer groups")
    action.add_argument("--describe", action="store_true", help="describe groups: offsets and lag (default), --members or --state")
    action.add_argument("--reset-offsets", action="store_true", help="reset the committed offsets of an inactive group")
    action.add_argument("--delete", action="store_true", help="delete groups without active members, with their offsets")
    action.add_argument("--delete-offsets", action="store_true", help="delete the committed offsets of a group for --topic")
    g.add_argument("--group", action="append", default=[], metavar="GROUP", help="the consumer group; repeatable")
    g.add_argument("--all-groups", action="store_true", help="every group (--describe, --reset-offsets, --delete)")
    g.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P]", help="topic, optionally with partitions (--reset-offsets, --delete-offsets); repeatable")
    g.add_argument("--all-topics", action="store_true", help="every topic the group has offsets for (--reset-offsets)")
    g.add_argument("--members", action="store_true", help="with --describe: the members of the group")
    g.add_argument("--offsets", action="store_true", help="with --describe: offsets and lag per partition (the default)")
    g.add_argument("--state", nargs="?", const="", default=None, metavar="STATES",
                   help="with --describe: the state of the group; with --list: show states, or only groups in these comma-separated states")
    g.add_argument("--verbose", action="store_true", help="with --describe --members: the partitions of each member")
    spec = g.add_mutually_exclusive_group()
    spec.add_argument("--to-earliest", action="store_true", help="reset to the earliest offset")
    spec.add_argument("--to-latest", action="store_true", help="reset to the log end offset")
    spec.add_argument("--to-current", action="store_true", help="reset to the committed offset (no change)")
    spec.add_argument("--to-offset", type=int, metavar="N", help="reset to offset N (clamped to the partition's range)")
    spec.add_argument("--shift-by", type=int, metavar="N", help="move the committed offset by N, may be negative (clamped)")
    spec.add_argument("--to-datetime", metavar="ISO", help="reset to the first offset at or after this time, e.g. 2024-05-01T12:00:00 (local time unless it has an offset or Z)")
    run = g.add_mutually_exclusive_group()
    run.add_argument("--dry-run", action="store_true", help="with --reset-offsets: only print the new offsets (the default)")
    run.add_argument("--execute", action="store_true", help="with --reset-offsets: commit the new offsets")
    g.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS", help=f"bound of each request in ms (default {DEFAULT_TIMEOUT_MS})")
    g.add_argument("--json", action="store_true", help="print machine-readable JSON")
    g.set_defaults(func=lambda args: run_groups(args, g))
    return g


def run_groups(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    _check_usage(args, parser)
    try:
        return _GroupCommand(args).run()
    except GroupCommandError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1


_SPECS = ("to_earliest", "to_latest", "to_current", "to_offset", "shift_by", "to_datetime")


def _check_usage(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Reject option combinations kafka-consumer-groups rejects; exits 2 with argparse's message."""
    has_spec = any(getattr(args, s) not in (None, False) for s in _SPECS)
    if args.timeout <= 0:
        parser.error("--timeout must be positive")
    if (args.describe or args.reset_offsets or args.delete) and not (args.group or args.all_groups):
        parser.error("--group or --all-groups is required with --describe, --reset-offsets and --delete")
    if args.group and args.all_groups:
        parser.error("--group and --all-groups cannot be used together")
    if args.delete_offsets and (len(args.group) != 1 or not args.topic):
        parser.error("--delete-offsets needs one --group and at least one --topic")
    if args.all_groups and not (args.describe or args.reset_offsets or args.delete):
        parser.error("--all-groups can only be used with --describe, --reset-offsets or --delete")
    if args.reset_offsets:
        if not has_spec:
            parser.error("--reset-offsets needs one of --to-earliest, --to-latest, --to-current, --to-offset, --shift-by, --to-datetime")
        if bool(args.topic) == bool(args.all_topics):
            parser.error("--reset-offsets needs either --topic or --all-topics")
    else:
        if has_spec:
            parser.error("--to-* and --shift-by can only be used with --reset-offsets")
        if args.execute or args.dry_run:
            parser.error("--execute and --dry-run can only be used with --reset-offsets")
        if args.all_topics:
            parser.error("--all-topics can only be used with --reset-offsets")
        if args.topic and not args.delete_offsets:
            parser.error("--topic can only be used with --reset-offsets or --delete-offsets")
    if (args.members or args.offsets) and not args.describe:
        parser.error("--members and --offsets can only be used with --describe")
    if sum([args.members, args.offsets, args.state is not None]) > 1 and args.describe:
        parser.error("--members, --offsets and --state cannot be used together")
    if args.state is not None and not (args.describe or args.list):
        parser.error("--state can only be used with --describe or --list")
    if args.state and args.describe:
        parser.error("--state takes no value with --describe")
    if args.verbose and not (args.describe and args.members):
        parser.error("--verbose can only be used with --describe --members")
    if args.to_datetime is not None:
        try:
            args.to_datetime_ms = _parse_datetime_ms(args.to_datetime)
        except ValueError:
            parser.error(f"--to-datetime {args.to_datetime!r} is not an ISO date and time such as 2024-05-01T12:00:00.000")
    for item in args.topic:
        try:
            _parse_topic(item)
        except ValueError as e:
            parser.error(str(e))


def _parse_datetime_ms(text: str) -> int:
    dt = datetime.fromisoformat(text)
    if dt.tzinfo is None:
        dt = dt.astimezone()  # Kafka's tool reads a time without a zone as local time
    return int(dt.timestamp() * 1000)


def _parse_topic(item: str) -> tuple[str, list[int] | None]:
    """`T` (every partition) or `T:0,1,2`."""
    name, sep, parts = item.partition(":")
    if not name:
        raise ValueError(f"--topic {item!r}: a topic name is required")
    if not sep:
        return name, None
    try:
        partitions = sorted({int(p) for p in parts.split(",") if p.strip()})
    except ValueError:
        raise ValueError(f"--topic {item!r}: partitions must be numbers, as in {name}:0,1,2") from None
    if not partitions or any(p < 0 for p in partitions):
        raise ValueError(f"--topic {item!r}: partitions must be non-negative numbers, as in {name}:0,1,2")
    return name, partitions


def _kafka_message(exc: BaseException) -> str:
    from confluent_kafka import KafkaError, KafkaException

    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0].str()
    return str(exc) or type(exc).__name__


def _state_name(state: Any) -> str:
    name = getattr(state, "name", None) or str(state)
    return _STATE_NAMES.get(name, name)


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    cells = [header] + [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return [" ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]


class _GroupCommand:
    def __init__(self, args: argparse.Namespace) -> None:
        from confluent_kafka.admin import AdminClient

        self.args = args
        self.bootstrap = args.bootstrap_server
        self.timeout_s = args.timeout / 1000
        debug = getattr(args, "log_level", "INFO").upper() == "DEBUG"
        self.admin = AdminClient(
            {
                "bootstrap.servers": self.bootstrap,
                "socket.timeout.ms": args.timeout,
                "socket.connection.setup.timeout.ms": args.timeout,
                "log_level": 7 if debug else 0,  # the command reports an unreachable broker once itself
            }
        )

    # --- plumbing -------------------------------------------------------------------------

    def _wait(self, future, what: str):
        try:
            return future.result(timeout=self.timeout_s + 5)
        except FutureTimeoutError:
            raise GroupCommandError(f"timed out after {self.timeout_s:g} s waiting for {self.bootstrap} to {what}") from None
        except Exception as e:  # KafkaException carrying the broker's error
            raise GroupCommandError(f"could not {what}: {_kafka_message(e)}") from None

    def _metadata(self):
        from confluent_kafka import KafkaException

        try:
            return self.admin.list_topics(timeout=self.timeout_s)
        except KafkaException as e:
            raise GroupCommandError(
                f"could not get metadata from {self.bootstrap} within {self.timeout_s:g} s "
                f"(is the broker running and reachable?): {_kafka_message(e)}"
            ) from None

    def _print_json(self, value: Any) -> None:
        print(json.dumps(value, indent=2))

    def _listings(self) -> list[Any]:
        self._metadata()  # a clear message when the broker is unreachable
        result = self._wait(self.admin.list_consumer_groups(request_timeout=self.timeout_s), "list the consumer groups")
        if result.errors:
            raise GroupCommandError("could not list the consumer groups: " + "; ".join(_kafka_message(e) for e in result.errors))
        return sorted(result.valid, key=lambda listing: listing.group_id)

    def _group_ids(self) -> list[str]:
        if self.args.all_groups:
            return [listing.group_id for listing in self._listings()]
        self._metadata()
        return list(dict.fromkeys(self.args.group))

    def _describe(self, group_ids: list[str]) -> dict[str, Any]:
        if not group_ids:
            return {}
        futures = self.admin.describe_consumer_groups(group_ids, request_timeout=self.timeout_s)
        return {gid: self._wait(futures[gid], f"describe group '{gid}'") for gid in group_ids}

    def _committed(self, group_id: str) -> dict[tuple[str, int], int]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        futures = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id)], request_timeout=self.timeout_s)
        result = self._wait(futures[group_id], f"fetch the offsets of group '{group_id}'")
        committed = {}
        for tp in result.topic_partitions or []:
            if tp.error is not None:
                raise GroupCommandError(f"could not fetch the offset of {tp.topic}-{tp.partition} for group '{group_id}': {tp.error.str()}")
            if tp.offset >= 0:
                committed[(tp.topic, tp.partition)] = tp.offset
        return committed

    def _list_offsets(self, specs: dict[tuple[str, int], Any], what: str) -> dict[tuple[str, int], int]:
        """ListOffsets for many partitions in one call: {(topic, partition): offset}."""
        from confluent_kafka import TopicPartition

        if not specs:
            return {}
        request = {TopicPartition(t, p): spec for (t, p), spec in specs.items()}
        futures = self.admin.list_offsets(request, request_timeout=self.timeout_s)
        result = {}
        for tp, future in futures.items():
            info = self._wait(future, f"find the {what} offset of {tp.topic}-{tp.partition}")
            result[(tp.topic, tp.partition)] = info.offset
        return result

    def _log_end_offsets(self, partitions) -> dict[tuple[str, int], int]:
        from confluent_kafka.admin import OffsetSpec

        return self._list_offsets({tp: OffsetSpec.latest() for tp in partitions}, "log end")

    # --- actions --------------------------------------------------------------------------

    def run(self) -> int:
        a = self.args
        if a.list:
            return self.list()
        if a.describe:
            return self.describe()
        if a.reset_offsets:
            return self.reset_offsets()
        if a.delete:
            return self.delete()
        return self.delete_offsets()

    def list(self) -> int:
        listings = self._listings()
        rows = [(listing.group_id, _state_name(listing.state)) for listing in listings]
        if self.args.state:
            wanted = {s.strip().lower() for s in self.args.state.split(",") if s.strip()}
            rows = [r for r in rows if r[1].lower() in wanted]
        if self.args.json:
            self._print_json([{"group": g, "state": s} for g, s in rows])
        elif self.args.state is not None:
            for line in _table(["GROUP", "STATE"], [list(r) for r in rows]):
                print(line)
        else:
            for g, _ in rows:
                print(g)
        return 0

    def _group_report(self, group_id: str, desc) -> dict[str, Any]:
        state = _state_name(desc.state)
        members = []
        owner: dict[tuple[str, int], dict[str, Any]] = {}
        for m in desc.members:
            tps = sorted((tp.topic, tp.partition) for tp in (m.assignment.topic_partitions if m.assignment else []))
            member = {
                "consumer_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "host": m.host,
                "client_id": m.client_id,
                "partitions": [{"topic": t, "partition": p} for t, p in tps],
            }
            members.append(member)
            for tp in tps:
                owner[tp] = member
        committed = self._committed(group_id) if state != "Dead" else {}
        partitions = sorted(set(committed) | set(owner))
        ends = self._log_end_offsets(partitions)
        rows = []
        for tp in partitions:
            current, end = committed.get(tp), ends.get(tp)
            m = owner.get(tp)
            rows.append(
                {
                    "topic": tp[0],
                    "partition": tp[1],
                    "current_offset": current,
                    "log_end_offset": end,
                    "lag": max(end - current, 0) if current is not None and end is not None and end >= 0 else None,
                    "consumer_id": m["consumer_id"] if m else None,
                    "host": m["host"] if m else None,
                    "client_id": m["client_id"] if m else None,
                }
            )
        coordinator = desc.coordinator
        return {
            "group": group_id,
            "state": state,
            "assignment_strategy": desc.partition_assignor or "",
            "coordinator": {"id": coordinator.id, "host": coordinator.host, "port": coordinator.port} if coordinator else None,
            "members": members,
            "offsets": rows,
        }

    def describe(self) -> int:
        a = self.args
        group_ids = self._group_ids()
        descriptions = self._describe(group_ids)
        reports, missing = [], []
        for gid in group_ids:
            desc = descriptions[gid]
            if _state_name(desc.state) == "Dead":
                missing.append(gid)
                continue
            reports.append(self._group_report(gid, desc))
        if a.json:
            self._print_json(reports)
        else:
            for r in reports:
                self._print_report(r)
        for gid in missing:
            print(f"Error: Consumer group '{gid}' does not exist.", file=sys.stderr)
        return 1 if missing else 0

    def _print_report(self, r: dict[str, Any]) -> None:
        a = self.args
        print()
        if a.state is not None:
            c = r["coordinator"]
            coordinator = f"{c['host']}:{c['port']} ({c['id']})" if c else "-"
            lines = _table(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                           [[r["group"], coordinator, r["assignment_strategy"] or "-", r["state"], len(r["members"])]])
        elif a.members:
            if not r["members"]:
                print(f"Consumer group '{r['group']}' has no active members.")
                return
            header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"] + (["ASSIGNMENT"] if a.verbose else [])
            rows = []
            for m in r["members"]:
                row = [r["group"], m["consumer_id"], m["host"], m["client_id"], len(m["partitions"])]
                if a.verbose:
                    by_topic: dict[str, list[str]] = {}
                    for tp in m["partitions"]:
                        by_topic.setdefault(tp["topic"], []).append(str(tp["partition"]))
                    row.append(",".join(f"{t}({','.join(ps)})" for t, ps in by_topic.items()) or "-")
                rows.append(row)
            lines = _table(header, rows)
        else:
            if not r["members"]:
                print(f"Consumer group '{r['group']}' has no active members.")
                print()
            rows = [[r["group"], o["topic"], o["partition"], o["current_offset"], o["log_end_offset"], o["lag"],
                     o["consumer_id"], o["host"], o["client_id"]] for o in r["offsets"]]
            # members without partitions are listed too, as kafka-consumer-groups does
            owners = {o["consumer_id"] for o in r["offsets"]}
            rows += [[r["group"], None, None, None, None, None, m["consumer_id"], m["host"], m["client_id"]]
                     for m in r["members"] if m["consumer_id"] not in owners]
            lines = _table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"], rows)
        for line in lines:
            print(line)

    # --- reset ----------------------------------------------------------------------------

    def _reset_partitions(self, group_id: str, metadata, committed: dict[tuple[str, int], int]) -> list[tuple[str, int]]:
        if self.args.all_topics:
            return sorted(committed)
        partitions = []
        for item in self.args.topic:
            name, wanted = _parse_topic(item)
            tm = metadata.topics.get(name)
            if tm is None or tm.error is not None:
                raise GroupCommandError(f"Topic '{name}' does not exist.")
            if wanted is None:
                wanted = sorted(tm.partitions)
            unknown = [p for p in wanted if p not in tm.partitions]
            if unknown:
                raise GroupCommandError(f"Topic '{name}' has no partition {','.join(map(str, unknown))} (it has {len(tm.partitions)}).")
            partitions += [(name, p) for p in wanted]
        return sorted(set(partitions))

    def _plan(self, group_id: str, partitions: list[tuple[str, int]], committed: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        from confluent_kafka.admin import OffsetSpec

        a = self.args
        if not partitions:
            return {}
        if a.to_earliest:
            return self._list_offsets({tp: OffsetSpec.earliest() for tp in partitions}, "earliest")
        latest = self._list_offsets({tp: OffsetSpec.latest() for tp in partitions}, "log end")
        if a.to_latest:
            return latest
        earliest = self._list_offsets({tp: OffsetSpec.earliest() for tp in partitions}, "earliest")

        def clamp(tp: tuple[str, int], offset: int) -> int:
            return min(max(offset, earliest[tp]), latest[tp])

        if a.to_offset is not None:
            return {tp: clamp(tp, a.to_offset) for tp in partitions}
        if a.to_current or a.shift_by is not None:
            missing = [tp for tp in partitions if tp not in committed]
            if missing:
                names = ", ".join(f"{t}-{p}" for t, p in missing)
                raise GroupCommandError(f"Cannot shift offsets of group '{group_id}' for {names}: there is no committed offset.")
            return {tp: clamp(tp, committed[tp] + (a.shift_by or 0)) for tp in partitions}
        by_time = self._list_offsets({tp: OffsetSpec.for_timestamp(a.to_datetime_ms) for tp in partitions}, "timestamp")
        # no record at or after the time: the end of the log, as kafka-consumer-groups does
        return {tp: by_time[tp] if by_time[tp] >= 0 else latest[tp] for tp in partitions}

    def reset_offsets(self) -> int:
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        a = self.args
        group_ids = self._group_ids()
        metadata = self._metadata()
        descriptions = self._describe(group_ids)
        reports = []
        for gid in group_ids:
            state = _state_name(descriptions[gid].state)
            if state not in ("Empty", "Dead"):
                raise GroupCommandError(f"Assignments can only be reset if the group '{gid}' is inactive, but the current state is {state}.")
            committed = self._committed(gid)
            plan = self._plan(gid, self._reset_partitions(gid, metadata, committed), committed)
            if a.execute and plan:
                request = ConsumerGroupTopicPartitions(gid, [TopicPartition(t, p, off) for (t, p), off in sorted(plan.items())])
                futures = self.admin.alter_consumer_group_offsets([request], request_timeout=self.timeout_s)
                result = self._wait(futures[gid], f"commit the new offsets of group '{gid}'")
                failed = [f"{tp.topic}-{tp.partition}: {tp.error.str()}" for tp in result.topic_partitions or [] if tp.error is not None]
                if failed:
                    raise GroupCommandError(f"Could not reset the offsets of group '{gid}': " + "; ".join(failed))
            reports.append({"group": gid, "executed": bool(a.execute),
                            "offsets": [{"topic": t, "partition": p, "new_offset": off} for (t, p), off in sorted(plan.items())]})
        if a.json:
            self._print_json(reports)
            return 0
        if not a.execute and not a.dry_run:
            print("WARN: No action will be performed as the --execute option is missing. "
                  "In a future major release, the default behavior of this command will be to prompt the user before executing "
                  "the reset rather than doing a dry run. You should add the --dry-run option explicitly if you are scripting this command "
                  "and want to keep the current default behavior without prompting.", file=sys.stderr)
        rows = [[r["group"], o["topic"], o["partition"], o["new_offset"]] for r in reports for o in r["offsets"]]
        print()
        for line in _table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows):
            print(line)
        return 0

    # --- delete ---------------------------------------------------------------------------

    def delete(self) -> int:
        a = self.args
        group_ids = self._group_ids()
        if not group_ids:
            raise GroupCommandError("There are no consumer groups to delete.")
        futures = self.admin.delete_consumer_groups(group_ids, request_timeout=self.timeout_s)
        deleted, failed = [], {}
        for gid in group_ids:
            try:
                futures[gid].result(timeout=self.timeout_s + 5)
                deleted.append(gid)
            except FutureTimeoutError:
                failed[gid] = f"no answer within {self.timeout_s:g} s"
            except Exception as e:  # noqa: BLE001 - reported per group, as kafka-consumer-groups does
                failed[gid] = _kafka_message(e)
        if a.json:
            self._print_json({"deleted": deleted, "failed": failed})
        elif deleted:
            print("Deletion of requested consumer groups (" + ", ".join(f"'{g}'" for g in deleted) + ") was successful.")
        if failed:
            lines = "\n".join(f"* Group '{g}' could not be deleted due to: {msg}" for g, msg in failed.items())
            print(f"Error: Deletion of some consumer groups failed:\n{lines}", file=sys.stderr)
            return 1
        return 0

    def delete_offsets(self) -> int:
        a = self.args
        gid = a.group[0]
        metadata = self._metadata()
        wanted: list[tuple[str, int]] = []
        for item in a.topic:
            name, parts = _parse_topic(item)
            tm = metadata.topics.get(name)
            if parts is None:
                if tm is None or tm.error is not None:
                    raise GroupCommandError(f"Topic '{name}' does not exist.")
                parts = sorted(tm.partitions)
            wanted += [(name, p) for p in parts]
        error, results = _OffsetDeleteClient(self.bootstrap, self.timeout_s).delete(gid, wanted)
        if error:
            raise GroupCommandError(f"Deletion of offsets of group '{gid}' failed: {error}")
        ok = all(code == "NONE" for code in results.values())
        if a.json:
            self._print_json({"group": gid, "partitions": [{"topic": t, "partition": p, "error": None if c == "NONE" else c}
                                                           for (t, p), c in sorted(results.items())]})
        else:
            topics = ",".join(sorted({t for t, _ in results}))
            print(f"Request succeed for deleting offsets with topic {topics} group {gid}" if ok
                  else f"Request failed for deleting offsets with topic {topics} group {gid}")
            print()
            rows = [[t, p, "Successful" if c == "NONE" else f"Error: {c}"] for (t, p), c in sorted(results.items())]
            for line in _table(["TOPIC", "PARTITION", "STATUS"], rows):
                print(line)
        return 0 if ok else 1


class _OffsetDeleteClient:
    """OffsetDelete (47) over a plain Kafka protocol connection: FindCoordinator, then the request."""

    FIND_COORDINATOR_VERSION = 2
    OFFSET_DELETE_VERSION = 0

    def __init__(self, bootstrap: str, timeout_s: float) -> None:
        self.bootstrap = [b.strip() for b in bootstrap.split(",") if b.strip()]
        self.timeout_s = timeout_s
        self.correlation_id = 0

    def _request(self, address: str, api_key: int, version: int, body: dict):
        from logbus.protocol.codec import decode_response, encode_request

        host, port = address.rsplit(":", 1)
        self.correlation_id += 1
        with socket.create_connection((host.strip("[]"), int(port)), timeout=self.timeout_s) as sock:
            sock.sendall(encode_request(api_key, version, self.correlation_id, body, client_id="logbus-groups"))
            (size,) = struct.unpack(">i", self._recv(sock, 4))
            return decode_response(self._recv(sock, size), api_key, version)

    @staticmethod
    def _recv(sock: socket.socket, n: int) -> bytes:
        chunks = []
        while n:
            chunk = sock.recv(n)
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _coordinator(self, group_id: str) -> str:
        last = None
        for address in self.bootstrap:
            try:
                resp = self._request(address, 10, self.FIND_COORDINATOR_VERSION, {"key": group_id, "key_type": 0})
            except OSError as e:
                last = e
                continue
            if _code_name(resp.error_code) != "NONE":
                raise GroupCommandError(f"could not find the coordinator of group '{group_id}': {_code_name(resp.error_code)}")
            return f"{resp.host}:{resp.port}"
        raise GroupCommandError(f"could not reach {','.join(self.bootstrap)} within {self.timeout_s:g} s: {last}")

    def delete(self, group_id: str, partitions: list[tuple[str, int]]) -> tuple[str | None, dict[tuple[str, int], str]]:
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        body = {"group_id": group_id, "topics": [{"name": t, "partitions": [{"partition_index": p} for p in ps]} for t, ps in by_topic.items()]}
        coordinator = self._coordinator(group_id)
        try:
            resp = self._request(coordinator, 47, self.OFFSET_DELETE_VERSION, body)
        except OSError as e:
            raise GroupCommandError(f"could not reach the coordinator {coordinator}: {e}") from None
        error = _code_name(resp.error_code)
        if error != "NONE":
            return error, {}
        return None, {(t.name, p.partition_index): _code_name(p.error_code) for t in resp.topics for p in t.partitions}


def _code_name(code: Any) -> str:
    name = getattr(code, "name", None)
    return name.upper() if name else str(code)

