"""`logbus deliver`: the delivery job from the bus into the lake (see logbus.pipeline.deliver)."""

from __future__ import annotations

import argparse


def add_deliver_parser(sub: argparse._SubParsersAction) -> None:
    from logbus.pipeline.deliver_args import add_deliver_arguments

    p = sub.add_parser(
        "deliver",
        help="deliver topics into lake tables with Spark, exactly once",
        description=(
            "Read topics from the bus with Spark, keep batch transactions whose commit marker arrived "
            "within the window, drop repeated (source, seqno) pairs, and write lake tables partitioned "
            "by date and log type, exactly once across restarts (Parquet through Spark's file sink, or Delta Lake)."
        ),
    )
    add_deliver_arguments(p)
    p.set_defaults(func=_deliver_command)


def _deliver_command(args: argparse.Namespace) -> int:
    from logbus.pipeline.deliver import run_deliver

    return run_deliver(args)
