"""The `logbus` command."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from logbus.cli_cluster import add_cluster_parser
from logbus.cli_deliver import add_deliver_parser
from logbus.cli_gateway import add_gateway_parser
from logbus.cli_groups import add_groups_parser
from logbus.cli_produce import add_produce_parser
from logbus.cli_leader_election import add_leader_election_parser
from logbus.cli_topics import add_topics_parser


def _broker_command(args: argparse.Namespace) -> int:
    from logbus.broker.config import BrokerConfig

    try:
        config = BrokerConfig.load(
            Path(args.config) if args.config else None,
            broker_id=args.broker_id,
            listen=args.listen,
            advertised=args.advertised,
            data_dir=args.data_dir,
            rack=args.rack,
            metadata=args.metadata,
            auto_create_topics=args.auto_create_topics,
        )
    except (OSError, ValueError) as e:
        print(f"logbus broker: {e}", file=sys.stderr)
        return 2
    _install_event_loop()
    from logbus.cluster.node import run_node

    asyncio.run(run_node(config))
    return 0


def _install_event_loop() -> None:
    try:
        import uvloop
    except ImportError:  # uvloop is optional where it does not build
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="logbus", description="logbus: carries data from servers to the data lake over the Kafka protocol.")
    parser.add_argument("--log-level", default="INFO", help="logging level (DEBUG, INFO, WARNING, ERROR)")
    sub = parser.add_subparsers(dest="command", required=True)

    b = sub.add_parser("broker", help="run a broker", description="Run a logbus broker. Settings: defaults < --config TOML file < LOGBUS_* environment < flags.")
    b.add_argument("--config", metavar="FILE", help="TOML file with broker settings")
    b.add_argument("--broker-id", type=int, help="id of this broker (default 0)")
    b.add_argument("--listen", metavar="HOST:PORT", help="address to listen on (default 127.0.0.1:9092)")
    b.add_argument("--advertised", metavar="HOST:PORT", help="address given to clients (default: --listen)")
    b.add_argument("--data-dir", metavar="DIR", help="where logs and metadata live (default ./logbus-data)")
    b.add_argument("--rack", help="rack or region of this broker")
    b.add_argument("--metadata", metavar="URL", help="metadata store: local:///path/metadata.db or zk://host:port/chroot (default local://DATA_DIR/metadata.db)")
    b.add_argument("--auto-create-topics", action=argparse.BooleanOptionalAction, default=None, help="create topics clients ask for (default off)")
    b.set_defaults(func=_broker_command)

    add_topics_parser(sub)
    add_groups_parser(sub)
    add_deliver_parser(sub)
    add_gateway_parser(sub)
    add_produce_parser(sub)
    add_cluster_parser(sub)
    add_leader_election_parser(sub)

    d = sub.add_parser("demo", help="the embedded default: a broker with a demo producer and consumer", description="Start an embedded broker, produce records with confluent-kafka, consume them back and check every one.")
    d.add_argument("--records", type=int, default=200_000, help="records to produce and consume (default 200000)")
    d.add_argument("--partitions", type=int, default=8, help="partitions of the demo topic (default 8)")
    d.add_argument("--data-dir", metavar="DIR", help="broker data directory (default: a temporary directory)")
    d.add_argument("--json", action="store_true", help="print the result as JSON")
    d.set_defaults(func=lambda a: __import__("logbus.demo", fromlist=["run"]).run(a))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return args.func(args) or 0


if __name__ == "__main__":
    sys.exit(main())
