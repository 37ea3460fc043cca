"""The report a person wants to look at (issue 6 item 7).

Per scenario: a timeline PNG -- acknowledged records/s, errors/s by kind, leader and ISR
size per partition (from ``events.parquet``), shaded fault windows, phase markers -- and
per run an HTML page (summary table + the PNGs + each expectation) and a terminal table.

Inputs are a run directory (``RUN/<scenario>/{producer,events}.parquet``) and the results
(``results.json``, written by ``odradek chaos run``: name, ok, error, seconds, metrics
from the Spark checker, checks). The computations here (rates, longest gap, fault
windows) are pure functions over plain lists, unit-tested; plotting uses matplotlib's
Agg backend (no display).

"Unavailable seconds" is reported two ways: the checker's ``unavailable_s`` (0.5 s bins
between the first and last send without any acknowledgement) and ``longest_gap_s``
(the longest time without an acknowledgement while the producer was sending) -- the
number a person feels as an outage.
"""

from __future__ import annotations

import html
import itertools
import json
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "FaultWindow",
    "rate_series",
    "longest_gap",
    "fault_windows",
    "state_series",
    "load_tables",
    "summarize",
    "format_summary",
    "markdown_summary",
    "plot_timeline",
    "write_report",
    "SUMMARY_COLUMNS",
]


@dataclass(frozen=True)
class FaultWindow:
    start: float
    end: float
    label: str


# ----------------------------------------------------------------- pure computations


def rate_series(
    ts: Sequence[float], t0: float, t1: float, bin_s: float = 1.0
) -> tuple[list[float], list[float]]:
    """Events per second in ``bin_s`` bins over [t0, t1): (bin starts relative to t0,
    rates)."""
    n = max(1, math.ceil((t1 - t0) / bin_s))
    counts = [0] * n
    for t in ts:
        i = int((t - t0) // bin_s)
        if 0 <= i < n:
            counts[i] += 1
    return [i * bin_s for i in range(n)], [c / bin_s for c in counts]


def longest_gap(send_ts: Sequence[float], ack_ts: Sequence[float]) -> float:
    """Longest time without an acknowledgement while sending: over [first send, last
    send], the largest gap between consecutive acks (counting the window's ends)."""
    if not send_ts:
        return 0.0
    t0, t1 = min(send_ts), max(send_ts)
    inside = sorted(t for t in ack_ts if t0 <= t <= t1)
    points = [t0, *inside, t1]
    return round(max(b - a for a, b in itertools.pairwise(points)) if len(points) > 1 else 0.0, 2)


def _proc_nodes(detail: str) -> tuple[str, list[str]] | None:
    """``SIGKILL b2`` / ``SIGTERM 1,2,3`` -> (signal, nodes); a pause (SIGSTOP) is a
    Fault healed under its own name, so it is not a process window here."""
    parts = detail.split(" ", 1)
    if len(parts) == 2 and parts[0] in ("SIGKILL", "SIGTERM"):
        return parts[0], [n.strip() for n in parts[1].split(",")]
    return None


def _norm(node: str) -> str:
    node = node.strip().lower()
    return node if node.startswith(("b", "zk", "client")) else f"b{node}"


def fault_windows(events: Sequence[tuple[float, str, str]], end: float) -> list[FaultWindow]:
    """Pair ``fault`` events with their ``heal`` (events as (ts, kind, detail)): network
    faults and pauses heal under the same name; ``SIGKILL X``/``SIGTERM X`` end at
    ``start X``. A fault never healed lasts until ``end``."""
    open_: dict[str, list[tuple[float, str]]] = defaultdict(list)
    out: list[FaultWindow] = []
    for ts, kind, detail in sorted(events, key=lambda e: e[0]):
        if kind == "fault":
            proc = _proc_nodes(detail)
            if proc:
                for n in proc[1]:
                    open_[f"proc:{_norm(n)}"].append((ts, f"{proc[0]} {_norm(n)}"))
            else:
                open_[detail].append((ts, detail))
        elif kind == "heal":
            key = f"proc:{_norm(detail[6:])}" if detail.startswith("start ") else detail
            if open_.get(key):
                st, label = open_[key].pop(0)
                out.append(FaultWindow(st, ts, label))
    for lst in open_.values():
        out.extend(FaultWindow(st, max(st, end), label) for st, label in lst)
    return sorted(out, key=lambda w: (w.start, w.label))


def state_series(
    events: Sequence[tuple[float, str, int | None, int | None, str | None]],
) -> dict[int, list[tuple[float, int, int]]]:
    """Per partition, the (ts, leader, ISR size) steps from ``state`` events given as
    (ts, kind, partition, leader, isr-json)."""
    out: dict[int, list[tuple[float, int, int]]] = defaultdict(list)
    for ts, kind, part, leader, isr in sorted(events, key=lambda e: e[0]):
        if kind != "state" or part is None:
            continue
        out[int(part)].append(
            (ts, int(leader if leader is not None else -1), len(json.loads(isr)) if isr else 0)
        )
    return dict(out)


SUMMARY_COLUMNS = [
    ("scenario", "scenario"),
    ("acked", "acked"),
    ("lost", "lost"),
    ("duplicated", "dup"),
    ("out_of_order", "ooo"),
    ("divergent", "diverg"),
    ("unavailable_s", "unavail s"),
    ("longest_gap_s", "max gap s"),
    ("split_brain_s", "split-brain s"),
    ("result", "result"),
]


def summarize(result: dict[str, Any], longest_gap_s: float | None) -> dict[str, Any]:
    m = result.get("metrics") or {}
    failed = [c["what"] for c in result.get("checks", []) if not c.get("ok")]
    return {
        "scenario": result["name"],
        "acked": m.get("acked"),
        "lost": m.get("lost"),
        "duplicated": m.get("duplicated"),
        "out_of_order": m.get("out_of_order"),
        "divergent": m.get("divergent"),
        "unavailable_s": m.get("unavailable_s"),
        "longest_gap_s": longest_gap_s,
        "split_brain_s": m.get("split_brain_s"),
        "split_brain_acks": m.get("split_brain_acks"),
        "result": "PASS" if result.get("ok") else "FAIL",
        "failed": failed + ([f"error: {result['error']}"] if result.get("error") else []),
        "seconds": result.get("seconds"),
    }


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.1f}"
    return str(v)


