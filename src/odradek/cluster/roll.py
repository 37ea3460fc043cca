"""Rolling restart: one broker at a time, never dropping below a full ISR (issue 19).

The procedure Kafka operators follow, as ``odradek cluster roll``:

1. wait until no partition is under-replicated (every ISR equals its replica list), so
   stopping one broker leaves every partition with ``RF - 1`` in-sync copies and
   acks=all producers with ``min.insync.replicas <= RF - 1`` keep being acknowledged;
2. stop the broker with SIGTERM: the broker's controlled shutdown moves leadership of
   its partitions to other ISR members *before* it closes its sockets (REQ-R13), so
   clients see NOT_LEADER and retry instead of timing out;
3. start it again and wait until it is registered and serving;
4. wait for a full ISR again (it has caught up, REQ-R7) before the next broker;
5. the controller goes last, so leadership of the cluster moves once, not per step;
6. finally a preferred-leader election gives leadership back to the first replicas.

``roll_order`` and ``under_replicated`` are pure; ``roll`` drives a
:class:`~odradek.cluster.local.LocalCluster`; ``procedure_text`` prints the same steps
for brokers run as systemd services on real hosts.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import NoNodeError

from odradek.errors import ErrorCode, KafkaError
from odradek.zk import znodes

if TYPE_CHECKING:
    from odradek.cluster.local import LocalCluster

logger = logging.getLogger(__name__)

__all__ = ["roll_order", "under_replicated", "partition_isrs", "roll", "procedure_text"]


def roll_order(broker_ids: Sequence[int], controller: int | None) -> list[int]:
    """Ascending ids, the controller last (one controller move per roll)."""
    rest = sorted(b for b in broker_ids if b != controller)
    return rest + ([controller] if controller is not None and controller in broker_ids else [])


def under_replicated(
    states: dict[tuple[str, int], tuple[list[int], list[int]]],
) -> list[tuple[str, int]]:
    """Partitions whose ISR is not the whole replica list; ``states`` maps
    (topic, partition) to (replicas, isr)."""
    return sorted(tp for tp, (replicas, isr) in states.items() if set(isr) != set(replicas))


def partition_isrs(zk: Any) -> dict[tuple[str, int], tuple[list[int], list[int]]]:
    """(replicas, isr) of every partition, from ZooKeeper (the controller's record)."""
    out: dict[tuple[str, int], tuple[list[int], list[int]]] = {}
    try:
        topics = zk.get_children(znodes.BROKER_TOPICS)
    except NoNodeError:
        return out
    for topic in topics:
        try:
            data, _ = zk.get(znodes.topic_path(topic))
        except NoNodeError:
            continue  # deleted meanwhile
        for p, replicas in znodes.decode_topic(topic, data).partitions.items():
            try:
                raw, _ = zk.get(znodes.partition_state_path(topic, p))
                isr = list(znodes.decode_partition_state(raw).isr)
            except NoNodeError:
                isr = []
            out[(topic, p)] = (list(replicas), isr)
    return out


def _wait_full_isr(c: LocalCluster, timeout: float, say: Callable[[str], None]) -> None:
    deadline = time.monotonic() + timeout
    last: list[tuple[str, int]] = []
    while True:
        try:
            last = under_replicated(partition_isrs(c.zk_client()))
        except Exception as e:
            last = [("?", -1)]
            logger.debug("ISR check: %s", e)
        if not last:
            return
        if time.monotonic() >= deadline:
            raise KafkaError(
                ErrorCode.request_timed_out,
                f"{len(last)} partitions still under-replicated after {timeout:.0f} s: {last[:5]}",
            )
        time.sleep(0.2)


def _preferred_election(bootstrap: str, say: Callable[[str], None]) -> None:
    try:
        from confluent_kafka import ElectionType
        from confluent_kafka.admin import AdminClient
    except ImportError:
        say("preferred-leader election skipped: confluent-kafka is not installed")
        return
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.elect_leaders(ElectionType.PREFERRED, None).result(30)
        say("preferred leaders elected")
    except Exception as e:
        say(f"preferred-leader election: {e}")


def roll(
    c: LocalCluster,
    *,
    isr_timeout: float = 120.0,
    stop_timeout: float = 60.0,
    start_timeout: float = 60.0,
    say: Callable[[str], None] = print,
) -> list[int]:
    """Restart every broker of ``c`` in turn (see the module doc). Returns the order."""
    order = roll_order([b.id for b in c.brokers], c.controller_id())
    say(f"roll order: {' '.join(map(str, order))} (controller last)")
    for bid in order:
        t0 = time.monotonic()
        say(f"broker {bid}: waiting for a full ISR on every partition")
        _wait_full_isr(c, isr_timeout, say)
        say(f"broker {bid}: SIGTERM (controlled shutdown moves its leaderships)")
        c.stop_broker(bid, signal.SIGTERM, timeout=stop_timeout)
        say(f"broker {bid}: starting")
        c.start_broker(bid, timeout=start_timeout)
        say(f"broker {bid}: waiting until it is back in every ISR")
        _wait_full_isr(c, isr_timeout, say)
        say(f"broker {bid}: done in {time.monotonic() - t0:.1f} s")
    _preferred_election(c.bootstrap_servers, say)
    return order


def procedure_text(
    hosts: Sequence[tuple[int, str]], bootstrap: str, unit: str = "odradek-broker"
) -> str:
    """The rolling-restart steps for brokers on real hosts run by systemd
    (``deploy/systemd/odradek-broker.service``); ``hosts`` is [(broker id, host)]."""
    lines = [
        "# Rolling restart, one broker at a time; the controller last.",
        "# The controller is the broker id in the ZooKeeper znode /controller: put it last.",
    ]
    for bid, host in hosts:
        lines += [
            f"# --- broker {bid} on {host}",
            "# 1. no under-replicated partitions (the command prints nothing):",
            f"odradek topics --bootstrap-server {bootstrap} --describe --under-replicated-partitions",
            "# 2. SIGTERM: controlled shutdown moves its leaderships first (TimeoutStopSec covers it)",
            f"ssh {host} sudo systemctl stop {unit}",
            "# 3. upgrade the package here if this is an upgrade (docs/deployment.md)",
            f"ssh {host} sudo systemctl start {unit}",
            f"# 4. wait until broker {bid} is back in every ISR (step 1 again) before the next",
        ]
    lines += [
        "# finally: preferred-leader election to rebalance leadership",
        f"odradek leader-election --bootstrap-server {bootstrap} --election-type preferred "
        "--all-topic-partitions",
    ]
    return "\n".join(lines)
