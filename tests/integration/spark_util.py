"""One way to start the local Spark session the Spark integration tests share."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any


def local_spark(app: str, **conf: str) -> Iterator[Any]:
    """A local[2] session with format("odradek") registered; stopped when the generator
    closes (use as the body of a module-scoped fixture)."""
    os.environ["PYSPARK_PYTHON"] = (
        sys.executable
    )  # workers must import odradek (docs/platform-notes.md)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback only here
    from pyspark.sql import SparkSession

    from odradek.spark import register

    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.python.worker.reuse", "true")
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    s = builder.getOrCreate()
    register(s)
    try:
        yield s
    finally:
        s.stop()
