"""The documents' failure scenarios on a real cluster, checked by the Spark job (issue 6).

One fast representative runs in CI: acks=all, min ISR 2, unclean off, idempotent
producer, leader SIGKILL -> zero acknowledged records lost (REQ-R4, R7, R8, R19).
Every other scenario is marked slow (``ODRADEK_FULL=1 scripts/test.sh`` or
``odradek chaos run all``). All share one SparkSession (one per test module).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow", reason="histories are Parquet (pip install .[spark])")
from odradek.chaos.scenarios import SCENARIOS, get, run_scenarios  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def spark(chaos_spark: Any) -> Any:
    return chaos_spark


def _run(name: str, tmp_path: Path, spark: Any, security: str = "plaintext") -> None:
    (res,) = run_scenarios([name], tmp_path, spark=spark, log=lambda s: None,
                           security=security)
    failed = [f"{c.what}: observed {c.observed}" for c in res.checks if not c.ok]
    assert res.error is None, f"{name}: {res.error}"
    assert res.ok, f"{name} ({get(name).expected}) failed:\n" + "\n".join(failed)


@pytest.mark.timeout(240)
def test_safe_configuration_loses_nothing_on_leader_kill(tmp_path: Path, spark: Any) -> None:
    _run("safe-leader-kill", tmp_path, spark)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_safe_leader_kill_on_a_secured_cluster(tmp_path: Path, spark: Any) -> None:
    """The same scenario with TLS + SCRAM listeners and ZooKeeper authentication: the
    faults and the loss checker work unchanged, every client authenticates."""
    _run("safe-leader-kill", tmp_path, spark, security="sasl_ssl")
    cfg = (tmp_path / "safe-leader-kill" / "cluster" / "broker-1" / "server.properties")
    assert "SASL_SSL://" in cfg.read_text()


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", [s.name for s in SCENARIOS if s.slow])
def test_scenario(name: str, tmp_path: Path, spark: Any) -> None:
    _run(name, tmp_path, spark)
