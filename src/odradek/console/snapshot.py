"""What the console shows: an immutable snapshot of the cluster, built from what a Kafka
client sees (Metadata, ListOffsets, the group APIs) and the brokers' ``/metrics``.

``build_snapshot`` is pure: it takes the raw answers (``RawState``) and the previous
snapshot (for rates) and returns the next one. The collector (``collector.py``) does
the I/O; the web app (``app.py``) renders snapshots.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field

from odradek.cluster.health import ClusterView, HealthReport, assess
from odradek.metrics.scrape import Samples

logger = logging.getLogger(__name__)

__all__ = [
    "View",
    "Interest",
    "RawGroup",
    "RawState",
    "BrokerRow",
    "PartitionRow",
    "TopicRow",
    "LagRow",
    "MemberRow",
    "GroupRow",
    "RatePoint",
    "Snapshot",
    "SnapshotBuilder",
    "EMPTY",
    "HISTORY_POINTS",
]

HISTORY_POINTS = 240  # rate samples kept per broker (an hour at a scrape every 15 s)


View = tuple[str, str]  # a live page: (view, its argument), e.g. ("topic", "orders")


@dataclass(frozen=True)
class Interest:
    """The live views open in browsers right now: what the collector asks for."""

    views: frozenset[View] = frozenset()

    def has(self, view: str) -> bool:
        return any(v == view for v, _ in self.views)

    def args(self, view: str) -> set[str]:
        return {a for v, a in self.views if v == view}


@dataclass(frozen=True)
class RawGroup:
    group_id: str
    state: str
    protocol: str
    coordinator: int
    members: list[tuple[str, str, str, list[tuple[str, int]]]]  # id, client, host, tps
    committed: dict[tuple[str, int], int]


@dataclass
class RawState:
    """One collection round's answers; any part may be missing after an error."""

    taken_at: float
    view: ClusterView | None
    high_watermarks: dict[tuple[str, int], int] = field(default_factory=dict)
    log_starts: dict[tuple[str, int], int] = field(default_factory=dict)
    groups: list[RawGroup] = field(default_factory=list)
    metrics: dict[int, Samples | None] = field(default_factory=dict)  # broker -> scrape
    # broker -> when its scrape in ``metrics`` was taken (the collector scrapes less often
    # than it rounds: a scrape seen again is not a new rate point); default: taken_at
    metrics_at: dict[int, float] = field(default_factory=dict)
    metrics_urls: dict[int, str] = field(default_factory=dict)
    process_down: set[int] = field(default_factory=set)  # a local cluster's dead brokers
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RatePoint:
    t: float
    bytes_in: float  # bytes/s produced to the broker (leader appends)
    bytes_out: float  # bytes/s fetched by consumers
    messages_in: float  # records/s


@dataclass(frozen=True)
class BrokerRow:
    id: int
    address: str
    up: bool
    controller: bool
    leaders: int
    replicas: int
    metrics_url: str | None
    metrics_ok: bool
    under_replicated: int | None  # from its metrics
    stalls: int | None
    rate: RatePoint | None
    history: tuple[RatePoint, ...]


@dataclass(frozen=True)
class PartitionRow:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    high_watermark: int | None
    log_end_offset: int | None  # the leader's, from its metrics
    log_start_offset: int | None
    size_bytes: int | None

    @property
    def offline(self) -> bool:
        return self.leader < 0

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def out_of_sync(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.isr)


@dataclass(frozen=True)
class TopicRow:
    name: str
    internal: bool
    partitions: tuple[PartitionRow, ...]
    min_isr: int

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)

    @property
    def under_replicated(self) -> int:
        return sum(p.under_replicated for p in self.partitions)

    @property
    def offline(self) -> int:
        return sum(p.offline for p in self.partitions)

    @property
    def messages(self) -> int:
        return sum(
            (p.high_watermark or 0) - (p.log_start_offset or 0)
            for p in self.partitions
            if p.high_watermark is not None
        )

    @property
    def size_bytes(self) -> int:
        return sum(p.size_bytes or 0 for p in self.partitions)


@dataclass(frozen=True)
class LagRow:
    topic: str
    partition: int
    committed: int | None
    end: int | None
    member: str | None

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.end is None:
            return None
        return max(self.end - self.committed, 0)


@dataclass(frozen=True)
class MemberRow:
    member_id: str
    client_id: str
    host: str
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class GroupRow:
    group_id: str
    state: str
    protocol: str
    coordinator: int
    members: tuple[MemberRow, ...]
    lags: tuple[LagRow, ...]

    @property
    def total_lag(self) -> int:
        return sum(r.lag or 0 for r in self.lags)


@dataclass(frozen=True)
class Snapshot:
    version: int
    taken_at: float
    controller: int
    brokers: tuple[BrokerRow, ...]
    topics: tuple[TopicRow, ...]
    groups: tuple[GroupRow, ...]
    health: HealthReport | None
    errors: tuple[str, ...]

    def topic(self, name: str) -> TopicRow | None:
        return next((t for t in self.topics if t.name == name), None)

    def group(self, group_id: str) -> GroupRow | None:
        return next((g for g in self.groups if g.group_id == group_id), None)


EMPTY = Snapshot(0, 0.0, -1, (), (), (), None, ("collecting…",))


