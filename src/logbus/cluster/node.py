"""A broker process in a cluster: metadata store, control plane, broker and controller together."""

from __future__ import annotations

import asyncio
import logging
import signal

from logbus.broker.broker import Broker
from logbus.broker.config import BrokerConfig
from logbus.cluster.control import ControlPlane
from logbus.cluster.controller import Controller
from logbus.cluster.store import open_store

log = logging.getLogger(__name__)


async def run_node(config: BrokerConfig) -> None:
    """Run until SIGTERM or SIGINT, then shut down cleanly (logs flushed, registration withdrawn)."""
    config.data_dir.mkdir(parents=True, exist_ok=True)
    store = open_store(config.metadata_url, session_timeout_ms=config.session_timeout_ms)
    control = ControlPlane(store, config)
    broker = Broker(config, control)
    controller = Controller(config.broker_id, control, config)
    await broker.start()
    controller.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    controller.stop()
    await broker.stop()
    store.unregister_broker(config.broker_id)
    store.close()
