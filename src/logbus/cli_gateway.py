"""`logbus gateway`: the HTTP gateway (see logbus.gateway). Settings: defaults < --config TOML <
LOGBUS_GATEWAY_* environment < flags."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path


def add_gateway_parser(sub: argparse._SubParsersAction) -> None:
    g = sub.add_parser(
        "gateway",
        help="run the HTTP gateway: write sessions, batch transactions, read API",
        description="Run the logbus HTTP gateway in front of a Kafka-protocol cluster. Settings: defaults < --config "
                    "TOML file < LOGBUS_GATEWAY_* environment < flags.",
    )
    g.add_argument("--config", metavar="FILE", help="TOML file with gateway settings")
    g.add_argument("--listen", metavar="HOST:PORT", help="address of the HTTP API (default 127.0.0.1:8080)")
    g.add_argument("--bootstrap-server", dest="bootstrap_servers", metavar="HOST:PORT[,...]", help="Kafka bootstrap servers (default 127.0.0.1:9092)")
    g.add_argument("--data-dir", metavar="DIR", help="durable files of the gateway (default ./logbus-gateway)")
    g.add_argument("--dc", help="data centre of this gateway: the physical topic prefix (default dc1)")
    g.add_argument("--store", metavar="URL", help="state store: sqlite:///path/gateway.db (gateways of one host) or zk://host:port[,host:port]/chroot (several hosts)")
    g.add_argument("--gateway-id", help="name of this gateway in the store")
    g.add_argument("--advertised-url", metavar="URL", help="URL other gateways use to reach this one")
    g.add_argument("--workers", type=int, metavar="N", help="worker processes sharing the listen address, about one core each (default 1)")
    g.add_argument("--tls-cert", metavar="PEM", help="certificate file (HTTPS with --tls-key)")
    g.add_argument("--tls-key", metavar="PEM", help="private key file")
    g.set_defaults(func=_gateway_command)


def _gateway_command(args: argparse.Namespace) -> int:
    from logbus.gateway.config import GatewayConfig

    try:
        config = GatewayConfig.load(
            Path(args.config) if args.config else None,
            listen=args.listen, bootstrap_servers=args.bootstrap_servers, data_dir=args.data_dir, dc=args.dc,
            store=args.store, gateway_id=args.gateway_id, advertised_url=args.advertised_url,
            tls_cert=args.tls_cert, tls_key=args.tls_key, workers=args.workers,
        )
    except (OSError, ValueError) as e:
        print(f"logbus gateway: {e}", file=sys.stderr)
        return 2
    from logbus.gateway.workers import run_workers, worker_index

    worker = worker_index()
    if worker is None and config.workers > 1:
        return run_workers(config, sys.argv[1:])
    if worker is not None:
        config = config.for_worker(worker)
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    from logbus.gateway.server import run_gateway

    try:
        asyncio.run(run_gateway(config, worker))
    except (RuntimeError, ConnectionError) as e:  # ConnectionError: the state store cannot be reached
        print(f"logbus gateway: {e}", file=sys.stderr)
        return 1
    return 0
