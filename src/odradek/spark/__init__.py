"""Odradek for Apache Spark: the ``odradek`` data source (docs/spark.md, issue 7).

    from odradek.spark import register
    register(spark)                                  # once per SparkSession
    df = (spark.readStream.format("odradek")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events").load())

Same schema and options as Spark's Kafka connector; written with PySpark's Python Data
Source API, so it needs no jar. Importing this package does not import PySpark; only
``register`` and the ``source``/``sink`` modules do.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register", "FORMAT"]

FORMAT = "odradek"


def register(spark: Any) -> None:
    """Register ``format("odradek")`` (source and sink) with a SparkSession.

    Spark's Python workers must import this package too: run them with the interpreter
    it is installed in (``PYSPARK_PYTHON``; docs/platform-notes.md, PySpark).
    """
    from odradek.spark.source import OdradekDataSource

    spark.dataSource.register(OdradekDataSource)
