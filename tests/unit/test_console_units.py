"""Pure parts of the console: snapshots from raw answers, rates, decoding, charts,
the chaos report directory guard, the lag exporter."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from odradek.cluster.health import ClusterView, PartitionView
from odradek.console.browse import MAX_SHOWN_BYTES, decode
from odradek.console.charts import _gap_s, _segments, rate_chart
from odradek.console.lag_exporter import LagCollector
from odradek.console.reports import ChaosReports
from odradek.console.snapshot import RawGroup, RawState, SnapshotBuilder
from odradek.metrics.scrape import parse


def _view() -> ClusterView:
    return ClusterView(
        controller=1,
        live={1: "h:1", 2: "h:2"},
        known={1, 2, 3},
        partitions=[
            PartitionView("t", 0, 1, (1, 2, 3), (1, 2)),
            PartitionView("t", 1, -1, (3,), (3,)),
        ],
        min_isr={"t": 2},
    )


def _metrics(bytes_in: float, leo: int = 40) -> object:
    return parse(
        f"kafka_server_brokertopicmetrics_bytesin_total {bytes_in}\n"
        "kafka_server_brokertopicmetrics_bytesout_total 0\n"
        "kafka_server_brokertopicmetrics_messagesin_total 0\n"
        f'kafka_log_log_logendoffset{{topic="t",partition="0"}} {leo}\n'
        'kafka_log_log_size{topic="t",partition="0"} 4096\n'
    )


def test_snapshot_rows_rates_and_lag() -> None:
    b = SnapshotBuilder()
    raw = RawState(
        taken_at=100.0,
        view=_view(),
        high_watermarks={("t", 0): 40},
        log_starts={("t", 0): 0},
        groups=[
            RawGroup("g", "Stable", "range", 1, [("m-1", "c", "/h", [("t", 0)])], {("t", 0): 30})
        ],
        metrics={1: _metrics(1000)},
        metrics_urls={1: "u1", 2: "u2"},
    )
    s1 = b.build(raw)
    assert [(r.id, r.up) for r in s1.brokers] == [(1, True), (2, False), (3, False)]
    # 2 is live in Metadata but its metrics endpoint failed: down at once.
    assert s1.health is not None and s1.health.nodes_down == [3]
    t = s1.topic("t")
    assert t is not None and t.under_replicated == 1 and t.offline == 1
    p0 = t.partitions[0]
    assert (p0.high_watermark, p0.log_end_offset, p0.size_bytes, p0.out_of_sync) == (
        40,
        40,
        4096,
        (3,),
    )
    g = s1.group("g")
    assert g is not None and g.total_lag == 10 and g.lags[0].member == "m-1"
    raw2 = RawState(
        taken_at=102.0, view=_view(), metrics={1: _metrics(3000)}, metrics_urls={1: "u1"}
    )
    s2 = b.build(raw2)
    rate = s2.brokers[0].rate
    assert rate is not None and rate.bytes_in == 1000.0 and s2.version == 2
    assert len(s2.brokers[0].history) == 1
    # The collector scrapes every 15 s and rounds more often: a round that carries the
    # same scrape again keeps its rate and adds no point to the history.
    raw3 = RawState(
        taken_at=104.0,
        view=_view(),
        metrics={1: _metrics(3000)},
        metrics_at={1: 102.0},
        metrics_urls={1: "u1"},
    )
    s3 = b.build(raw3)
    assert s3.brokers[0].rate == rate and len(s3.brokers[0].history) == 1


def test_snapshot_keeps_the_last_view_when_metadata_fails() -> None:
    b = SnapshotBuilder()
    b.build(RawState(taken_at=1.0, view=_view()))
    s = b.build(RawState(taken_at=2.0, view=None, errors=["metadata: timed out"]))
    assert s.topic("t") is not None and s.errors == ("metadata: timed out",)


def test_decode_formats() -> None:
    assert decode(None).format == "null"
    assert decode(b'{"a": [1, 2]}').format == "json"
    assert decode(b'"just a string"').format == "text"  # auto: only objects and arrays
    assert decode(b'"just a string"', "json").text == '"just a string"'
    assert decode("héllo".encode()).text == "héllo"
    assert decode(b"\x00\x01\xff").format == "hex"
    assert decode(b"not json", "json").format == "text"
    big = ("é" * MAX_SHOWN_BYTES).encode()
    d = decode(big)
    assert d.format == "text" and d.truncated == len(big) - len(d.text.encode())


def test_chart_breaks_lines_at_gaps_and_escapes_nothing_unsafe() -> None:
    assert [len(s) for s in _segments([(0, 1), (1, 1), (10, 1), (11, 1)])] == [2, 2]
    # Scrapes every 15 s draw one line; a missing scrape or more breaks it.
    every_15 = [(t, 1.0) for t in (0, 15, 30, 45, 60, 120, 135)]
    assert [len(s) for s in _segments(every_15, _gap_s(every_15))] == [5, 2]
    assert "waiting" in str(rate_chart([]))


def test_reports_are_confined_to_their_directories(tmp_path: Path) -> None:
    rep = tmp_path / "runs" / "chaos-1" / "report"
    rep.mkdir(parents=True)
    (rep / "index.html").write_text("<html>report</html>")
    (rep / "summary.json").write_text(
        json.dumps([{"scenario": "a", "result": "FAIL"}, {"scenario": "b", "result": "PASS"}])
    )
    (rep / "a.png").write_bytes(b"png")
    (tmp_path / "secret.txt").write_text("no")
    reports = ChaosReports([tmp_path / "runs"])
    [r] = reports.list()
    assert (r.scenarios, r.failed, r.timelines) == (2, 1, ("a.png",))
    assert reports.resolve(r.rid, "a.png") == (rep / "a.png").resolve()
    assert reports.resolve(r.rid, "../../../secret.txt") is None
    assert reports.resolve("nope", "index.html") is None


def test_lag_exporter_names() -> None:
    b = SnapshotBuilder()
    snap = b.build(
        RawState(
            taken_at=1.0,
            view=_view(),
            high_watermarks={("t", 0): 40},
            groups=[RawGroup("g", "Empty", "", 1, [], {("t", 0): 25})],
        )
    )
    reg = CollectorRegistry()
    reg.register(LagCollector(lambda: snap))
    s = parse(generate_latest(reg).decode())
    assert s.get("kafka_consumergroup_lag", consumergroup="g", topic="t", partition="0") == 15
    assert s.get("kafka_consumergroup_lag_sum", consumergroup="g", topic="t") == 15
    assert s.get("kafka_topic_partition_current_offset", topic="t", partition="0") == 40


# ------------------------------------------------------------------ logins (issue 28 item 5)
def test_basic_credentials_and_loopback() -> None:
    from base64 import b64encode

    from odradek.console.server import _loopback
    from odradek.security.http_basic import basic_credentials as _basic_credentials

    def basic(text: str) -> str:
        return "Basic " + b64encode(text.encode()).decode()

    assert _basic_credentials(basic("alice:pa:ss")) == ("alice", "pa:ss")
    assert _basic_credentials(basic("alice")) is None
    assert _basic_credentials(basic(":pw")) is None
    assert _basic_credentials("Basic !!!") is None
    assert _basic_credentials("Bearer x") is None
    assert _basic_credentials("Basic " + "A" * 5000) is None
    assert _loopback("127.0.3.1") and _loopback("::1") and _loopback("localhost")
    assert not _loopback("0.0.0.0") and not _loopback("10.1.2.3")
    assert not _loopback("console.example.com")


def test_a_viewer_sees_only_what_it_may_describe() -> None:
    from odradek.console.auth import Viewer
    from odradek.security.client_security import ClientSecurity

    raw = RawState(
        taken_at=100.0,
        view=_view(),
        high_watermarks={("t", 0): 40},
        groups=[
            RawGroup("g", "Stable", "range", 1, [], {("t", 0): 30}),
            RawGroup("h", "Stable", "range", 1, [], {}),
        ],
    )
    snap = SnapshotBuilder().build(raw)
    sec = ClientSecurity("SASL_PLAINTEXT", "PLAIN", "alice", "pw")
    seen = Viewer("alice", sec, frozenset(), frozenset({"h"})).filter(snap)
    assert seen.topics == () and [g.group_id for g in seen.groups] == ["h"]
    assert seen.brokers == snap.brokers and seen.version == snap.version
    everything = Viewer("root", sec, frozenset({"t"}), frozenset({"g", "h"})).filter(snap)
    assert everything == snap


def test_logins_are_checked_by_the_cluster_and_cached() -> None:
    import asyncio

    import pytest

    from odradek.console.auth import ConsoleLogin, LoginRefused, Viewer
    from odradek.security.client_security import ClientSecurity

    sec = ClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-512", "admin", "root-pw")
    asked: list[tuple[str, str]] = []

    def check(bootstrap: str, security: ClientSecurity, user: str, pw: str) -> Viewer:
        asked.append((user, pw))
        if pw != "right":
            raise LoginRefused("SASL authentication failed")
        return Viewer(user, security, frozenset(), frozenset())

    async def scenario() -> None:
        login = ConsoleLogin("h:1", sec, check=check, ttl_s=60)
        assert (await login.viewer("alice", "right")).user == "alice"
        await login.viewer("alice", "right")
        assert asked == [("alice", "right")]  # cached
        with pytest.raises(LoginRefused):
            await login.viewer("alice", "wrong")
        with pytest.raises(LoginRefused):  # a refusal is never cached as a success
            await login.viewer("alice", "wrong")
        assert len(asked) == 3
        assert all(b"right" not in k for k in login._cache)

    asyncio.run(scenario())
