"""The pipeline demo on a Spark standalone cluster (issue 19): a master and two
workers started from the pyspark installation, executors in their own JVMs reaching
the brokers by their addresses, the connector shipped as an archive (spark.archives). The demo SIGKILLs a
partition leader midway and exits 0 only if the streamed counts equal the batch
recomputation (as the local demo does)."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.cluster.spark_standalone import SparkStandalone
from odradek.pipeline_demo import run_pipeline_demo

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.timeout(600)
def test_pipeline_demo_on_spark_standalone(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    with SparkStandalone(tmp_path / "spark", workers=2) as s:
        url = s.start()
        rc = run_pipeline_demo(16, 500, tmp_path / "demo", kill_leader=True, spark_master=url)
        out = capsys.readouterr().out
        assert "SIGKILL broker" in out, out
        # Executors import the shipped archive, not the driver's installed package.
        assert "odradek-connector/odradek/__init__.py" in out, out
        assert rc == 0, out
        # Executors ran under the workers, not in the driver: their work dirs exist.
        assert any((tmp_path / "spark").glob("work-*/app-*/*/stderr")), list((tmp_path / "spark").rglob("*"))[:20]
