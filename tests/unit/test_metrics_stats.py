"""Pure parts of the metrics: histograms, counters, the listener's request parsing."""

from __future__ import annotations

import pytest

from odradek.metrics.http_listener import BadRequest, parse_listener_url, parse_request_head
from odradek.metrics.scrape import parse
from odradek.metrics.stats import (
    LATENCY_BUCKETS_MS,
    BrokerTopicStats,
    IsrStats,
    LatencyHistogram,
    RequestMetrics,
)


def test_histogram_buckets_are_cumulative_with_le_inclusive() -> None:
    h = LatencyHistogram()
    for ms in (0.05, 0.1, 0.3, 7.0, 99999.0):
        h.observe(ms)
    cum = dict(h.cumulative())
    assert cum["0.1"] == 2  # 0.05 and exactly 0.1
    assert cum["0.5"] == 3
    assert cum["10.0"] == 4
    assert cum["30000.0"] == 4
    assert cum["+Inf"] == 5 == h.count
    assert h.sum == pytest.approx(0.05 + 0.1 + 0.3 + 7.0 + 99999.0)
    assert len(h.cumulative()) == len(LATENCY_BUCKETS_MS) + 1


def test_histogram_copy_is_an_independent_snapshot() -> None:
    h = LatencyHistogram()
    h.observe(3.0)
    snap = h.copy()
    h.observe(7.0)
    assert (snap.counts, snap.sum, snap.count) != (h.counts, h.sum, h.count)
    assert snap.count == 1 and snap.sum == 3.0 and dict(snap.cumulative())["5.0"] == 1


def test_request_metrics_per_api_and_version() -> None:
    m = RequestMetrics()
    m.record(0, 9, 0.1, 0.2, 3.0, 3.3)
    m.record(0, 10, 0.1, 0.2, 0.0, 0.3)
    m.record(1, 12, 0.0, 0.1, 500.0, 500.1)
    assert m.apis[0].requests == {9: 1, 10: 1}
    assert m.apis[0].total.count == 2 and m.apis[1].remote.sum == 500.0


def test_topic_stats_sum_and_removal() -> None:
    s = BrokerTopicStats()
    s.topic("a").bytes_in += 10
    s.topic("b").bytes_in += 5
    s.topic("b").messages_in += 2
    total = s.all_topics()
    assert (total.bytes_in, total.messages_in) == (15, 2)
    s.remove("a")
    assert s.all_topics().bytes_in == 5


def test_isr_changes_count_each_direction() -> None:
    st = IsrStats()
    st.record_change((1, 2, 3), (1, 2))
    st.record_change((1, 2), (1, 2, 3))
    st.record_change((1, 2), (1, 3))  # one out, one in
    assert (st.shrinks, st.expands) == (2, 2)


@pytest.mark.parametrize(
    "url,expected",
    [
        ("http://127.0.0.1:9404", ("127.0.0.1", 9404)),
        ("http://127.0.3.2:0/", ("127.0.3.2", 0)),
    ],
)
def test_listener_url(url: str, expected: tuple[str, int]) -> None:
    assert parse_listener_url(url) == expected


@pytest.mark.parametrize(
    "bad",
    [
        "127.0.0.1:9404",
        "https://h:1",
        "http://h",
        "http://:9",
        "http://h:99999",
        "http://h:1/metrics",
    ],
)
def test_listener_url_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_listener_url(bad)


def test_request_head() -> None:
    assert parse_request_head(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a") == ("GET", "/metrics", None)
    assert parse_request_head(b"HEAD / HTTP/1.0") == ("HEAD", "/", None)
    assert parse_request_head(
        b"GET /metrics?name[]=a_total&x=1&name%5B%5D=b+c&name[]=a_total HTTP/1.1"
    ) == ("GET", "/metrics", frozenset({"a_total", "b c"}))
    assert parse_request_head(b"GET /metrics?name[]= HTTP/1.1") == ("GET", "/metrics", None)
    for bad, status in (
        (b"GET /metrics", 400),
        (b"\xff\xfe / HTTP/1.1", 400),
        (b"DELETE /metrics HTTP/1.1", 405),
        (b"", 400),
    ):
        with pytest.raises(BadRequest) as e:
            parse_request_head(bad)
        assert e.value.status == status


def test_scrape_parse_keys_by_labels() -> None:
    s = parse(
        "# TYPE x counter\nx_total{topic=\"a\"} 3\nx_total 4\ny{topic=\"a\",partition=\"0\"} 7\n"
    )
    assert s.get("x_total", topic="a") == 3 and s.get("x_total") == 4
    assert s.by("y", "topic", "partition") == {("a", "0"): 7}
