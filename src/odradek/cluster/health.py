"""Cluster health, in the manner of ``rpk cluster health``: what a Kafka client sees.

``fetch_view`` asks the cluster over the Kafka protocol (confluent-kafka's AdminClient:
Metadata for brokers, controller, leaders, replicas and ISRs; DescribeConfigs for each
topic's ``min.insync.replicas``); ``assess`` is pure and decides:

* nodes down: broker ids the cluster knows of (partition replicas, plus the brokers a
  cluster directory lists) that Metadata does not list as live;
* leaderless partitions: no leader, or a leader that is not live;
* under-replicated partitions: ISR smaller than the replica set;
* under-min-ISR partitions: ISR smaller than the topic's ``min.insync.replicas``
  (acks=all produce fails there).

Healthy means a controller, no node down and none of those partitions.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

__all__ = [
    "PartitionView",
    "ClusterView",
    "HealthReport",
    "fetch_view",
    "fetch_metadata",
    "assess",
    "format_report",
]


@dataclass(frozen=True)
class PartitionView:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @property
    def name(self) -> str:
        return f"{self.topic}/{self.partition}"


@dataclass
class ClusterView:
    controller: int  # -1: none
    live: dict[int, str]  # broker id -> host:port
    known: set[int]  # every broker id the cluster refers to
    partitions: list[PartitionView]
    min_isr: dict[str, int] = field(default_factory=dict)  # topic -> min.insync.replicas
    topics_internal: set[str] = field(default_factory=set)
    # Brokers known to be down although Metadata may still list them (a local cluster's
    # dead or frozen process, before its ZooKeeper session expires).
    known_down: set[int] = field(default_factory=set)


@dataclass
class HealthReport:
    healthy: bool
    reasons: list[str]
    controller: int
    all_nodes: list[int]
    nodes_down: list[int]
    leaderless: list[str]
    under_replicated: list[str]
    under_min_isr: list[str]


def fetch_view(admin: Any, timeout_s: float = 10.0, extra_known: Iterable[int] = ()) -> ClusterView:
    """Metadata and topic configs through a confluent-kafka ``AdminClient``."""
    view, md = _metadata(admin, timeout_s, extra_known)
    view.min_isr.update(_min_isr(admin, sorted(md.topics), timeout_s))
    return view


def fetch_metadata(
    admin: Any, timeout_s: float = 10.0, extra_known: Iterable[int] = ()
) -> ClusterView:
    """Metadata only (``min_isr`` empty): for a caller that keeps topic configs itself
    and asks for them less often (the console, issue 29)."""
    return _metadata(admin, timeout_s, extra_known)[0]


def _metadata(admin: Any, timeout_s: float, extra_known: Iterable[int]) -> tuple[ClusterView, Any]:
    md = admin.list_topics(timeout=timeout_s)
    live = {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()}
    known = set(live) | set(extra_known)
    parts: list[PartitionView] = []
    for name, t in md.topics.items():
        for pid, p in t.partitions.items():
            replicas = tuple(p.replicas)
            known.update(replicas)
            parts.append(PartitionView(name, pid, p.leader, replicas, tuple(p.isrs)))
    parts.sort(key=lambda p: (p.topic, p.partition))
    controller = md.controller_id if md.controller_id is not None else -1
    return ClusterView(
        controller, live, known, parts, {}, {n for n in md.topics if n.startswith("__")}
    ), md


def _min_isr(admin: Any, topics: list[str], timeout_s: float) -> dict[str, int]:
    from confluent_kafka.admin import ConfigResource, ResourceType  # noqa: PLC0415

    min_isr: dict[str, int] = {}
    if topics:
        futures = admin.describe_configs(
            [ConfigResource(ResourceType.TOPIC, n) for n in topics], request_timeout=timeout_s
        )
        # One deadline for all topics, not one each: a cluster without a controller must
        # not cost timeout x topics.
        concurrent.futures.wait(list(futures.values()), timeout=timeout_s)
        for res, fut in futures.items():
            if not fut.done():
                continue
            try:
                entry = fut.result(0).get("min.insync.replicas")
            except Exception as e:
                logger.info("DescribeConfigs %s failed: %s", res.name, e)
                continue
            if entry is not None and entry.value is not None:
                min_isr[res.name] = int(entry.value)
    return min_isr


def assess(view: ClusterView) -> HealthReport:
    live = set(view.live) - view.known_down
    down = sorted((view.known | view.known_down) - live)
    leaderless = [p.name for p in view.partitions if p.leader < 0 or p.leader not in live]
    under = [p.name for p in view.partitions if len(p.isr) < len(p.replicas)]
    under_min = [p.name for p in view.partitions if len(p.isr) < view.min_isr.get(p.topic, 1)]
    reasons = []
    if view.controller < 0 or view.controller not in live:
        reasons.append("no_elected_controller")
    if down:
        reasons.append("nodes_down")
    if leaderless:
        reasons.append("leaderless_partitions")
    if under:
        reasons.append("under_replicated_partitions")
    if under_min:
        reasons.append("under_min_isr_partitions")
    return HealthReport(
        not reasons,
        reasons,
        view.controller,
        sorted(view.known | view.known_down),
        down,
        leaderless,
        under,
        under_min,
    )


def _listing(items: list[str], limit: int = 20) -> str:
    shown = items[:limit]
    more = f" … and {len(items) - limit} more" if len(items) > limit else ""
    return "[" + " ".join(shown) + "]" + more


def format_report(r: HealthReport) -> list[str]:
    rows = [
        ("Healthy:", str(r.healthy).lower()),
        ("Unhealthy reasons:", "[" + " ".join(r.reasons) + "]"),
        ("Controller ID:", str(r.controller)),
        ("All nodes:", "[" + " ".join(map(str, r.all_nodes)) + "]"),
        ("Nodes down:", "[" + " ".join(map(str, r.nodes_down)) + "]"),
        (f"Leaderless partitions ({len(r.leaderless)}):", _listing(r.leaderless)),
        (f"Under-replicated partitions ({len(r.under_replicated)}):", _listing(r.under_replicated)),
        (f"Under-min-ISR partitions ({len(r.under_min_isr)}):", _listing(r.under_min_isr)),
    ]
    width = max(len(k) for k, _ in rows) + 2
    return [
        "CLUSTER HEALTH OVERVIEW",
        "=======================",
        *(k.ljust(width) + v for k, v in rows),
    ]
