"""The console's reader of Prometheus text (``odradek.metrics.scrape.parse``): its fast
path reads what prometheus-client's parser reads, and hands every other text to it."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from odradek.metrics.scrape import Samples, _parse_slowly, parse


def _same(a: Samples, b: Samples) -> bool:
    if a.values.keys() != b.values.keys():
        return False
    for name, series in a.values.items():
        other = b.values[name]
        if series.keys() != other.keys():
            return False
        for k, v in series.items():
            if not (v == other[k] or (math.isnan(v) and math.isnan(other[k]))):
                return False
    return True


label_values = st.text(alphabet='ab0 ,={}"\\\n._-', max_size=5)
numbers = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(2**63), 2**63)


@st.composite
def expositions(draw: st.DrawFn) -> str:
    fams = []
    for i in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["gauge", "counter", "histogram"]))
        labels = draw(st.lists(st.sampled_from(["topic", "partition", "le_x"]), unique=True))
        cls = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily}.get(kind)
        fam = (
            cls(f"m{i}", "help \\ text", labels=labels)
            if cls is not None
            else HistogramMetricFamily(f"m{i}", "help", labels=labels)
        )
        for _ in range(draw(st.integers(0, 3))):
            lv = [draw(label_values) for _ in labels]
            if kind == "histogram":
                fam.add_metric(lv, [("1.0", draw(st.integers(0, 9))), ("+Inf", 10)], 3.5)
            else:
                fam.add_metric(lv, abs(draw(numbers)) if kind == "counter" else draw(numbers))
        fams.append(fam)

    class _Each:
        def collect(self):  # type: ignore[no-untyped-def]
            yield from fams

    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Each())  # type: ignore[arg-type]
    return generate_latest(reg).decode()


@settings(max_examples=300, deadline=None)
@given(expositions())
def test_the_fast_path_reads_what_prometheus_client_reads(text: str) -> None:
    assert _same(parse(text), _parse_slowly(text))


def test_lines_the_fast_path_does_not_take_go_to_prometheus_client() -> None:
    for text in (
        'm{a="x\\"y"} 1\n',  # an escaped quote
        'm{a="1"} 2 1700000000000\n',  # a timestamp
        "m 1 # an exemplar?\n",
        'm{a="1",a="2"} 3\n',  # a repeated label: the parser's last one wins
        'm{a="1",} 4\n',  # a trailing comma
    ):
        try:
            expected = _parse_slowly(text)
        except ValueError:  # what prometheus-client refuses, parse refuses too
            try:
                parse(text)
            except ValueError:
                continue
            raise AssertionError(f"parse took {text!r}") from None
        assert _same(parse(text), expected), text


def test_a_broker_line() -> None:
    s = parse('kafka_log_log_size{partition="3",topic="t.x-1"} 1.2e+07\n# HELP x y\n')
    assert s.get("kafka_log_log_size", topic="t.x-1", partition="3") == 12_000_000.0
