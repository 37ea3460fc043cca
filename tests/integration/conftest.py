"""Fixtures shared by the integration tests of one kind (the top-level conftest has the
cluster fixtures)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="module")
def chaos_spark() -> Iterator[Any]:
    """The chaos checker's SparkSession; skips when faults (root, iptables, tc) or PySpark
    are unavailable, with the reason."""
    from odradek.chaos.faults import FaultsUnavailable, require_available

    try:
        require_available(need_tc=True)
    except FaultsUnavailable as e:
        pytest.skip(str(e))
    pytest.importorskip("pyspark", reason="the checker runs on PySpark (pip install pyspark)")
    from odradek.chaos.checker import spark_session

    s = spark_session()
    yield s
    s.stop()
