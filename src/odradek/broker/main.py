"""``odradek broker --config server.properties``: one broker in the foreground."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

from odradek.broker.broker import Broker
from odradek.config import BrokerConfig

log = logging.getLogger("odradek.broker")


def _install_event_loop_policy() -> str:
    try:
        import uvloop  # noqa: PLC0415
    except ImportError:
        return "asyncio"
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return "uvloop"


async def _serve(config: BrokerConfig) -> int:
    broker = Broker(config)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await broker.start()
    except Exception:
        log.exception("broker %d failed to start", config.broker_id)
        await broker.shutdown()
        return 1
    await stop.wait()
    await broker.shutdown()
    return 0


def run_broker(config_path: str | Path, log_level: str = "INFO") -> int:
    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.INFO), stream=sys.stderr,
        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    config = BrokerConfig.from_properties_file(config_path)
    loop_kind = _install_event_loop_policy()
    log.info("starting broker %d with %s from %s", config.broker_id, loop_kind, config_path)
    return asyncio.run(_serve(config))
