"""``odradek demo --basic --security sasl_ssl``: the demo's verified round trip on a
secured cluster, through the real command (issue 14). Slow: a 3-broker cluster."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]


def test_basic_demo_runs_secured(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "odradek", "demo", "--basic", "--security",
                        "sasl_ssl", "--records", "5000", "--dir", str(tmp_path / "d")],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "security sasl_ssl SCRAM-SHA-512" in r.stdout
    assert "every acknowledged record read back exactly once: True" in r.stdout
    r = subprocess.run([sys.executable, "-m", "odradek", "demo", "--security", "sasl_ssl"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "plaintext cluster only" in r.stdout
