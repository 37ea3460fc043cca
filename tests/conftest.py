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

import pytest

from odradek.cluster.local import LocalCluster


def _zookeeper_missing() -> str | None:
    if shutil.which("java") is None:
        return "java is not installed"
    if not Path("/usr/share/java/zookeeper.jar").exists():
        return "Debian package zookeeper is not installed"
    return None


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _group_by_module(items)
    why = _zookeeper_missing()
    if why is None:
        return
    for item in items:
        if "integration" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=why))


def _group_by_module(items: list[pytest.Item]) -> None:
    """Under ``pytest -n N --dist loadgroup`` (scripts/test.sh) a module's tests run on one
    worker, so a module-scoped fixture (a shared cluster, a ZooKeeper, a SparkSession) starts
    once. A module that names its own group keeps it: the modules that change the host
    network share ``host-network``, since a process's slow links hang off one root qdisc
    on ``lo`` (two workers must not both own it), and a netns cluster's leftover check
    looks names up by its loopback block, which another worker's netns cluster may claim
    as soon as it is released. Without xdist the marks do nothing."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


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
