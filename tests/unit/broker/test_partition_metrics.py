"""The incremental per-partition metric families (issue 29): each scrape's text is what
prometheus-client writes for the same figures, byte for byte, and only partitions whose
figures changed are rendered again."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from odradek.broker.partition_metrics import (
    FAMILIES,
    PartitionFigures,
    PartitionSeries,
    RenderedPartitions,
)

Key = tuple[str, int]


class _Reference:
    """The same families built the plain prometheus-client way."""

    def __init__(self, rows: dict[Key, PartitionFigures]) -> None:
        self.rows = rows

    def collect(self):  # type: ignore[no-untyped-def]
        fams = [GaugeMetricFamily(n, doc, labels=["topic", "partition"]) for n, doc in FAMILIES]
        for (topic, index), f in sorted(self.rows.items()):
            lv = [topic, str(index)]
            for fam, v in zip(
                fams, (f.size, f.log_end, f.log_start, f.segments, f.high_watermark), strict=False
            ):
                fam.add_metric(lv, v)
            if f.is_leader:
                fams[5].add_metric(lv, int(f.isr < f.replicas))
                fams[6].add_metric(lv, f.isr)
                fams[7].add_metric(lv, f.replicas)
                fams[8].add_metric(lv, int(f.isr < f.min_isr))
        yield from fams


def _reference_text(rows: dict[Key, PartitionFigures], names: frozenset[str] | None) -> str:
    reg = CollectorRegistry(auto_describe=True)
    reg.register(_Reference(rows))  # type: ignore[arg-type]
    return generate_latest(reg if names is None else reg.restricted_registry(names)).decode()


def _scrape(series: PartitionSeries, rows: dict[Key, PartitionFigures]) -> RenderedPartitions:
    series.begin()
    for key, f in rows.items():
        series.put(key, f)
    out = series.commit()
    out.text()
    series.remember_order(out)
    return out


def _figures(leader: bool = True, log_end: int = 10, isr: int = 3) -> PartitionFigures:
    return PartitionFigures(100, log_end, 0, 1, log_end, leader, False, 1, isr, 3, 2)


offsets = st.integers(min_value=0, max_value=2**63 - 1)
figures = st.builds(
    PartitionFigures,
    offsets,
    offsets,
    offsets,
    st.integers(min_value=0, max_value=10_000),
    offsets,
    st.booleans(),
    st.booleans(),
    st.integers(min_value=-1, max_value=5),
    st.integers(min_value=0, max_value=5),
    st.integers(min_value=0, max_value=5),
    st.integers(min_value=1, max_value=5),
)
keys = st.tuples(
    st.text(alphabet="ab._-\\\"\n", min_size=1, max_size=4), st.integers(min_value=0, max_value=9)
)
scrapes = st.lists(st.dictionaries(keys, figures, max_size=8), min_size=1, max_size=4)


names = st.none() | st.frozensets(
    st.sampled_from([n for n, _ in FAMILIES] + ["kafka_log_log_size_total", "other"]), max_size=4
)


@settings(max_examples=200, deadline=None)
@given(scrapes, names)
def test_every_scrape_is_prometheus_clients_text_byte_for_byte(rounds, asked) -> None:  # type: ignore[no-untyped-def]
    """Also with ``name[]`` (prometheus-client's restricted registry)."""
    series = PartitionSeries()
    for rows in rounds:
        out = _scrape(series, rows)
        assert out.text(asked) == _reference_text(rows, asked)
        full = out.text()
        assert full == _reference_text(rows, None)
        assert len(list(text_string_to_metric_families(full))) == len(FAMILIES)


def test_only_partitions_whose_figures_changed_are_rendered_again() -> None:
    series = PartitionSeries()
    rows = {("t", i): _figures() for i in range(1000)}
    assert _scrape(series, rows).rendered == 1000
    assert _scrape(series, rows).rendered == 0
    rows[("t", 7)] = _figures(log_end=11)
    rows[("t", 8)] = _figures(isr=2)
    out = _scrape(series, rows)
    assert out.rendered == 2
    assert 'kafka_log_log_logendoffset{partition="7",topic="t"} 11.0\n' in out.text()
    assert 'kafka_cluster_partition_underreplicated{partition="8",topic="t"} 1.0\n' in out.text()


def test_the_sorted_order_is_kept_until_membership_changes() -> None:
    series = PartitionSeries()
    rows = {("t", i): _figures() for i in (3, 1, 2)}
    first = _scrape(series, rows)
    assert first.order == [("t", 1), ("t", 2), ("t", 3)]
    second = _scrape(series, {**rows, ("t", 1): _figures(log_end=99)})
    assert second.order is first.order  # not sorted again
    del rows[("t", 2)]
    third = _scrape(series, rows)
    assert third.sorted_keys() == [("t", 1), ("t", 3)]
    assert "partition=\"2\"" not in third.text()
    rows[("s", 0)] = _figures()
    assert _scrape(series, rows).sorted_keys() == [("s", 0), ("t", 1), ("t", 3)]


def test_a_removed_and_a_new_partition_in_one_scrape_sort_again() -> None:
    """Same count, different members: the old order must not be reused."""
    series = PartitionSeries()
    _scrape(series, {("t", 0): _figures(), ("t", 1): _figures()})
    out = _scrape(series, {("t", 0): _figures(), ("a", 5): _figures()})
    assert out.sorted_keys() == [("a", 5), ("t", 0)]


def test_replica_counts() -> None:
    series = PartitionSeries()
    rows = {
        ("t", 0): _figures(isr=3),  # full
        ("t", 1): _figures(isr=2),  # under-replicated, at min ISR
        ("t", 2): _figures(isr=1),  # under min ISR
        ("t", 3): PartitionFigures(0, 0, 0, 1, 0, False, False, 7, 0, 0, 2),  # leader 7 gone
        ("t", 4): PartitionFigures(0, 0, 0, 1, 0, False, True, -1, 0, 0, 2),  # offline role
        ("t", 5): PartitionFigures(0, 0, 0, 1, 0, False, False, 1, 0, 0, 2),  # followed
    }
    c = _scrape(series, rows).counts({1, 2, 3})
    assert (c.partitions, c.leaders, c.under_replicated) == (6, 3, 2)
    assert (c.under_min_isr, c.at_min_isr, c.offline) == (1, 1, 2)
