"""Shared helpers for the real-client compatibility tests (issue "Broker core", proof).

Each client module produces records generated here, consumes them back with ``assign``
(no consumer groups yet) and hands both sides to :func:`assert_round_trip`, which checks
byte-exactness, per-partition order and contiguous offsets (REQ-R7, R8).

Records are generated deterministically from a seed and carry their target partition,
so the expected per-partition order does not depend on any client's partitioner.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

CODECS: tuple[str, ...] = ("none", "gzip", "snappy", "lz4", "zstd")

Headers = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class Rec:
    """One record as produced: ``key``/``value`` may be None (null) or b"" (empty)."""

    key: bytes | None
    value: bytes | None
    headers: Headers
    partition: int
    timestamp_ms: int | None = None


@dataclass(slots=True)
class Got:
    """One record as a client consumed it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers = field(default=())
    timestamp_ms: int | None = None


def make_records(
    n: int,
    partitions: int,
    seed: int,
    *,
    headers: bool = True,
    empty_key: bool = True,
    null_value: bool = False,
    big_every: int = 997,
) -> list[Rec]:
    """``n`` records round-robin over ``partitions`` with varied sizes.

    Mix: ~8% null keys, ~2% empty keys (``empty_key``), ~4% empty values, mostly small
    values, every ``big_every``-th value 8-64 KiB (so batches span several fetches and
    KIP-74's "at least one batch" path is exercised); random binary bytes throughout.
    """
    rnd = random.Random(seed)
    out: list[Rec] = []
    for i in range(n):
        r = rnd.random()
        key: bytes | None
        if r < 0.08:
            key = None
        elif r < 0.10 and empty_key:
            key = b""
        else:
            key = rnd.randbytes(rnd.randint(1, 24))
        r = rnd.random()
        value: bytes | None
        if r < 0.04:
            value = b""
        elif r < 0.05 and null_value:
            value = None
        elif big_every and i % big_every == big_every - 1:
            value = rnd.randbytes(rnd.randint(8 << 10, 64 << 10))
        else:
            value = rnd.randbytes(
                rnd.choice((rnd.randint(1, 16), rnd.randint(16, 200), rnd.randint(200, 1500)))
            )
        hdrs: Headers = ()
        if headers and rnd.random() < 0.3:
            hdrs = tuple(
                (f"h{j}", rnd.randbytes(rnd.randint(0, 12))) for j in range(rnd.randint(1, 3))
            )
        out.append(Rec(key, value, hdrs, i % partitions))
    return out


def by_partition(recs: Iterable[Rec]) -> dict[int, list[Rec]]:
    out: dict[int, list[Rec]] = defaultdict(list)
    for r in recs:
        out[r.partition].append(r)
    return dict(out)


def assert_round_trip(
    expected: Sequence[Rec],
    got: Sequence[Got],
    *,
    check_headers: bool = True,
    check_timestamps: bool = False,
    start_offsets: dict[int, int] | None = None,
    null_is_empty: bool = False,
) -> None:
    """Byte-exact, in order per partition, offsets contiguous from ``start_offsets``.

    ``null_is_empty``: the client cannot tell a null value from an empty one (reported
    as a client limitation in docs/compatibility.md, not a broker property).
    """
    want = by_partition(expected)
    have: dict[int, list[Got]] = defaultdict(list)
    for g in got:
        have[g.partition].append(g)
    assert set(have) <= set(want), f"records in unexpected partitions {set(have) - set(want)}"
    for p, recs in sorted(want.items()):
        gs = have.get(p, [])
        assert len(gs) == len(recs), f"partition {p}: consumed {len(gs)}, produced {len(recs)}"
        base = (start_offsets or {}).get(p, 0)
        for i, (w, g) in enumerate(zip(recs, gs)):
            where = f"partition {p} record #{i}"
            assert g.offset == base + i, f"{where}: offset {g.offset}, want {base + i}"
            wk, wv, gk, gv = w.key, w.value, g.key, g.value
            if null_is_empty:
                wk, wv, gk, gv = (x if x is not None else b"" for x in (wk, wv, gk, gv))
            assert gk == wk, f"{where}: key {_short(gk)} != {_short(wk)}"
            assert gv == wv, f"{where}: value {_short(gv)} != {_short(wv)}"
            if check_headers:
                assert tuple(g.headers) == w.headers, f"{where}: headers {g.headers} != {w.headers}"
            if check_timestamps and w.timestamp_ms is not None:
                assert g.timestamp_ms == w.timestamp_ms, f"{where}: ts {g.timestamp_ms}"


def _short(b: bytes | None) -> str:
    if b is None:
        return "None"
    return f"{len(b)}B:{b[:12]!r}"


def assert_contiguous(per_partition_offsets: dict[int, list[int]], counts: dict[int, int]) -> None:
    """Producer-reported offsets (delivery reports, futures) are 0..n-1 per partition."""
    for p, n in counts.items():
        assert sorted(per_partition_offsets.get(p, [])) == list(range(n)), (
            f"partition {p}: producer offsets not contiguous"
        )


def timestamped(recs: Sequence[Rec], base_ms: int, step_ms: int = 1000) -> list[Rec]:
    """Same records with CreateTime ``base_ms + i*step_ms`` (strictly increasing)."""
    return [
        Rec(r.key, r.value, r.headers, r.partition, base_ms + i * step_ms)
        for i, r in enumerate(recs)
    ]


# librdkafka-based helpers, shared by the confluent and kcat modules ------------------
def confluent_create_topic(
    bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None
) -> None:
    from tests.support.topics import create_topic  # noqa: PLC0415

    create_topic(bootstrap, name, partitions, 1, config=config)


def confluent_consume(
    bootstrap: str, topic: str, partitions: int, expect: int, timeout: float = 60.0, **conf: Any
) -> list[Got]:
    """Read ``expect`` records from the beginning of every partition with ``assign``."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    # confluent-kafka insists on a group.id even for assign(); nothing is committed.
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "odradek-compat-assign",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            **conf,
        }
    )
    out: list[Got] = []
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        while len(out) < expect and time.monotonic() < deadline:
            for m in c.consume(num_messages=10000, timeout=0.5):
                err = m.error()
                assert err is None, f"consume error {err}"
                out.append(
                    Got(
                        m.partition(),
                        m.offset(),
                        m.key(),
                        m.value(),
                        tuple(m.headers() or ()),
                        m.timestamp()[1],
                    )
                )
    finally:
        c.close()
    assert len(out) == expect, f"consumed {len(out)} of {expect} in {timeout}s"
    return out
