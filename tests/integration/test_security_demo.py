"""``odradek demo [--basic] --security sasl_ssl``: the demos on a secured cluster, through
the real command (issue 14). Slow: a 3-broker cluster (and Spark for the pipeline)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]


def test_basic_demo_runs_secured(tmp_path: Path) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "odradek",
            "demo",
            "--basic",
            "--security",
            "sasl_ssl",
            "--records",
            "5000",
            "--dir",
            str(tmp_path / "d"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "security sasl_ssl SCRAM-SHA-512" in r.stdout
    assert "every acknowledged record read back exactly once: True" in r.stdout


@pytest.mark.timeout(420)
def test_pipeline_demo_runs_secured(tmp_path: Path) -> None:
    """The Spark pipeline (source, windowed counts, sink to a topic and Parquet, batch
    recomputation) with a leader SIGKILL midway, every client over SASL_SSL; the web
    console follows the secured cluster too."""
    d = tmp_path / "d"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "odradek",
            "demo",
            "--security",
            "sasl_ssl",
            "--seconds",
            "14",
            "--rate",
            "300",
            "--dir",
            str(d),
        ],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "(sasl_ssl, user " in r.stdout and "== OK" in r.stdout
    console_log = (d / "cluster" / "console.log").read_text()
    assert "collection round failed" not in console_log
