"""The suite's xdist units of work (tests/conftest.py): every module that changes the host
network is in the one group that runs on a single worker, and the group names only
modules that exist (a renamed module would silently run beside the others again)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import HOST_NETWORK_MODULES, xdist_scope

ROOT = Path(__file__).resolve().parents[2]
# What changes the host network: slow links and partitions (odradek.chaos faults, the
# chaos_spark fixture that requires them) and clusters on network namespaces.
_CHANGES_HOST_NETWORK = re.compile(
    r"from odradek\.chaos\.(faults|scenarios|nemesis) import|chaos_spark|hosts=\"netns\""
)


def test_group_names_existing_modules_only() -> None:
    missing = sorted(m for m in HOST_NETWORK_MODULES if not (ROOT / m).is_file())
    assert missing == []


def test_every_module_that_changes_the_host_network_is_in_the_group() -> None:
    found = {
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "tests" / "integration").glob("test_*.py"))
        if _CHANGES_HOST_NETWORK.search(p.read_text())
    }
    assert found, "the pattern no longer finds the fault modules"
    assert found <= HOST_NETWORK_MODULES, sorted(found - HOST_NETWORK_MODULES)


def test_a_module_is_one_unit_and_the_group_another() -> None:
    assert xdist_scope("tests/unit/test_config.py::test_a[x-y]") == "tests/unit/test_config.py"
    assert (
        xdist_scope("tests/integration/test_scenarios.py::test_s[p2]")
        == xdist_scope("tests/integration/test_netns_hosts.py::test_n")
        == "host-network"
    )