def _rate(prev: tuple[float, Samples] | None, cur: tuple[float, Samples]) -> RatePoint | None:
    if prev is None:
        return None
    dt = cur[0] - prev[0]
    if dt <= 0:
        return None

    def delta(name: str) -> float:
        a, b = prev[1].get(name), cur[1].get(name)
        if a is None or b is None or b < a:  # a restart resets counters
            return 0.0
        return (b - a) / dt

    return RatePoint(
        cur[0],
        delta("kafka_server_brokertopicmetrics_bytesin_total"),
        delta("kafka_server_brokertopicmetrics_bytesout_total"),
        delta("kafka_server_brokertopicmetrics_messagesin_total"),
    )


class SnapshotBuilder:
    """Keeps what rates need between rounds (the previous scrape, the history)."""

    def __init__(self) -> None:
        self.version = 0
        self._last_scrape: dict[int, tuple[float, Samples]] = {}
        self._history: dict[int, deque[RatePoint]] = {}
        self._rate: dict[int, RatePoint | None] = {}
        self._last_view: ClusterView | None = None

    def build(self, raw: RawState) -> Snapshot:
        self.version += 1
        view = raw.view or self._last_view
        if raw.view is not None:
            self._last_view = raw.view
        if view is None:
            return Snapshot(self.version, raw.taken_at, -1, (), (), (), None, tuple(raw.errors))
        view.known_down = set(raw.process_down)
        health = assess(view)
        down = set(health.nodes_down)
        brokers = []
        leaders: dict[int, int] = {}
        replicas: dict[int, int] = {}
        for p in view.partitions:
            leaders[p.leader] = leaders.get(p.leader, 0) + 1
            for r in p.replicas:
                replicas[r] = replicas.get(r, 0) + 1
        for bid in sorted(view.known | set(raw.metrics_urls)):
            samples = raw.metrics.get(bid)
            rate = None
            if samples is not None:
                cur = (raw.metrics_at.get(bid, raw.taken_at), samples)
                last = self._last_scrape.get(bid)
                if last is not None and last[0] == cur[0]:
                    rate = self._rate.get(bid)  # the same scrape as last round
                else:
                    rate = _rate(last, cur)
                    self._last_scrape[bid] = cur
                    self._rate[bid] = rate
                    if rate is not None:
                        hist = self._history.setdefault(bid, deque(maxlen=HISTORY_POINTS))
                        hist.append(rate)
            # A broker whose metrics endpoint stopped answering is down at once, before
            # its ZooKeeper session expires and Metadata drops it.
            metrics_failed = bid in raw.metrics_urls and samples is None
            up = bid not in down and not metrics_failed
            urp = (
                samples.get("kafka_server_replicamanager_underreplicatedpartitions")
                if samples is not None
                else None
            )
            stalls = samples.get("odradek_eventloop_stalls_total") if samples is not None else None
            brokers.append(
                BrokerRow(
                    id=bid,
                    address=view.live.get(bid, "-"),
                    up=up,
                    controller=(bid == view.controller),
                    leaders=leaders.get(bid, 0),
                    replicas=replicas.get(bid, 0),
                    metrics_url=raw.metrics_urls.get(bid),
                    metrics_ok=samples is not None,
                    under_replicated=int(urp) if urp is not None else None,
                    stalls=int(stalls) if stalls is not None else None,
                    rate=rate if up else None,
                    history=tuple(self._history.get(bid, ())),
                )
            )
        topics = self._topics(view, raw)
        groups = self._groups(raw)
        return Snapshot(
            self.version,
            raw.taken_at,
            view.controller,
            tuple(brokers),
            topics,
            groups,
            health,
            tuple(raw.errors),
        )

    @staticmethod
    def _topics(view: ClusterView, raw: RawState) -> tuple[TopicRow, ...]:
        by_topic: dict[str, list[PartitionRow]] = {}
        for p in view.partitions:
            leader_metrics = raw.metrics.get(p.leader) if p.leader >= 0 else None
            leo = size = None
            if leader_metrics is not None:
                labels = {"topic": p.topic, "partition": str(p.partition)}
                v = leader_metrics.get("kafka_log_log_logendoffset", **labels)
                leo = int(v) if v is not None else None
                v = leader_metrics.get("kafka_log_log_size", **labels)
                size = int(v) if v is not None else None
            tp = (p.topic, p.partition)
            by_topic.setdefault(p.topic, []).append(
                PartitionRow(
                    p.topic,
                    p.partition,
                    p.leader,
                    p.replicas,
                    p.isr,
                    raw.high_watermarks.get(tp),
                    leo,
                    raw.log_starts.get(tp),
                    size,
                )
            )
        return tuple(
            TopicRow(name, name in view.topics_internal, tuple(parts), view.min_isr.get(name, 1))
            for name, parts in sorted(
                by_topic.items(), key=lambda kv: (kv[0].startswith("__"), kv[0])
            )
        )

    @staticmethod
    def _groups(raw: RawState) -> tuple[GroupRow, ...]:
        out = []
        for g in sorted(raw.groups, key=lambda g: g.group_id):
            owner = {tp: m[0] for m in g.members for tp in m[3]}
            tps = sorted(set(g.committed) | set(owner))
            lags = tuple(
                LagRow(
                    t,
                    p,
                    g.committed.get((t, p)),
                    raw.high_watermarks.get((t, p)),
                    owner.get((t, p)),
                )
                for t, p in tps
            )
            members = tuple(MemberRow(m[0], m[1], m[2], tuple(sorted(m[3]))) for m in g.members)
            out.append(GroupRow(g.group_id, g.state, g.protocol, g.coordinator, members, lags))
        return tuple(out)
