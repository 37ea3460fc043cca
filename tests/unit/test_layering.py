"""The package layering stays as docs/architecture.md draws it (import-linter contracts in
pyproject.toml): foundations never import broker code, runtime code never imports the
tools (chaos, cluster, spark, cli), and the broker's packages only import downwards."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_hold() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("lint-imports is missing: the test extra installs import-linter")
    proc = subprocess.run(
        [exe, "--no-logo", "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "BROKEN" not in proc.stdout


# Allowed below (or beside) the config modules: each other and the error type.
_GROUND_FLOOR = {
    "odradek.config",
    "odradek.configdefs",
    "odradek.config_tables",
    "odradek.zookeeper_auth",
    "odradek.errors",
}


def test_config_ground_floor_contract_names_every_other_module() -> None:
    """The ground-floor contract is a forbidden contract, so a package added later
    would be importable from config.py unless the contract names it: it must list every
    top-level module of the package but the ground floor itself."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    contract = next(c for c in contracts["contracts"] if c["name"] == "Config is the ground floor")
    assert set(contract["source_modules"]) == _GROUND_FLOOR
    package = ROOT / "src" / "odradek"
    modules = {f"odradek.{p.stem}" for p in package.glob("*.py") if not p.stem.startswith("__")}
    modules |= {f"odradek.{p.parent.name}" for p in package.glob("*/__init__.py")}
    assert set(contract["forbidden_modules"]) == modules - _GROUND_FLOOR
