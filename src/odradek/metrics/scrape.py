"""Read a Prometheus text endpoint (a broker's ``/metrics``) into plain values.

Used by the console (LEO per replica, byte rates) and by tests. The body is bounded
(``MAX_BODY_BYTES``) and the request has a deadline: a broker that hangs or answers
garbage yields an error for that broker only.
"""

from __future__ import annotations

import logging
import re
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


# A sample line as Odradek's brokers write it: a name, labels without escapes or braces,
# one value and no timestamp. Anything else (escaped label values, timestamps,
# OpenMetrics forms) goes to prometheus-client's parser.
_ONE_LABEL = r'[A-Za-z_][A-Za-z0-9_]*="[^"\\{}\n]*"'
_SAMPLE = re.compile(
    rf"([A-Za-z_:][A-Za-z0-9_:]*)(?:\{{((?:{_ONE_LABEL}(?:,{_ONE_LABEL})*,?)?)\}})? ([^ ]+)"
)
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="([^"\\{}\n]*)"')


def parse(text: str) -> Samples:
    """The text's samples. At 10,000 partitions a broker's exposition has ~90,000 lines
    and prometheus-client's parser, character by character, took ~1.3 s for one; the
    console parses every broker's every 15 s (issue 29). Lines of the plain form are
    read with one regular expression each (~5x faster); a text with any other line is
    parsed entirely by prometheus-client (same result: tested against it)."""
    out = Samples()
    values = out.values
    sample, label = _SAMPLE.fullmatch, _LABEL.findall
    try:
        for line in text.splitlines():
            if not line or line[0] == "#":
                continue
            m = sample(line)
            if m is None:
                return _parse_slowly(text)
            name, labels, value = m.groups()
            if labels:
                pairs = label(labels)
                key = tuple(sorted(pairs))
                if len(dict(pairs)) != len(pairs):  # a repeated label name: malformed
                    return _parse_slowly(text)
            else:
                key = ()
            values.setdefault(name, {})[key] = float(value)
    except ValueError:  # a value float() does not read: let the full parser judge it
        return _parse_slowly(text)
    return out


def _parse_slowly(text: str) -> Samples:
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
