"""Read a Prometheus text endpoint (a broker's ``/metrics``) into plain values.

Used by the console (LEO per replica, byte rates) and by tests. The body is bounded
(``MAX_BODY_BYTES``) and the request has a deadline: a broker that hangs or answers
garbage yields an error for that broker only.
"""

from __future__ import annotations

import logging
import urllib.request
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

logger = logging.getLogger(__name__)

__all__ = ["MAX_BODY_BYTES", "Samples", "scrape", "parse"]

MAX_BODY_BYTES = 32 << 20

Labels = tuple[tuple[str, str], ...]


@dataclass
class Samples:
    """Sample name → {sorted label pairs: value}."""

    values: dict[str, dict[Labels, float]] = field(default_factory=dict)

    def get(self, name: str, **labels: str) -> float | None:
        """The value of ``name`` with exactly these labels (None if absent)."""
        return self.values.get(name, {}).get(tuple(sorted(labels.items())))

    def series(self, name: str) -> dict[Labels, float]:
        return self.values.get(name, {})

    def by(self, name: str, *keys: str) -> dict[tuple[str, ...], float]:
        """``name``'s samples keyed by the given label values, e.g. by("x", "topic")."""
        out: dict[tuple[str, ...], float] = {}
        for labels, v in self.series(name).items():
            d = dict(labels)
            if all(k in d for k in keys):
                out[tuple(d[k] for k in keys)] = v
        return out

    def __contains__(self, name: str) -> bool:
        return name in self.values


def parse(text: str) -> Samples:
    out = Samples()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.values.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def scrape(url: str, timeout_s: float = 3.0) -> Samples:
    """GET ``url`` and parse it; raises OSError/ValueError on failure."""
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        body = resp.read(MAX_BODY_BYTES + 1)
    if len(body) > MAX_BODY_BYTES:
        raise ValueError(f"{url}: metrics larger than {MAX_BODY_BYTES} bytes")
    return parse(body.decode("utf-8", errors="replace"))
