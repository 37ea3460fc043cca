"""The pipeline demo on a Spark standalone cluster (issue 19): a master and two
workers started from the pyspark installation, executors in their own JVMs reaching
the brokers by their addresses, the connector shipped as an archive (spark.archives). The demo SIGKILLs a
partition leader midway and exits 0 only if the streamed counts equal the batch
recomputation (as the local demo does). The second test runs it with the brokers and the
Spark workers on separate hosts (network namespaces)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from odradek.cluster.spark_standalone import SparkStandalone
from odradek.pipeline_demo import run_pipeline_demo

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.timeout(600)
def test_pipeline_demo_on_spark_standalone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with SparkStandalone(tmp_path / "spark", workers=2) as s:
        url = s.start()
        rc = run_pipeline_demo(16, 500, tmp_path / "demo", kill_leader=True, spark_master=url)
        out = capsys.readouterr().out
        assert "SIGKILL broker" in out, out
        # Executors import the shipped archive, not the driver's installed package.
        assert "odradek-connector/odradek/__init__.py" in out, out
        assert rc == 0, out
        # Executors ran under the workers, not in the driver: their work dirs exist.
        assert any((tmp_path / "spark").glob("work-*/app-*/*/stderr")), list(
            (tmp_path / "spark").rglob("*")
        )[:20]


@pytest.mark.timeout(600)
def test_pipeline_demo_with_executors_on_other_hosts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Brokers and ZooKeeper as network-namespace hosts, the Spark workers (and so every
    executor JVM) on the client hosts c1 and c2: executors reach the brokers and the
    driver only by their host addresses, across the bridge, as on separate machines."""
    import os

    from odradek.cluster import netns

    if os.geteuid() != 0 or (why := netns.available()) is not None:
        pytest.skip("network namespaces need root" if os.geteuid() != 0 else why)
    rc = run_pipeline_demo(
        16, 500, tmp_path / "demo", kill_leader=True, spark_master="standalone", hosts="netns"
    )
    out = capsys.readouterr().out
    assert "SIGKILL broker" in out, out
    assert "bootstrap.servers=10.209." in out, out
    workers = re.search(r"workers on (10\.209\.\d+\.181), (10\.209\.\d+\.182)", out)
    assert workers, out
    assert "odradek-connector/odradek/__init__.py" in out, out
    assert rc == 0, out
    # The executors ran under the workers in the client namespaces.
    assert any((tmp_path / "demo" / "spark-standalone").glob("work-*/app-*/*/stderr"))
