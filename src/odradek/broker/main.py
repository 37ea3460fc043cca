"""``odradek broker --config server.properties``: one broker in the foreground."""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import signal
import sys
from pathlib import Path

from odradek.broker.broker import Broker
from odradek.broker.heap import TICK_S, HeapFreezer
from odradek.config import BrokerConfig, ConfigError

logger = logging.getLogger("odradek.broker")

SHUTDOWN_WATCHDOG_S = 45  # controlled shutdown (15 s) + bounded steps
# How long a thread holding the GIL keeps it when the event loop wants it (Python's
# default is 5 ms). Worker threads do CPU work beside the loop (a metrics scrape's
# rendering, ZooKeeper callbacks, record parsing in fsync jobs); at 5 ms each hand-over
# would add up to 5 ms to every request waiting on the loop (issue 29).
GIL_SWITCH_INTERVAL_S = 0.001


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
    except ConfigError as e:
        logger.error("broker %d cannot start: %s", config.broker_id, e)
        await broker.shutdown()
        return 1
    except Exception:
        logger.exception("broker %d failed to start", config.broker_id)
        await broker.shutdown()
        return 1
    heap = _start_heap_freezer(broker)
    await stop.wait()
    if heap is not None:
        heap.cancel()
    # A watchdog: if shutdown ever hangs, dump every thread's stack to the log and exit,
    # rather than linger holding the ZooKeeper session.
    faulthandler.dump_traceback_later(SHUTDOWN_WATCHDOG_S, exit=True)
    await broker.shutdown()
    return 0


def _start_heap_freezer(broker: Broker) -> asyncio.Task[None] | None:
    """odradek.heap.freeze.settle.ms: the broker process's heap out of full collections
    once its partitions settle (odradek.broker.heap). A process setting, like the GIL
    switch interval: a broker run inside another process (tests) leaves gc alone."""
    settle_ms = broker.settings.heap_freeze_settle_ms
    if settle_ms <= 0:
        return None
    freezer = HeapFreezer(settle_ms / 1000)
    broker.heap = freezer
    replicas = broker.replicas

    async def tick() -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                freezer.tick(len(replicas.partitions), replicas.partitions_removed)
            except Exception:
                logger.exception("heap freezer failed")

    return asyncio.get_running_loop().create_task(tick())


def run_broker(config_path: str | Path, log_level: str = "INFO") -> int:
    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.INFO),
        stream=sys.stderr,
        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    try:
        config = BrokerConfig.from_properties_file(config_path)
    except ConfigError as e:
        # Kafka logs the ConfigException and exits 1; a traceback would bury the reason.
        logger.error("cannot start: %s", e)
        return 1
    loop_kind = _install_event_loop_policy()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    logger.info("starting broker %d with %s from %s", config.broker_id, loop_kind, config_path)
    code = asyncio.run(_serve(config))
    logging.shutdown()
    # Worker threads blocked in ZooKeeper calls must not keep a stopped broker alive.
    os._exit(code)
