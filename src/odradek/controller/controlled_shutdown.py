"""Controlled shutdown: move leadership off a broker before it stops (REQ-R13).

Kafka's broker sends a ControlledShutdown RPC to the controller and waits. Odradek's
stand-in is a znode: the broker writes the persistent ``/admin/controlled_shutdown/<id>``
(body: ``{"version":1,"broker":<id>}``) and waits for it to disappear. The controller
watches the children of ``/admin/controlled_shutdown``; for each id it

* moves leadership of every partition the broker leads to another live ISR member
  (``elections.controlled_shutdown_election``, new leader epoch),
* removes the broker from the ISR of partitions it follows (no epoch bump),
* never elects it again while it is registered (it stays in the controller's
  shutting-down set until ``/brokers/ids/<id>`` vanishes), and
* deletes the znode.

If the broker is itself the controller, nothing changes: its controller thread is still
running while the broker waits, so it handles its own request like any other; the broker
then resigns ``/controller`` as part of its normal shutdown (``Controller.stop``) and
another broker takes over.

Partitions with no other live ISR member keep their leader (Kafka does the same); they go
offline when the broker's session ends, like after a crash.

The persistent znode (not ephemeral) survives a session hiccup during shutdown; a
leftover is harmless (the controller deletes it) and the broker removes its own znode on
timeout.
"""

from __future__ import annotations

import json
import logging
import threading
import time

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from odradek.zk.znodes import CONTROLLED_SHUTDOWN_PATH

logger = logging.getLogger(__name__)


def request_path(broker_id: int) -> str:
    return f"{CONTROLLED_SHUTDOWN_PATH}/{broker_id}"


def request_controlled_shutdown(zk: KazooClient, broker_id: int, timeout_s: float) -> bool:
    """Ask the controller to move leadership away from ``broker_id``; block until it has
    (True) or ``timeout_s`` passed (False: the znode is removed again and the broker shuts
    down anyway — its partitions then fail over as after a crash). Blocking: call it from
    a worker thread (``asyncio.to_thread``)."""
    path = request_path(broker_id)
    body = json.dumps({"version": 1, "broker": broker_id}, separators=(",", ":")).encode()
    zk.ensure_path(CONTROLLED_SHUTDOWN_PATH)
    try:
        zk.create(path, body)
    except NodeExistsError:
        pass  # an earlier attempt of ours: the controller will handle it
    gone = threading.Event()

    def watch(data: bytes | None, _stat: object, *_: object) -> bool:
        if data is None:
            gone.set()
            return False
        return True

    zk.DataWatch(path, watch)
    deadline = time.monotonic() + timeout_s
    # The watch does the work; the poll is a fallback if a watch is lost with the session.
    while not gone.wait(min(0.5, max(0.0, deadline - time.monotonic()))):
        if zk.exists(path) is None:
            gone.set()
            break
        if time.monotonic() >= deadline:
            break
    if gone.is_set():
        logger.info("controlled shutdown of broker %d completed", broker_id)
        return True
    logger.warning("controlled shutdown of broker %d timed out after %.1f s", broker_id, timeout_s)
    try:
        zk.delete(path)
    except NoNodeError:
        pass
    return False
