"""Server-rendered SVG charts for the console (no JavaScript charting library).

``rate_chart`` draws one line per broker over the collector's rate history (bytes in,
bytes out or records in per second); ``sparkline`` a small inline trend. The markup is
built from numbers only (broker ids, rates), so there is nothing to escape.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence

from markupsafe import Markup

from odradek.console.snapshot import BrokerRow, RatePoint

logger = logging.getLogger(__name__)

__all__ = ["rate_chart", "sparkline", "COLORS"]

COLORS = ("#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563")
FIELDS = {"bytes_in": "bytes in/s", "bytes_out": "bytes out/s", "messages_in": "records in/s"}


def _nice(v: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= div:
            return f"{v / div:.1f}{unit}"
    return f"{v:.0f}"


def _segments(
    points: list[tuple[float, float]], gap_s: float = 5.0
) -> list[list[tuple[float, float]]]:
    """Split a series where consecutive samples are more than ``gap_s`` apart."""
    out: list[list[tuple[float, float]]] = []
    for p in points:
        if not out or p[0] - out[-1][-1][0] > gap_s:
            out.append([])
        out[-1].append(p)
    return out


def _gap_s(points: list[tuple[float, float]]) -> float:
    steps = sorted(b[0] - a[0] for a, b in itertools.pairwise(points))
    return max(5.0, 2.5 * steps[len(steps) // 2]) if steps else 5.0


def rate_chart(
    brokers: Sequence[BrokerRow], field: str = "bytes_in", width: int = 400, height: int = 170
) -> Markup:
    if field not in FIELDS:
        raise ValueError(field)
    series = [(b.id, [(p.t, getattr(p, field)) for p in b.history]) for b in brokers]
    points = [pt for _, s in series for pt in s]
    pad_l, pad_b, pad_t = 48, 18, 22
    w, h = width - pad_l - 4, height - pad_b - pad_t
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-label="{FIELDS[field]} per broker">'
    ]
    parts.append(f'<text x="6" y="14" class="title">{FIELDS[field]}</text>')
    if not points:
        parts.append(
            f'<text x="{pad_l}" y="{height // 2}" class="axis">'
            "waiting for two scrapes…</text></svg>"
        )
        return Markup("".join(parts))
    t0 = min(t for t, _ in points)
    t1 = max(max(t for t, _ in points), t0 + 1)
    top = max(max(v for _, v in points), 1.0) * 1.1
    for frac in (0.0, 0.5, 1.0):
        y = pad_t + h - frac * h
        parts.append(
            f'<line x1="{pad_l}" y1="{y:.1f}" x2="{pad_l + w}" y2="{y:.1f}" class="grid"/>'
        )
        parts.append(
            f'<text x="{pad_l - 4}" y="{y + 4:.1f}" class="axis" '
            f'text-anchor="end">{_nice(top * frac)}</text>'
        )
    parts.append(f'<text x="{pad_l}" y="{height - 4}" class="axis">-{t1 - t0:.0f} s</text>')
    parts.append(
        f'<text x="{pad_l + w}" y="{height - 4}" class="axis" text-anchor="end">now</text>'
    )
    for i, (bid, s) in enumerate(series):
        color = COLORS[i % len(COLORS)]
        # A broker that was down leaves a gap, not a slope: a gap is a missing scrape or
        # more (the collector scrapes every 15 s by default, once a second before).
        for seg in _segments(s, _gap_s(s)):
            if len(seg) < 2:
                continue
            coords = " ".join(
                f"{pad_l + (t - t0) / (t1 - t0) * w:.1f},{pad_t + h - v / top * h:.1f}"
                for t, v in seg
            )
            parts.append(
                f'<polyline fill="none" stroke="{color}" stroke-width="1.5" '
                f'points="{coords}"><title>broker {bid}</title></polyline>'
            )
    legend_x = width - 4 - 62 * len(series)
    for i, (bid, _) in enumerate(series):
        parts.append(
            f'<text x="{legend_x + i * 62}" y="14" class="legend" '
            f'fill="{COLORS[i % len(COLORS)]}">broker {bid}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def sparkline(
    history: Sequence[RatePoint], field: str = "bytes_in", width: int = 120, height: int = 24
) -> Markup:
    vals = [getattr(p, field) for p in history][-60:]
    if len(vals) < 2:
        return Markup("")
    top = max(max(vals), 1.0)
    step = width / (len(vals) - 1)
    coords = " ".join(
        f"{i * step:.1f},{height - 2 - v / top * (height - 4):.1f}" for i, v in enumerate(vals)
    )
    return Markup(
        f'<svg class="spark" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}"><polyline fill="none" stroke="#2563eb" '
        f'stroke-width="1.2" points="{coords}"/></svg>'
    )