def format_summary(rows: Sequence[dict[str, Any]]) -> str:
    """A fixed-width terminal table, one line per scenario, plus the failures."""
    heads = [h for _, h in SUMMARY_COLUMNS]
    cells = [[_cell(r.get(k)) for k, _ in SUMMARY_COLUMNS] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(heads)]

    def line(cs: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cs, widths))
        )

    out = [line(heads), line(["-" * w for w in widths])] + [line(c) for c in cells]
    for r in rows:
        for f in r.get("failed", []):
            out.append(f"  {r['scenario']}: FAILED {f}")
    return "\n".join(out)


def markdown_summary(rows: Sequence[dict[str, Any]]) -> str:
    heads = [h for _, h in SUMMARY_COLUMNS]
    out = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for r in rows:
        out.append("| " + " | ".join(_cell(r.get(k)) for k, _ in SUMMARY_COLUMNS) + " |")
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------- inputs


def load_tables(scn_dir: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(producer rows (seq, kind, ts, partition, error), event rows (ts, kind, detail,
    partition, leader, isr)) of one scenario directory."""
    import pyarrow.parquet as pq

    def rows(name: str, cols: list[str]) -> list[tuple[Any, ...]]:
        p = scn_dir / f"{name}.parquet"
        if not p.exists():
            return []
        t = pq.read_table(p, columns=cols).to_pydict()
        return list(zip(*[t[c] for c in cols]))

    return (
        rows("producer", ["seq", "kind", "ts", "partition", "error"]),
        rows("events", ["ts", "kind", "detail", "partition", "leader", "isr"]),
    )


def _final_seqs(scn_dir: Path) -> set[int] | None:
    """Seqs of the final read (None without one): an ack whose seq is missing was lost."""
    import pyarrow.parquet as pq

    p = scn_dir / "reads.parquet"
    if not p.exists():
        return None
    t = pq.read_table(p, columns=["phase", "seq"]).to_pydict()
    return {q for ph, q in zip(t["phase"], t["seq"]) if ph == "final"}


def gap_of(scn_dir: Path) -> float | None:
    prod, _ = load_tables(scn_dir)
    if not prod:
        return None
    return longest_gap(
        [r[2] for r in prod if r[1] == "send"], [r[2] for r in prod if r[1] == "ack"]
    )


# ----------------------------------------------------------------- plotting


def plot_timeline(scn_dir: Path, out_png: Path, title: str = "") -> Path | None:
    """The timeline PNG of one scenario; None when there is no history to plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    prod, events = load_tables(scn_dir)
    if not prod:
        return None
    send_ts = [r[2] for r in prod if r[1] == "send"]
    all_ts = [r[2] for r in prod] + [e[0] for e in events]
    t0, t1 = min(all_ts), max(all_ts)
    end = t1 - t0
    fig, (ax1, ax2, ax3) = plt.subplots(
        3, 1, figsize=(10, 6.2), sharex=True, gridspec_kw={"height_ratios": [3, 1.4, 1.2]}
    )
    xs, acks = rate_series([r[2] for r in prod if r[1] == "ack"], t0, t1)
    ax1.step(xs, acks, where="post", color="tab:green", lw=1.3, label="acked/s")
    final = _final_seqs(scn_dir)
    if final is not None:
        lost_ts = [r[2] for r in prod if r[1] == "ack" and r[0] not in final]
        if lost_ts:
            xs, lost = rate_series(lost_ts, t0, t1)
            ax1.step(
                xs,
                lost,
                where="post",
                color="black",
                lw=1.3,
                label=f"acked, later lost/s ({len(lost_ts)})",
            )
    xs, sent = rate_series(send_ts, t0, t1)
    ax1.step(xs, sent, where="post", color="tab:gray", lw=0.8, ls=":", label="sent/s")
    by_kind: dict[str, list[float]] = defaultdict(list)
    for r in prod:
        if r[1] == "error":
            by_kind[r[4] or "?"].append(r[2])
    colors = ["tab:red", "tab:orange", "tab:purple", "tab:brown", "tab:pink", "tab:olive"]
    for i, (kind, ts) in enumerate(sorted(by_kind.items())):
        xs, er = rate_series(ts, t0, t1)
        ax1.step(
            xs, er, where="post", color=colors[i % len(colors)], lw=1.0, label=f"error {kind}/s"
        )  # (a label starting with "_" is hidden)
    ax1.set_ylabel("records/s")
    ax1.legend(loc="upper right", fontsize=7, ncol=2)
    ax1.set_title(title or scn_dir.name, fontsize=10)

    states = state_series([(e[0], e[1], e[3], e[4], e[5]) for e in events])
    for p, steps in sorted(states.items()):
        px = [s[0] - t0 for s in steps] + [end]
        ax2.step(px, [s[1] for s in steps] + [steps[-1][1]], where="post", lw=1.2, label=f"p{p}")
        ax3.step(px, [s[2] for s in steps] + [steps[-1][2]], where="post", lw=1.2, label=f"p{p}")
    ax2.set_ylabel("leader")
    ax2.set_yticks(sorted({s[1] for st in states.values() for s in st} | {-1}))
    ax3.set_ylabel("ISR size")
    ax3.set_yticks([0, 1, 2, 3])
    ax3.set_xlabel("seconds")
    if len(states) > 1:
        ax2.legend(loc="upper right", fontsize=7, ncol=len(states))

    wins = fault_windows([(e[0], e[1], e[2]) for e in events], t1)
    for i, w in enumerate(wins):
        for ax in (ax1, ax2, ax3):
            ax.axvspan(w.start - t0, w.end - t0, color="tab:red", alpha=0.10, lw=0)
        ax1.annotate(
            w.label,
            (w.start - t0, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(2, -9 - 8 * (i % 4)),
            textcoords="offset points",
            fontsize=6,
            color="darkred",
        )
    for e in events:
        if e[1] == "phase":
            for ax in (ax1, ax2, ax3):
                ax.axvline(e[0] - t0, color="tab:blue", lw=0.6, ls="--", alpha=0.6)
            ax3.annotate(
                e[2],
                (e[0] - t0, 0.02),
                xycoords=("data", "axes fraction"),
                fontsize=6,
                color="tab:blue",
                rotation=90,
                va="bottom",
            )
    fig.tight_layout()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=80)
    plt.close(fig)
    return out_png


# ----------------------------------------------------------------- the run report


def _html(
    rows: list[dict[str, Any]], results: list[dict[str, Any]], pngs: dict[str, str], command: str
) -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(h)}</th>" for _, h in SUMMARY_COLUMNS)
    body = []
    for r in rows:
        cls = "pass" if r["result"] == "PASS" else "fail"
        tds = "".join(f"<td>{esc(_cell(r.get(k)))}</td>" for k, _ in SUMMARY_COLUMNS[1:])
        body.append(
            f'<tr class="{cls}"><td><a href="#{esc(r["scenario"])}">'
            f'{esc(r["scenario"])}</a></td>{tds}</tr>'
        )
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>Odradek chaos report</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}"
        "td:first-child{text-align:left}tr.fail{background:#fdd}tr.pass td:last-child"
        "{color:green}.ok{color:green}.bad{color:#b00;font-weight:bold}img{max-width:100%}"
        "</style></head><body>",
        "<h1>Odradek chaos report</h1>",
        f"<p>Command: <code>{esc(command)}</code></p>" if command else "",
        "<p>unavail s: 0.5 s bins without an acknowledgement between the first and the "
        "last send; max gap s: longest time without an acknowledgement while sending; "
        "split-brain s: how long a deposed leader acknowledged after the new leader's "
        "election (records later lost).</p>",
        f"<table><tr>{head}</tr>{''.join(body)}</table>",
    ]
    for res in results:
        name = res["name"]
        parts.append(
            f'<h2 id="{esc(name)}">{esc(name)} '
            f'<span class="{"ok" if res.get("ok") else "bad"}">'
            f'{"PASS" if res.get("ok") else "FAIL"}</span></h2>'
        )
        if res.get("title"):
            parts.append(f"<p>{esc(res['title'])}</p>")
        if res.get("error"):
            parts.append(f'<p class="bad">error: {esc(str(res["error"]))}</p>')
        if name in pngs:
            parts.append(f'<img src="{esc(pngs[name])}" alt="timeline of {esc(name)}">')
        items = "".join(
            f'<li class="{"ok" if c.get("ok") else "bad"}">{esc(c["what"])}: '
            f'{esc(str(c.get("observed")))}</li>'
            for c in res.get("checks", [])
        )
        parts.append(f"<ul>{items}</ul>")
        if res.get("schedule"):
            parts.append(
                "<details><summary>nemesis schedule</summary><pre>"
                + esc("\n".join(res["schedule"]))
                + "</pre></details>"
            )
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(
    run_dir: Path,
    results: list[dict[str, Any]],
    out_dir: Path,
    *,
    command: str = "",
    plots: bool = True,
) -> list[dict[str, Any]]:
    """PNG per scenario, ``index.html``, ``summary.json`` and ``summary.md`` in
    ``out_dir``; returns the summary rows (also what the terminal table shows)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    pngs: dict[str, str] = {}
    for res in results:
        d = Path(run_dir) / res["name"]
        rows.append(summarize(res, gap_of(d) if d.is_dir() else None))
        if plots and d.is_dir():
            try:
                title = f"{res['name']}: {res.get('title', '')}".split(". Expected")[0]
                png = plot_timeline(
                    d,
                    out_dir / f"{res['name']}.png",
                    title if len(title) <= 120 else title[:117] + "...",
                )
                if png is not None:
                    pngs[res["name"]] = png.name
            except Exception as e:  # a plot must not hide the results
                res.setdefault("checks", [])
                res["error_plot"] = repr(e)
    (out_dir / "index.html").write_text(_html(rows, results, pngs, command))
    (out_dir / "summary.json").write_text(json.dumps(rows, indent=1, default=str) + "\n")
    (out_dir / "summary.md").write_text(markdown_summary(rows))
    return rows
