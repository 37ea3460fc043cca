"""Failover on a 3-broker SASL_SSL cluster (issue 14): replication runs over the secured
listener (followers authenticate with SCRAM-SHA-512 as the super user, through the ACL
authorizer), so the failover guarantees of test_failover.py must hold unchanged: acks=all
with min ISR 2 loses nothing when the leader is SIGKILLed, the restarted broker catches
up over SASL_SSL and rejoins every ISR, replicas stay byte-identical below the HW, and a
controlled restart (SIGTERM) under load loses nothing either. Slow: two broker restarts."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from replication_util import consume_all, create_topic, partition_meta, replica_log_bytes, wait_for
from test_failover import FAST, SteadyProducer, _check_acked_present

from odradek.cluster.local import LocalCluster
from odradek.cluster.security_setup import client_config

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(480)]


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster.start(tmp_path / "c", 3, security="sasl_ssl", broker_config=FAST) as c:
        yield c


def test_sasl_ssl_cluster_fails_over_and_replicates(secured: LocalCluster) -> None:
    c, topic = secured, "secured-failover"
    sec = client_config(c.client_properties)
    bs = c.bootstrap_servers
    create_topic(bs, topic, 2, 3, {"min.insync.replicas": "2"}, security=sec)
    meta = lambda: partition_meta(bs, topic, security=sec)  # noqa: E731
    wait_for(lambda: all(len(p.isrs) == 3 for p in meta().values()), 30, "full ISRs")
    with SteadyProducer(bs, topic, {"acks": "all", "enable.idempotence": True, **sec}) as prod:
        wait_for(lambda: len(prod.acked) > 2000, 30, "records acknowledged before the kill")
        victim = meta()[0].leader
        c.stop_broker(victim, signal.SIGKILL)
        n_at_kill = len(prod.acked)
        wait_for(
            lambda: len(prod.acked) > n_at_kill + 2000,
            60,
            "acknowledgements to resume on the new leader",
        )
        c.start_broker(victim)
        wait_for(
            lambda: all(len(p.isrs) == 3 for p in meta().values()),
            60,
            "the restarted broker to catch up over SASL_SSL and rejoin every ISR",
        )
        # A controlled restart of another broker under the same load.
        other = next(b.id for b in c.brokers if b.id != victim)
        n = len(prod.acked)
        c.stop_broker(other, signal.SIGTERM)
        c.start_broker(other)
        wait_for(lambda: len(prod.acked) > n + 1000, 60, "progress after the restart")
    assert prod.errors == [], prod.errors[:5]
    wait_for(lambda: all(len(p.isrs) == 3 for p in meta().values()), 60, "full ISRs at the end")
    read = consume_all(bs, topic, [0, 1], security=sec)
    missing = _check_acked_present(prod.acked, read)
    assert missing == [], f"{len(missing)} acknowledged records lost, e.g. {missing[:5]}"
    values = [v for recs in read.values() for _, v in recs]
    assert len(values) == len(set(values)), "idempotent producer wrote duplicates"
    for p in (0, 1):
        hw = max((o for o, _ in read[p]), default=-1) + 1
        logs = {b: replica_log_bytes(c, b, topic, p, upto_offset=hw) for b in (1, 2, 3)}
        assert logs[1] == logs[2] == logs[3], f"replicas of partition {p} diverge below HW"
