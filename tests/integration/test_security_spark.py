"""A Spark read and write against a secured (SASL_SSL, SCRAM-SHA-512, ACL authorizer)
cluster: the source and sink pass ``kafka.*`` options through to the client, so Kafka's
own client settings are all a pipeline needs (issue 14). Slow: it starts Spark."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from security_util import access
from spark_util import local_spark

from odradek.cluster.local import LocalCluster
from odradek.spark.source import SparkOptionError

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    yield from local_spark("odradek-security-spark")


def test_spark_write_and_read_over_sasl_ssl(spark: Any, tmp_path: Any) -> None:
    with LocalCluster.start(tmp_path / "c", 1, security="sasl_ssl") as c:
        a = access(c, "SASL_SSL", "SCRAM-SHA-512")
        admin = AdminClient(a.confluent())
        # Both clients: librdkafka's (confluent) and Odradek's columnar one, which does
        # TLS and SASL through odradek.client.connection (same kafka.* options).
        for client in ("confluent", "columnar"):
            topic = f"spark-sec-{client}-{uuid.uuid4().hex[:6]}"
            admin.create_topics([NewTopic(topic, 2, 1)], operation_timeout=30)[topic].result(60)
            opts = {f"kafka.{k}": str(v) for k, v in a.confluent().items()}
            opts["odradek.client"] = client
            rows = [(f"k{i}", f"v{i}") for i in range(200)]
            w = spark.createDataFrame(rows, "key string, value string").write.format("odradek")
            for k, v in opts.items():
                w = w.option(k, v)
            w.option("topic", topic).mode("append").save()
            r = spark.read.format("odradek").option("subscribe", topic)
            for k, v in opts.items():
                r = r.option(k, v)
            got = r.load().selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)").collect()
            assert sorted((x[0], x[1]) for x in got) == sorted(rows), client
            # The same options with a wrong password: the job fails, it does not hang.
            bad = dict(opts, **{"kafka.sasl.password": "wrong"})
            r = spark.read.format("odradek").option("subscribe", topic)
            for k, v in bad.items():
                r = r.option(k, v)
            with pytest.raises(Exception) as ei:
                r.load().collect()
            msg = str(ei.value)
            assert "Authentication" in msg or "SASL" in msg, (client, msg[-800:])


def test_columnar_client_security_options() -> None:
    from odradek.spark.source import parse_client

    assert (
        parse_client(
            {},
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "PLAIN",
                "sasl.username": "u",
                "sasl.password": "p",
            },
        )
        == "columnar"
    )
    with pytest.raises(SparkOptionError, match=r"kafka\.security\.protocol"):
        parse_client({}, {"security.protocol": "SASL_SSL"})  # no username/password
    with pytest.raises(SparkOptionError, match=r"kafka\.security\.protocol"):
        parse_client({}, {"security.protocol": "TLS"})
