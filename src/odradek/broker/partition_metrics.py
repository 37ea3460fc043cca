"""A broker's per-partition metric families, rendered incrementally.

At 10,000 hosted partitions a scrape has ~90,000 per-partition samples (log size and
offsets, segments, high watermark, ISR figures: nine families). Building them through
prometheus-client's families took ~0.5 s of CPU per scrape, in the rendering thread, and
the event loop every request runs on waited for the GIL meanwhile: watched at 10,000
partitions, a default cluster's RF 3 p99 went from 15-24 ms to 148-218 ms (issue 29).
Most partitions do not change between two scrapes, so each one's text is kept with the
figures it was rendered from and rendered again only when they differ; a scrape then
costs a comparison per partition on the loop (in slices, ``SLICE_S`` each) and a join per
family in the rendering thread.

Sans-IO: ``PartitionSeries.begin`` / ``put`` / ``commit`` on the loop (one scrape at a
time: ``MetricsListener.render_shared``), ``RenderedPartitions.text`` in any thread (it
reads only the immutable entries the scrape committed). The text is what
prometheus-client's ``generate_latest`` writes for the same families, byte for byte
(tested), so a scraper cannot tell the difference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from prometheus_client.utils import floatToGoString

__all__ = [
    "FAMILIES",
    "PartitionFigures",
    "PartitionSeries",
    "RenderedPartitions",
    "ReplicaCounts",
]

Key = tuple[str, int]


class PartitionFigures(NamedTuple):
    """One hosted replica's figures, read on the event loop."""

    size: int
    log_end: int
    log_start: int
    segments: int
    high_watermark: int
    is_leader: bool
    offline_role: bool  # the replica's role is OFFLINE
    leader_id: int
    isr: int  # ISR size (leaders only: 0 elsewhere)
    replicas: int  # replica count (leaders only: 0 elsewhere)
    min_isr: int


# (name, help): the order of the families in the exposition, and of each entry's lines.
FAMILIES: tuple[tuple[str, str], ...] = (
    ("kafka_log_log_size", "Bytes in the partition's log"),
    ("kafka_log_log_logendoffset", "Log end offset"),
    ("kafka_log_log_logstartoffset", "Log start offset"),
    ("kafka_log_log_numlogsegments", "Segments in the log"),
    (
        "odradek_log_log_highwatermark",
        "High watermark (beyond Kafka's MBeans: consumers read below it)",
    ),
    (
        "kafka_cluster_partition_underreplicated",
        "1 if this leader's ISR is smaller than the replicas",
    ),
    ("kafka_cluster_partition_insyncreplicascount", "ISR size (leader only)"),
    ("kafka_cluster_partition_replicascount", "Replica count (leader only)"),
    (
        "kafka_cluster_partition_underminisr",
        "1 if the ISR is below min.insync.replicas (leader only)",
    ),
)
_HEADERS = tuple(
    f"# HELP {name} {doc.replace(chr(92), chr(92) * 2)}\n# TYPE {name} gauge\n"
    for name, doc in FAMILIES
)


_NAMES = tuple(name for name, _ in FAMILIES)


def _escape(value: str) -> str:
    # The exposition format's label-value escapes (Kafka topic names never need them).
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _lines(key: Key, f: PartitionFigures) -> tuple[str, ...]:
    """The entry's sample line in each family (empty where a family skips it)."""
    labels = f'{{partition="{key[1]}",topic="{_escape(key[0])}"}} '
    names = _NAMES
    out = [
        f"{names[0]}{labels}{floatToGoString(f.size)}\n",
        f"{names[1]}{labels}{floatToGoString(f.log_end)}\n",
        f"{names[2]}{labels}{floatToGoString(f.log_start)}\n",
        f"{names[3]}{labels}{floatToGoString(f.segments)}\n",
        f"{names[4]}{labels}{floatToGoString(f.high_watermark)}\n",
    ]
    if f.is_leader:
        out += [
            f"{names[5]}{labels}{floatToGoString(int(f.isr < f.replicas))}\n",
            f"{names[6]}{labels}{floatToGoString(f.isr)}\n",
            f"{names[7]}{labels}{floatToGoString(f.replicas)}\n",
            f"{names[8]}{labels}{floatToGoString(int(f.isr < f.min_isr))}\n",
        ]
    else:
        out += ["", "", "", ""]
    return tuple(out)


class _Entry(NamedTuple):
    figures: PartitionFigures
    lines: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ReplicaCounts:
    """Kafka's ReplicaManager gauges, from the hosted replicas' figures."""

    partitions: int
    leaders: int
    under_replicated: int
    under_min_isr: int
    at_min_isr: int
    offline: int


@dataclass(slots=True)
class RenderedPartitions:
    """One scrape's committed entries: read-only, so any thread may render them."""

    entries: dict[Key, _Entry]
    order: list[Key] | None  # sorted keys; None: membership changed, sort when rendering
    rendered: int  # entries whose text this scrape made (new or changed)

    def sorted_keys(self) -> list[Key]:
        if self.order is None:
            self.order = sorted(self.entries)
        return self.order

    def text(self, names: frozenset[str] | None = None) -> str:
        """The families' exposition text (those in ``names``, if given), partitions in
        (topic, index) order."""
        wanted = [i for i, n in enumerate(_NAMES) if names is None or n in names]
        lines = [self.entries[k].lines for k in self.sorted_keys()] if wanted else []
        out: list[str] = []
        for i in wanted:
            body = "".join([ln[i] for ln in lines])
            if body or names is None:  # asked by name, an empty family is left out
                out += (_HEADERS[i], body)
        return "".join(out)

    def counts(self, live_brokers: set[int]) -> ReplicaCounts:
        leaders = under = under_min = at_min = offline = 0
        for e in self.entries.values():
            f = e.figures
            if f.is_leader:
                leaders += 1
                under += f.isr < f.replicas
                under_min += f.isr < f.min_isr
                at_min += f.isr == f.min_isr
            # One log dir per broker: a replica here is offline when its partition has
            # no live leader (Kafka counts replicas on a failed log dir).
            if f.offline_role or (
                f.leader_id >= 0 and live_brokers and f.leader_id not in live_brokers
            ):
                offline += 1
        return ReplicaCounts(len(self.entries), leaders, under, under_min, at_min, offline)


class PartitionSeries:
    """The entries kept between scrapes (see the module docstring)."""

    def __init__(self) -> None:
        self._entries: dict[Key, _Entry] = {}
        self._order: list[Key] | None = []
        self._next: dict[Key, _Entry] = {}
        self._kept = 0
        self._rendered = 0

    def begin(self) -> None:
        self._next = {}
        self._kept = self._rendered = 0

    def put(self, key: Key, figures: PartitionFigures) -> None:
        old = self._entries.get(key)
        if old is not None:
            self._kept += 1
            if old.figures == figures:
                self._next[key] = old
                return
        self._rendered += 1
        self._next[key] = _Entry(figures, _lines(key, figures))

    def commit(self) -> RenderedPartitions:
        same_members = self._kept == len(self._entries) == len(self._next)
        order = self._order if same_members else None
        out = RenderedPartitions(self._next, order, self._rendered)
        self._entries, self._next = self._next, {}
        # The sorted order is shared with the next scrape once a thread has made it.
        self._order = order
        return out

    def remember_order(self, rendered: RenderedPartitions) -> None:
        """After ``rendered.text()``: keep its sorted order for the next scrape, if that
        scrape's membership is still the one it was sorted for."""
        if rendered.entries is self._entries and rendered.order is not None:
            self._order = rendered.order
