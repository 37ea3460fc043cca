"""Report computations (issue 6 item 7): rates, longest gap, fault windows, tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odradek.chaos.report import (
    FaultWindow,
    fault_windows,
    format_summary,
    longest_gap,
    markdown_summary,
    rate_series,
    state_series,
    summarize,
    write_report,
)


def test_rate_series_bins() -> None:
    xs, rates = rate_series([100.1, 100.2, 100.9, 101.5, 103.0], 100.0, 103.5, 1.0)
    assert xs == [0.0, 1.0, 2.0, 3.0]
    assert rates == [3.0, 1.0, 0.0, 1.0]
    _, half = rate_series([0.1, 0.2], 0.0, 1.0, 0.5)
    assert half == [4.0, 0.0]


def test_longest_gap() -> None:
    sends = [0.0, 1.0, 2.0, 10.0]
    assert longest_gap(sends, [0.5, 1.5, 8.5]) == 7.0  # 1.5 -> 8.5
    assert longest_gap(sends, [9.9]) == 9.9  # from the first send
    assert longest_gap(sends, []) == 10.0
    assert longest_gap([], [1.0]) == 0.0
    assert longest_gap([0.0, 4.0], [0.0, 2.0, 4.0, 30.0]) == 2.0  # acks after sending ignored


def test_fault_windows_pairing() -> None:
    ev = [
        (1.0, "fault", "SIGKILL b2"),
        (2.0, "fault", "partition b1 <-> zk"),
        (3.0, "heal", "partition b1 <-> zk"),
        (4.0, "heal", "start b2"),
        (5.0, "fault", "SIGSTOP 3"),
        (6.0, "heal", "SIGSTOP 3"),
        (7.0, "fault", "SIGKILL 1,2"),
        (8.0, "heal", "start 1"),
        (9.0, "fault", "isolate b3 from zk,b1,b2"),
        (5.5, "phase", "x"),
    ]
    w = fault_windows(ev, end=12.0)
    assert w == [
        FaultWindow(1.0, 4.0, "SIGKILL b2"),
        FaultWindow(2.0, 3.0, "partition b1 <-> zk"),
        FaultWindow(5.0, 6.0, "SIGSTOP 3"),
        FaultWindow(7.0, 8.0, "SIGKILL b1"),
        FaultWindow(7.0, 12.0, "SIGKILL b2"),  # never restarted: until the end
        FaultWindow(9.0, 12.0, "isolate b3 from zk,b1,b2"),
    ]


def test_state_series() -> None:
    ev = [
        (2.0, "state", 0, 2, "[2, 3]"),
        (1.0, "state", 0, 1, "[1, 2, 3]"),
        (1.5, "state", 1, 3, "[3]"),
        (1.7, "controller", None, 1, None),
    ]
    assert state_series(ev) == {0: [(1.0, 1, 3), (2.0, 2, 2)], 1: [(1.5, 3, 1)]}


def _result(name: str, ok: bool = True) -> dict:
    return {
        "name": name,
        "ok": ok,
        "error": None,
        "seconds": 40.0,
        "title": "t",
        "metrics": {
            "acked": 100,
            "lost": 0 if ok else 3,
            "duplicated": 0,
            "out_of_order": 0,
            "divergent": 0,
            "unavailable_s": 1.5,
            "split_brain_s": 0.0,
        },
        "checks": [{"what": "lost == 0", "ok": ok, "observed": "0" if ok else "3"}],
    }


def test_summary_tables() -> None:
    rows = [summarize(_result("a"), 2.25), summarize(_result("b", ok=False), None)]
    assert rows[0]["result"] == "PASS" and rows[1]["failed"] == ["lost == 0"]
    text = format_summary(rows)
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["scenario", "acked", "lost"]
    assert "2.2" in lines[2] or "2.3" in lines[2]
    assert lines[-1] == "  b: FAILED lost == 0"
    md = markdown_summary(rows)
    assert md.count("\n") == 4 and "| b | 100 | 3 |" in md


def _write_history(d: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from odradek.chaos.workload import EVENTS_SCHEMA, PRODUCER_SCHEMA

    d.mkdir(parents=True)
    prod = [
        ("s1", i, k, 100.0 + i * 0.1 + (0.05 if k == "ack" else 0), 0, None, None)
        for i in range(50)
        for k in ("send", "ack")
        if not (k == "ack" and 20 <= i < 30)
    ]
    prod += [("s1", 25, "error", 103.0, 0, None, "NOT_ENOUGH_REPLICAS")]
    ev = [
        ("s1", 100.0, "state", "", 0, 1, 0, "[1, 2, 3]"),
        ("s1", 102.0, "fault", "SIGKILL b1", None, None, None, None),
        ("s1", 102.5, "state", "", 0, 2, 1, "[2, 3]"),
        ("s1", 103.5, "heal", "start b1", None, None, None, None),
        ("s1", 100.0, "phase", "steady", None, None, None, None),
    ]
    for name, rows, schema in (("producer", prod, PRODUCER_SCHEMA), ("events", ev, EVENTS_SCHEMA)):
        cols = list(zip(*rows))
        pq.write_table(
            pa.table(
                {
                    n: pa.array(list(c), type=schema.field(n).type)
                    for n, c in zip(schema.names, cols)
                }
            ),
            d / f"{name}.parquet",
        )


def test_write_report_with_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    _write_history(tmp_path / "run" / "s1")
    out = tmp_path / "report"
    rows = write_report(tmp_path / "run", [_result("s1")], out, command="odradek chaos run s1")
    assert rows[0]["longest_gap_s"] == pytest.approx(1.1, abs=0.01)  # acks 19 -> 30
    png = out / "s1.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (out / "index.html").read_text()
    assert 'src="s1.png"' in page and "odradek chaos run s1" in page
    assert json.loads((out / "summary.json").read_text())[0]["scenario"] == "s1"


def test_cli_report_rerenders_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    from odradek.cli.main import main

    run = tmp_path / "run"
    _write_history(run / "s1")
    (run / "results.json").write_text(
        json.dumps(
            {"command": "odradek chaos run s1", "results": [_result("s1"), _result("s2", False)]}
        )
    )
    assert main(["chaos", "report", str(run)]) == 1  # s2 failed
    text = capsys.readouterr().out
    assert "s1" in text and "FAILED lost == 0" in text
    assert (run / "report" / "s1.png").exists() and (run / "report" / "index.html").exists()
