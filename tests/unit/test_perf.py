"""odradek.perf: the pure parts (percentiles, windows, summaries, parsing)."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import pytest

from odradek.perf import (
    CONSUME_CSV_HEADER,
    ConsumeSummary,
    LatencyStats,
    cpu_seconds_per_gb,
    format_consume_csv,
    make_payload,
    parse_mock_bootstrap,
    parse_props,
    percentile,
    proc_cpu_seconds,
)


def test_percentile_uses_kafkas_index() -> None:
    values = [float(i) for i in range(1, 1001)]  # 1..1000
    assert percentile(values, 0.5) == 501.0  # element int(0.5 * 1000)
    assert percentile(values, 0.99) == 991.0
    assert percentile(values, 0.999) == 1000.0
    assert percentile(values, 1.0) == 1000.0  # clamped to the last element
    assert percentile([7.0], 0.999) == 7.0
    assert percentile([], 0.5) == 0.0
    with pytest.raises(ValueError):
        percentile(values, 99)


def test_latency_stats_summary() -> None:
    stats = LatencyStats(now=100.0, report_interval_s=5.0)
    for i in range(100):
        stats.record(float(i + 1), 10)  # latencies 1..100 ms
    s = stats.summary(end=102.0, sent=100)
    assert s.records == 100 and s.sent == 100 and s.errors == 0
    assert s.bytes == 1000
    assert s.records_per_sec == pytest.approx(50.0)
    assert s.mb_per_sec == pytest.approx(500 / (1024 * 1024))
    assert s.avg_latency_ms == pytest.approx(50.5)
    assert s.max_latency_ms == 100.0
    assert (s.p50_ms, s.p95_ms, s.p99_ms, s.p999_ms) == (51.0, 96.0, 100.0, 100.0)
    line = s.line()
    assert line.startswith(
        "100 records sent, 50.000000 records/sec (0.00 MB/sec), 50.50 ms avg latency"
    )
    assert line.endswith("51 ms 50th, 96 ms 95th, 100 ms 99th, 100 ms 99.9th.")
    assert json.loads(s.to_json())["p99_ms"] == 100.0


def test_latency_stats_windows() -> None:
    stats = LatencyStats(now=0.0, report_interval_s=5.0)
    stats.record(2.0, 1024 * 1024)
    stats.record(4.0, 1024 * 1024)
    assert stats.maybe_report(4.9) is None
    line = stats.maybe_report(5.0)
    assert (
        line
        == "2 records sent, 0.4 records/sec (0.40 MB/sec), 3.0 ms avg latency, 4.0 ms max latency."
    )
    # a new window starts empty; the totals keep everything
    assert stats.window.count == 0
    assert len(stats.latencies) == 2


def test_empty_summary_has_no_nan() -> None:
    s = LatencyStats(now=0.0).summary(end=1.0, sent=0)
    assert s.records == 0 and s.p99_ms == 0.0 and s.avg_latency_ms == 0.0


def test_parse_mock_bootstrap() -> None:
    line = (
        "MOCK [rdkafka#producer-1] [thrd:app]: Mock cluster enabled: original bootstrap.servers "
        "and security.protocol ignored and replaced with 127.0.0.1:44503"
    )
    assert parse_mock_bootstrap(line) == "127.0.0.1:44503"
    many = "Mock cluster enabled: ... replaced with 127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"
    assert parse_mock_bootstrap(many) == "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"
    assert parse_mock_bootstrap("some other log line") is None


def test_parse_props() -> None:
    assert parse_props(["acks=all", " linger.ms = 5", "sasl.jaas.config=a=b"]) == {
        "acks": "all",
        "linger.ms": "5",
        "sasl.jaas.config": "a=b",
    }
    assert parse_props(None) == {}
    with pytest.raises(ValueError):
        parse_props(["novalue"])


def test_consume_summary_and_csv() -> None:
    s = ConsumeSummary(
        start_ms=1_000_000,
        end_ms=1_002_000,
        messages=20000,
        bytes=2 * 1024 * 1024,
        fetch_start_ms=1_000_500,
    )
    assert s.mb == 2.0
    assert s.mb_per_sec == pytest.approx(1.0)
    assert s.msgs_per_sec == pytest.approx(10000.0)
    assert s.fetch_msgs_per_sec == pytest.approx(20000 / 1.5)
    assert len(CONSUME_CSV_HEADER.split(", ")) == 10
    cells = format_consume_csv(s).split(", ")
    assert len(cells) == 10
    assert cells[2:7] == ["2.0000", "1.0000", "20000", "10000.0000", "500"]
    assert cells[7] == "1500"
    # Kafka's date format: yyyy-MM-dd HH:mm:ss:SSS
    assert cells[0].endswith(":000") and cells[0].count(":") == 3


def test_payload_and_cpu_helpers() -> None:
    p = make_payload(100)
    assert len(p) == 100 and p == make_payload(100) and set(p) <= set(range(65, 91))
    assert cpu_seconds_per_gb(2.0, 500_000_000) == pytest.approx(4.0)
    assert math.isnan(cpu_seconds_per_gb(1.0, 0))
    assert proc_cpu_seconds(os.getpid()) > 0.0


def test_cli_registers_perf_subcommands() -> None:
    from odradek.cli import perf_cmd

    parser = argparse.ArgumentParser()
    perf_cmd.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        [
            "perf",
            "produce",
            "--bootstrap-server",
            "b:1",
            "--topic",
            "t",
            "--num-records",
            "10",
            "--record-size",
            "100",
            "--producer-props",
            "acks=all",
            "linger.ms=0",
            "--json",
        ]
    )
    assert args.func is perf_cmd.cmd_produce and args.throughput == -1
    assert args.producer_props == ["acks=all", "linger.ms=0"] and args.json
    args = parser.parse_args(
        ["perf", "consume", "--bootstrap-server", "b:1", "--topic", "t", "--messages", "5"]
    )
    assert args.func is perf_cmd.cmd_consume


def test_bench_table_renders_ratios() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    try:
        import broker_throughput as bt
    finally:
        sys.path.pop(0)
    rows = [
        bt.Row("mock", "100B", "produce", 10, 1000.0, 1.0, 1.0, 2.0, 3.0, 0.5),
        bt.Row("tansu", "100B", "produce", 10, 500.0, 0.5),
        bt.Row("odradek", "100B", "produce", 10, 250.0, 0.25),
    ]
    table = bt.render_table(rows).splitlines()
    assert table[0].split()[:3] == ["target", "workload", "phase"]
    odradek = table[3].split()
    assert odradek[-2:] == ["0.25", "0.50"]  # vs mock, vs tansu
