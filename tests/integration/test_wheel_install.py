"""A user who only runs ``pip install`` gets a working broker and every ``odradek`` command.

Builds the wheel with ``python -m build``, installs it into a fresh venv *without extras*
(pip's cache and configured index make the dependencies cheap to fetch again), and drives
that venv's ``odradek``: ``--version``, ``--help`` with no unavailable sub-command, ``cluster
up``, ``topics --create``, a produce/consume round trip with ``perf``, ``cluster down``.
Slow (a wheel build and a pip install): run with ``-m slow``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import odradek

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
RECORDS = 2000


def _run(*args: str | Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    assert proc.returncode == 0, f"{args}: {proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc


def _summary(stdout: str) -> dict[str, object]:
    return json.loads(stdout.strip().splitlines()[-1])


def test_wheel_without_extras_runs_a_cluster(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    _run(sys.executable, "-m", "build", "--wheel", "--outdir", dist, ROOT)
    wheels = list(dist.glob("odradek-*.whl"))
    assert len(wheels) == 1, wheels
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv)
    _run(venv / "bin" / "python", "-m", "pip", "install", "-q", wheels[0], timeout=900)
    exe = venv / "bin" / "odradek"

    assert _run(exe, "--version").stdout.strip() == f"odradek {odradek.__version__}"
    helped = _run(exe, "--help")
    assert "unavailable" not in helped.stderr, helped.stderr
    for command in (
        "broker",
        "cluster",
        "topics",
        "perf",
        "configs",
        "leader-election",
        "consumer-groups",
        "lost-records",
        "chaos",
    ):
        assert command in helped.stdout, command
    # Without the extras, pyspark stays out of the venv (the extras name what they add).
    probe = subprocess.run(
        [venv / "bin" / "python", "-c", "import pyspark"], capture_output=True, timeout=60
    )
    assert probe.returncode != 0

    cluster_dir = tmp_path / "cluster"
    try:
        up = _run(exe, "cluster", "up", "--brokers", "3", "--dir", cluster_dir, timeout=180)
        bootstrap = up.stdout.strip().splitlines()[-1]
        _run(
            exe,
            "topics",
            "--bootstrap-server",
            bootstrap,
            "--create",
            "--topic",
            "wheel",
            "--partitions",
            "3",
            "--replication-factor",
            "3",
            timeout=120,
        )
        produced = _summary(
            _run(
                exe,
                "perf",
                "produce",
                "--bootstrap-server",
                bootstrap,
                "--topic",
                "wheel",
                "--num-records",
                str(RECORDS),
                "--record-size",
                "100",
                "--producer-props",
                "acks=all",
                "--json",
                timeout=180,
            ).stdout
        )
        consumed = _summary(
            _run(
                exe,
                "perf",
                "consume",
                "--bootstrap-server",
                bootstrap,
                "--topic",
                "wheel",
                "--messages",
                str(RECORDS),
                "--timeout",
                "60",
                "--json",
                timeout=180,
            ).stdout
        )
        assert (produced["records"], produced["errors"]) == (RECORDS, 0), produced
        assert consumed["messages"] == RECORDS, consumed
        assert consumed["bytes"] == RECORDS * 100, consumed
        print("produce:", produced, "\nconsume:", consumed)
    finally:
        subprocess.run(
            [exe, "cluster", "down", "--dir", cluster_dir], capture_output=True, timeout=120
        )
