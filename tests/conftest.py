"""Shared fixtures: real ZooKeeper + real broker processes (no mocks).

``cluster`` is one single-broker cluster shared by a test module (starting one costs
~2-3 s); tests that kill or restart brokers use ``make_cluster`` to get their own.
Every cluster is brought down when its scope ends, even when a test fails.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# After each module: no Kafka client may outlive it (the hook, imported to register it).
from tests.support.client_leaks import pytest_runtest_protocol as pytest_runtest_protocol

from odradek.cluster.local import LocalCluster


def _zookeeper_missing() -> str | None:
    if shutil.which("java") is None:
        return "java is not installed"
    if not Path("/usr/share/java/zookeeper.jar").exists():
        return "Debian package zookeeper is not installed"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    why = _zookeeper_missing()
    if why is None:
        return
    for item in items:
        if "integration" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=why))


# Modules that change the host network: they run one after another on one xdist worker.
# A process's slow links hang off one root qdisc on ``lo`` (two workers must not both own
# it), and a netns cluster's leftover check looks names up by its loopback block, which
# another worker's netns cluster could claim as soon as it is released.
HOST_NETWORK_MODULES = frozenset(
    f"tests/integration/{m}.py"
    for m in (
        "test_chaos_faults",
        "test_lost_records",
        "test_nemesis",
        "test_netns_hosts",
        "test_scenarios",
        "test_spark_standalone",
        "test_transactions_failover",
    )
)


def xdist_scope(nodeid: str) -> str:
    """The unit of work of ``pytest -n N`` (scripts/test.sh): a module, so a module-scoped
    fixture (a shared cluster, a ZooKeeper, a SparkSession) starts once, or the whole
    host-network group."""
    module = nodeid.split("::", 1)[0]
    return "host-network" if module in HOST_NETWORK_MODULES else module


@pytest.hookimpl(optionalhook=True)  # an xdist hook: unknown under -p no:xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    # A scheduler rather than xdist_group marks: pytest 9.2 names items by a structured
    # id, and pytest-xdist 3.8's loadgroup, which renames items to carry their group,
    # then silently schedules test by test (two workers each started every module's
    # shared cluster, and the host-network modules ran side by side).
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

    return ModuleScheduling(config, log)


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Callable[..., LocalCluster]]:
    """``make_cluster(n_brokers, broker_config={...})`` -> a running LocalCluster."""
    clusters: list[LocalCluster] = []

    def make(n_brokers: int = 1, **kw: object) -> LocalCluster:
        c = LocalCluster.start(tmp_path / f"cluster-{len(clusters)}", n_brokers, **kw)  # type: ignore[arg-type]
        clusters.append(c)
        return c

    yield make
    for c in clusters:
        c.down()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One broker, shared by the tests of a module."""
    c = LocalCluster.start(tmp_path_factory.mktemp("cluster"), 1)
    try:
        yield c
    finally:
        c.down()


@pytest.fixture
def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"
