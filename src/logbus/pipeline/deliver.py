"""The delivery job (`logbus deliver`)."""

from __future__ import annotations

import argparse
import sys


def run_deliver(args: argparse.Namespace) -> int:
    print("logbus deliver: the delivery job is not built yet", file=sys.stderr)
    return 2
