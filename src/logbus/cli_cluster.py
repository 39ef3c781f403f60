"""`logbus cluster`: start an embedded cluster of broker processes on this host, and report a cluster's health.

`logbus cluster up` runs N `logbus broker` processes sharing one metadata store, waits (bounded)
until every broker is live, prints the bootstrap servers and stays in the foreground; Ctrl-C or
SIGTERM stops the brokers cleanly. `logbus cluster status` asks any Kafka-protocol cluster for its
brokers and the partitions that are offline, under-replicated or under min.insync.replicas.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logbus.cli_topics import (
    DEFAULT_BOOTSTRAP,
    PLACEMENT_CONFIG,
    TIMEOUT_S,
    TopicCommandError,
    describe_topic_configs,
    observers_of,
    placement_racks,
)

POLL_S = 0.25
PREFIX = "logbus cluster: "


class ClusterCommandError(Exception):
    """Reported as one line on stderr, exit status 1."""


def add_cluster_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    c = subparsers.add_parser(
        "cluster",
        help="start an embedded cluster of brokers on this host, or report a cluster's health",
        description="Start an embedded cluster of broker processes on this host (up), or report a cluster's health (status).",
    )
    sub = c.add_subparsers(dest="cluster_command", required=True)

    up = sub.add_parser(
        "up",
        help="start N brokers on this host sharing one metadata store; Ctrl-C stops them",
        description=(
            "Start N `logbus broker` processes on 127.0.0.1 ports P..P+N-1 sharing one metadata store, wait until all are "
            "live, print the bootstrap servers and stay in the foreground. Ctrl-C or SIGTERM stops every broker cleanly. "
            "Broker i keeps its data in DIR/broker-i, its log in DIR/broker-i.log and its pid in DIR/broker-i.pid; "
            "DIR/cluster.json describes the running cluster."
        ),
    )
    up.add_argument("--brokers", type=int, default=3, metavar="N", help="number of brokers (default 3)")
    up.add_argument("--racks", metavar="R1,R2,...", help="racks (or regions); broker i gets rack i mod the number of racks (default: no racks)")
    up.add_argument("--dir", default="./logbus-cluster", metavar="DIR", help="directory for data, logs and pid files (default ./logbus-cluster)")
    up.add_argument("--port", type=int, default=9092, metavar="P", help="port of broker 0; broker i listens on P+i (default 9092)")
    up.add_argument("--metadata", metavar="URL", help="metadata store: zk://host:port/chroot or local:///path/metadata.db (default local://DIR/metadata.db)")
    up.add_argument("--config", metavar="FILE", help="TOML file of broker settings applied to every broker")
    up.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS", help="how long to wait for all brokers to be live (default 60)")
    up.add_argument("--stop-timeout", type=float, default=20.0, metavar="SECONDS", help="how long brokers get to stop after SIGTERM before SIGKILL (default 20)")
    up.add_argument("--json", action="store_true", help="print events as JSON lines (the first one when the cluster is up)")
    up.set_defaults(func=lambda args: _run(lambda: cluster_up(args, up)))

    st = sub.add_parser(
        "status",
        help="brokers, controller and unhealthy partitions of a cluster",
        description="Show the cluster id, the controller, the live brokers with their racks, and the partitions that are "
        "offline (no leader), under-replicated (ISR smaller than the synchronous replicas) or under min.insync.replicas.",
    )
    st.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT",
        default=os.environ.get("LOGBUS_BOOTSTRAP_SERVERS") or DEFAULT_BOOTSTRAP,
        help=f"broker(s) to connect to (default: $LOGBUS_BOOTSTRAP_SERVERS, else {DEFAULT_BOOTSTRAP})",
    )
    st.add_argument("--json", action="store_true", help="print machine-readable JSON")
    st.set_defaults(func=lambda args: _run(lambda: cluster_status(args)))
    return c


def _run(action) -> int:
    try:
        return action()
    except ClusterCommandError as e:
        print(PREFIX + str(e), file=sys.stderr)
        return 1


def _admin(bootstrap: str, timeout: float = TIMEOUT_S):
    from confluent_kafka.admin import AdminClient

    return AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "socket.timeout.ms": int(timeout * 1000),
            "socket.connection.setup.timeout.ms": int(timeout * 1000),
            "log_level": 0,  # refused connections are expected while brokers start; the command reports what matters
        }
    )


def _kafka_message(exc: BaseException) -> str:
    from logbus.cli_topics import _kafka_message as message

    return message(exc)


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    cells = [header] + [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return [" ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]


def _ids(values: list[int]) -> str:
    return ",".join(str(v) for v in values)


# --- cluster up ------------------------------------------------------------------------------


@dataclass
class _Member:
    broker_id: int
    rack: str | None
    port: int
    data_dir: Path
    log_path: Path
    pid_path: Path
    argv: list[str]
    proc: subprocess.Popen | None = None
    reported_exit: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def user_command(self) -> str:
        """The same broker as a user would start it again by hand."""
        return shlex.join(["logbus", *self.argv[3:]])

    def describe(self) -> dict:
        return {
            "id": self.broker_id,
            "address": self.address,
            "rack": self.rack,
            "pid": self.proc.pid if self.proc else None,
            "data_dir": str(self.data_dir),
            "log": str(self.log_path),
            "pid_file": str(self.pid_path),
            "command": self.user_command(),
        }


def _child_setup() -> None:  # pragma: no cover - runs in the child between fork and exec
    os.setpgid(0, 0)  # Ctrl-C in a terminal reaches `cluster up` only; it stops the brokers itself
    if sys.platform.startswith("linux"):
        try:  # if `cluster up` itself dies (even by SIGKILL), the kernel sends its brokers SIGTERM
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except Exception:  # noqa: BLE001 - best effort
            pass


def _check_up_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[str | None]:
    if args.brokers < 1:
        parser.error("--brokers must be at least 1")
    if not 1 <= args.port or args.port + args.brokers - 1 > 65535:
        parser.error(f"--port {args.port} with {args.brokers} brokers leaves the port range")
    if args.timeout <= 0 or args.stop_timeout <= 0:
        parser.error("--timeout and --stop-timeout must be positive")
    racks: list[str | None] = [None]
    if args.racks is not None:
        racks = [r.strip() for r in args.racks.split(",")]
        if not all(racks):
            parser.error(f"--racks must be a comma-separated list of rack names, not {args.racks!r}")
    if args.metadata is not None and not args.metadata.startswith(("local://", "zk://")):
        parser.error(f"--metadata must be local:///path/metadata.db or zk://host:port/chroot, not {args.metadata!r}")
    return racks


def _port_in_use(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _members(args: argparse.Namespace, racks: list[str | None], root: Path, metadata: str) -> list[_Member]:
    from logbus.broker.config import BrokerConfig

    members = []
    for i in range(args.brokers):
        rack = racks[i % len(racks)]
        data_dir = root / f"broker-{i}"
        argv = [sys.executable, "-m", "logbus.cli", "broker", "--broker-id", str(i), "--listen", f"127.0.0.1:{args.port + i}",
                "--data-dir", str(data_dir), "--metadata", metadata]
        if rack is not None:
            argv += ["--rack", rack]
        if args.config:
            argv += ["--config", str(Path(args.config).resolve())]
        try:  # the same settings the broker will load: a bad file is reported once, before anything starts
            BrokerConfig.load(Path(args.config) if args.config else None, broker_id=i, listen=f"127.0.0.1:{args.port + i}",
                              data_dir=data_dir, rack=rack, metadata=metadata)
        except (OSError, ValueError) as e:
            raise ClusterCommandError(f"bad broker settings in {args.config}: {e}") from None
        members.append(_Member(i, rack, args.port + i, data_dir, root / f"broker-{i}.log", root / f"broker-{i}.pid", argv))
    return members


def _signal_name(returncode: int | None) -> str:
    if returncode is None:
        return "running"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join("    " + line for line in text.splitlines()[-lines:])


class _Cluster:
    def __init__(self, args: argparse.Namespace, members: list[_Member], root: Path, metadata: str) -> None:
        self.args = args
        self.members = members
        self.root = root
        self.metadata = metadata
        self.stop_requested: int | None = None  # the signal that asked us to stop

    @property
    def bootstrap(self) -> str:
        return ",".join(m.address for m in self.members)

    def _emit(self, event: dict, human: str, err: bool = False) -> None:
        if self.args.json:
            print(json.dumps(event), flush=True)
        else:
            print(human, file=sys.stderr if err else sys.stdout, flush=True)

    def _on_signal(self, signum, frame) -> None:  # noqa: ARG002
        self.stop_requested = signum

    def start(self) -> None:
        for m in self.members:
            m.data_dir.mkdir(parents=True, exist_ok=True)
            with open(m.log_path, "ab") as log:
                log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} logbus cluster up: {m.user_command()}\n".encode())
                log.flush()
                m.proc = subprocess.Popen(m.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                          preexec_fn=_child_setup, close_fds=True)
            m.pid_path.write_text(f"{m.proc.pid}\n")

    def _exited_during_start(self) -> _Member | None:
        return next((m for m in self.members if m.proc and m.proc.poll() is not None), None)

    def wait_until_live(self) -> dict:
        """Bounded wait until DescribeCluster lists every broker and a controller; returns what it said."""
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        admin = _admin(self.bootstrap, timeout=2.0)
        want = {m.broker_id for m in self.members}
        deadline = time.monotonic() + self.args.timeout
        last_error = "no answer yet"
        console = Console(stderr=True)
        with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console, transient=True, disable=self.args.json or not console.is_terminal) as progress:
            task = progress.add_task("brokers live", total=len(want))
            while True:
                if self.stop_requested is not None:
                    return {}
                dead = self._exited_during_start()
                if dead is not None:
                    raise ClusterCommandError(
                        f"broker {dead.broker_id} exited during start ({_signal_name(dead.proc.returncode)}); "
                        f"its log is {dead.log_path}:\n{_tail(dead.log_path)}"
                    )
                try:
                    desc = admin.describe_cluster(request_timeout=2.0).result(timeout=3.0)
                    live = {n.id for n in desc.nodes}
                    progress.update(task, completed=len(live & want))
                    controller = lease_holder(self.bootstrap) if want <= live else None
                    if controller is not None:
                        return {"cluster_id": desc.cluster_id, "controller": controller, "live": sorted(live)}
                    missing = sorted(want - live)
                    last_error = f"brokers {_ids(missing)} not live yet" if missing else "no controller yet"
                except Exception as e:  # noqa: BLE001 - the brokers are still starting
                    last_error = _kafka_message(e)
                if time.monotonic() >= deadline:
                    raise ClusterCommandError(
                        f"the brokers were not all live within {self.args.timeout:g} s ({last_error}); "
                        f"their logs are {self.root}/broker-*.log"
                    )
                time.sleep(POLL_S)

    def announce(self, info: dict) -> None:
        cluster_json = {
            "bootstrap_servers": self.bootstrap,
            "cluster_id": info.get("cluster_id"),
            "controller": info.get("controller"),
            "metadata": self.metadata,
            "dir": str(self.root),
            "cluster_pid": os.getpid(),
            "brokers": [m.describe() for m in self.members],
        }
        (self.root / "cluster.json").write_text(json.dumps(cluster_json, indent=2) + "\n")
        if self.args.json:
            print(json.dumps({"event": "up", **cluster_json}), flush=True)
            return
        print(f"{len(self.members)} brokers are up (cluster id {info.get('cluster_id')}, controller {info.get('controller')}).")
        rows = [[m.broker_id, m.address, m.rack, m.proc.pid, m.log_path] for m in self.members]
        for line in _table(["ID", "ADDRESS", "RACK", "PID", "LOG"], rows):
            print("  " + line)
        print(f"Metadata store: {self.metadata}")
        print(f"Cluster description: {self.root / 'cluster.json'}")
        print(f"Bootstrap servers: {self.bootstrap}")
        print("Press Ctrl-C to stop the cluster.", flush=True)

    def watch(self) -> None:
        """Stay in the foreground until asked to stop; report brokers that die on their own."""
        while self.stop_requested is None:
            for m in self.members:
                if not m.reported_exit and m.proc.poll() is not None:
                    m.reported_exit = True
                    self._emit(
                        {"event": "broker_exited", "id": m.broker_id, "pid": m.proc.pid, "returncode": m.proc.returncode,
                         "log": str(m.log_path), "command": m.user_command()},
                        f"{PREFIX}broker {m.broker_id} (pid {m.proc.pid}) exited unexpectedly ({_signal_name(m.proc.returncode)}); "
                        f"its log is {m.log_path}. The other brokers keep running. Start it again with:\n  {m.user_command()}",
                        err=True,
                    )
            if all(m.reported_exit for m in self.members):
                self._emit({"event": "all_brokers_exited"}, f"{PREFIX}every broker has exited; stopping.", err=True)
                return
            time.sleep(POLL_S)

    def stop(self) -> list[dict]:
        """SIGTERM every running broker, wait (bounded), SIGKILL what is left."""
        running = [m for m in self.members if m.proc and m.proc.poll() is None]
        if running and not self.args.json:
            print(f"Stopping {len(running)} broker(s)...", file=sys.stderr, flush=True)
        for m in running:
            try:
                m.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + self.args.stop_timeout
        for m in running:
            try:
                m.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                m.extra["killed"] = True
                m.proc.kill()
                m.proc.wait(timeout=10)
        report = []
        for m in self.members:
            if m.proc is None:
                continue
            if m.proc.poll() is None:  # pragma: no cover - SIGKILL did not take
                m.proc.kill()
                m.proc.wait(timeout=10)
            try:
                m.pid_path.unlink()
            except FileNotFoundError:
                pass
            report.append({"id": m.broker_id, "pid": m.proc.pid, "returncode": m.proc.returncode,
                           "killed_after_timeout": bool(m.extra.get("killed")), "stopped_by_us": m in running})
        for r in report:
            if r["killed_after_timeout"]:
                print(f"{PREFIX}broker {r['id']} did not stop within {self.args.stop_timeout:g} s; killed it (SIGKILL)", file=sys.stderr, flush=True)
        try:
            (self.root / "cluster.json").unlink()
        except FileNotFoundError:
            pass
        return report


def cluster_up(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    racks = _check_up_args(args, parser)
    root = Path(args.dir).resolve()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ClusterCommandError(f"cannot create {root}: {e.strerror or e}") from None
    metadata = args.metadata or f"local://{root / 'metadata.db'}"
    busy = [p for p in range(args.port, args.port + args.brokers) if _port_in_use(p)]
    if busy:
        raise ClusterCommandError(f"port(s) {_ids(busy)} on 127.0.0.1 are in use; choose another --port")
    members = _members(args, racks, root, metadata)

    cluster = _Cluster(args, members, root, metadata)
    previous = {sig: signal.signal(sig, cluster._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        cluster.start()
        if not args.json:
            print(f"Starting {len(members)} brokers; their logs are {root}/broker-<id>.log", file=sys.stderr, flush=True)
        try:
            info = cluster.wait_until_live()
        except ClusterCommandError:
            cluster.stop()
            raise
        if cluster.stop_requested is None:
            cluster.announce(info)
            cluster.watch()
        report = cluster.stop()
        if args.json:
            print(json.dumps({"event": "stopped", "brokers": report}), flush=True)
        else:
            print("Stopped the cluster.", file=sys.stderr, flush=True)
        return 0
    finally:
        for m in members:  # whatever happened, no broker outlives the command
            if m.proc is not None and m.proc.poll() is None:
                m.proc.kill()
                m.proc.wait(timeout=10)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# --- cluster status --------------------------------------------------------------------------


def cluster_status(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource, ResourceType

    bootstrap = args.bootstrap_server
    admin = _admin(bootstrap)
    try:
        desc = admin.describe_cluster(request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S + 5)
        metadata = admin.list_topics(timeout=TIMEOUT_S)
    except KafkaException as e:
        raise ClusterCommandError(
            f"could not reach {bootstrap} within {TIMEOUT_S:g} s (is the cluster running?): {_kafka_message(e)}"
        ) from None
    except Exception as e:  # noqa: BLE001 - a timeout of the future
        raise ClusterCommandError(f"no answer from {bootstrap}: {_kafka_message(e)}") from None

    racks = {n.id: n.rack for n in desc.nodes}
    live = set(racks) | set(metadata.brokers)
    names = sorted(metadata.topics)
    configs: dict[str, dict[str, Any]] = {}
    if names:
        try:
            configs = describe_topic_configs(lambda: _admin(bootstrap), [ConfigResource(ResourceType.TOPIC, n) for n in names],
                                             tolerate_errors=True)
        except TopicCommandError as e:
            raise ClusterCommandError(f"could not describe the topic configs: {e}") from None

    topics = []
    problems = []
    totals = {"topics": len(names), "partitions": 0, "offline": 0, "under_replicated": 0, "under_min_isr": 0}
    for name in names:
        tm = metadata.topics[name]
        entries = configs.get(name, {})
        min_isr_entry = entries.get("min.insync.replicas")
        min_isr = int(min_isr_entry.value) if min_isr_entry is not None and str(min_isr_entry.value).isdigit() else None
        placement_entry = entries.get(PLACEMENT_CONFIG)
        placement = placement_racks(placement_entry.value if placement_entry is not None else None)
        t = {"topic": name, "partitions": len(tm.partitions), "min_insync_replicas": min_isr,
             "offline": [], "under_replicated": [], "under_min_isr": []}
        for pid in sorted(tm.partitions):
            pm = tm.partitions[pid]
            replicas, isr = list(pm.replicas), list(pm.isrs)
            observers = observers_of(replicas, placement, racks)
            sync = [r for r in replicas if r not in observers]
            states = []
            if pm.leader < 0 or pm.leader not in live:
                t["offline"].append(pid)
                states.append("offline")
            if len([r for r in isr if r not in observers]) < len(sync):
                t["under_replicated"].append(pid)
                states.append("under-replicated")
            if min_isr is not None and len(isr) < min_isr:
                t["under_min_isr"].append(pid)
                states.append("under-min-isr")
            totals["partitions"] += 1
            if states:
                problems.append({
                    "topic": name, "partition": pid, "leader": pm.leader if pm.leader >= 0 else None,
                    "replicas": replicas, "isr": isr, "observers": observers,
                    "offline_replicas": [r for r in replicas if r not in live],
                    "min_insync_replicas": min_isr, "states": states,
                })
        for key in ("offline", "under_replicated", "under_min_isr"):
            totals[key] += len(t[key])
        topics.append(t)

    controller = lease_holder(args.bootstrap_server)
    brokers = [{"id": n.id, "host": n.host, "port": n.port, "rack": n.rack} for n in sorted(desc.nodes, key=lambda n: n.id)]
    if args.json:
        print(json.dumps({"cluster_id": desc.cluster_id, "controller": controller, "brokers": brokers,
                          "topics": topics, "unhealthy_partitions": problems, "summary": totals}, indent=2))
        return 0

    print(f"Cluster id: {desc.cluster_id}")
    print(f"Controller: {'none' if controller is None else controller}")
    print(f"Live brokers: {len(brokers)}")
    rows = [[b["id"], f"{b['host']}:{b['port']}", b["rack"], "yes" if b["id"] == controller else ""] for b in brokers]
    for line in _table(["ID", "ADDRESS", "RACK", "CONTROLLER"], rows):
        print("  " + line)
    print(
        f"Partitions: {totals['partitions']} in {totals['topics']} topic(s); {totals['offline']} offline, "
        f"{totals['under_replicated']} under-replicated, {totals['under_min_isr']} under min.insync.replicas"
    )
    if problems:
        rows = [[p["topic"], p["partition"], "none" if p["leader"] is None else p["leader"], _ids(p["replicas"]),
                 _ids(p["isr"]), _ids(p["observers"]), _ids(p["offline_replicas"]), p["min_insync_replicas"], ",".join(p["states"])]
                for p in problems]
        for line in _table(["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "OBSERVERS", "OFFLINE", "MIN.ISR", "STATE"], rows):
            print("  " + line)
    else:
        print("Every partition has a leader and a full ISR.")
    return 0


def lease_holder(bootstrap: str, timeout: float = 5.0) -> int | None:
    """The broker holding the controller lease (DescribeCluster v1, controllers endpoint), asked of
    the first broker of `bootstrap` that answers. Kafka clients' own "controller" is whichever live
    broker serves admin requests; this is the one that elects leaders."""
    import struct

    from logbus.protocol.codec import decode_response, encode_request

    request = encode_request(60, 1, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 2}, client_id="logbus-cli")
    for address in bootstrap.split(","):
        host, _, port = address.strip().rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as conn:
                conn.sendall(request)
                head = _recv_exactly(conn, 4)
                frame = _recv_exactly(conn, struct.unpack(">i", head)[0])
        except (OSError, ValueError):
            continue
        resp = decode_response(frame, 60, 1)
        return resp.controller_id if resp.error_code == 0 and resp.controller_id >= 0 else None
    return None


def _recv_exactly(conn: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = conn.recv(n)
        if not chunk:
            raise OSError("connection closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)
