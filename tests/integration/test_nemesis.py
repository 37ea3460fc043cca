"""The randomized nemesis on a real cluster, checked by the Spark job (issue 6 item 6).

Safe configuration (acks=all, min ISR 2, unclean off, idempotent producer, RF 3, 3
partitions): zero acknowledged records lost, no duplicates, no reordering within a
partition, no divergence (REQ-R7, R8, R16, R19, R20). CI runs one short seed (10 s of
faults: SIGKILL b1, b1 <-> ZooKeeper, SIGKILL b2); a 20 s seed with every fault family
is marked slow. ``odradek chaos nemesis --seeds 1-20`` is the full proof.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow", reason="histories are Parquet (pip install .[spark])")
from odradek.chaos.nemesis import NemesisCase, schedule

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def spark(chaos_spark: Any) -> Any:
    return chaos_spark


def _run(case: NemesisCase, tmp_path: Path, spark: Any) -> None:
    from odradek.chaos.checker import check_run
    from odradek.chaos.nemesis import evaluate_nemesis, run_nemesis

    res = run_nemesis(case, tmp_path, log=lambda s: None)
    evaluate_nemesis(res, check_run(tmp_path, spark=spark).get(case.name, {}))
    failed = [f"{c.what}: observed {c.observed}" for c in res.checks if not c.ok]
    assert res.error is None, f"{case.name}: {res.error}"
    assert res.ok, f"{case.name} failed (histories in {res.dir}):\n" + "\n".join(failed)
    assert (res.dir / "schedule.json").exists()


@pytest.mark.timeout(240)
def test_short_nemesis_seed_loses_nothing(tmp_path: Path, spark: Any) -> None:
    kinds = {o.kind for o in schedule(7, 10, ["b1", "b2", "b3", "zk"])}
    assert {"kill", "partition-bzk"} <= kinds  # what this CI seed exercises
    _run(NemesisCase(7, duration_s=10), tmp_path, spark)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_nemesis_seed_with_every_fault_family(tmp_path: Path, spark: Any) -> None:
    kinds = {o.kind for o in schedule(9, 20, ["b1", "b2", "b3", "zk"])}
    assert {"kill", "pause", "isolate", "slow", "partition-bb", "partition-bzk"} <= kinds
    _run(NemesisCase(9, duration_s=20), tmp_path, spark)
