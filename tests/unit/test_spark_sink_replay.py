"""The exactly-once sink's replay filter (``columnar_sink.not_written_before``): which rows
of a replayed micro-batch an earlier attempt already wrote, as a multiset of digests."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np

from odradek.spark.columnar_sink import not_written_before


def one_by_one(digests: list[int], already: Counter[str]) -> list[bool]:
    """The rule, row by row (what the sink did before): skip while the digest is owed."""
    keep = []
    for d in digests:
        h = f"{d:016x}"
        if already[h] > 0:
            already[h] -= 1
            keep.append(False)
        else:
            keep.append(True)
    return keep


def test_matches_the_row_by_row_rule_across_batches() -> None:
    rnd = random.Random(7)
    pool = [rnd.getrandbits(64) for _ in range(40)] + [0, 2**64 - 1]
    for _ in range(50):
        written = Counter(f"{rnd.choice(pool):016x}" for _ in range(rnd.randrange(0, 60)))
        written.update(["not-hex-at-all!!", "abc"])  # foreign header values match nothing
        mine, ref = Counter(written), Counter(written)
        for _batch in range(3):  # the multiset carries over between a task's batches
            digests = [rnd.choice(pool) for _ in range(rnd.randrange(0, 50))]
            got = not_written_before(np.array(digests, np.uint64), mine)
            assert got.tolist() == one_by_one(digests, ref)
            assert +mine == +ref


def test_repeated_rows_are_kept_as_often_as_they_were_not_written() -> None:
    d = np.array([5, 5, 5, 9, 5], np.uint64)
    already = Counter({f"{5:016x}": 2})
    assert not_written_before(d, already).tolist() == [False, False, True, True, True]
    assert +already == Counter()
