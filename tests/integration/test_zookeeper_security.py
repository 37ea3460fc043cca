"""ZooKeeper authentication and znode ACLs on a running cluster (issue 14 item 5).

`cluster up --security sasl_ssl` now also secures ZooKeeper: the brokers and the cluster
manager authenticate with one digest identity and create every znode with Kafka's
secure ACLs (zookeeper.set.acl=true). A ZooKeeper client without that identity must not
be able to rewrite broker registrations, partition state, the controller, topic configs
or admin requests, nor read the SCRAM credentials -- while the cluster still elects,
fails over after a SIGKILL, serves clients, and takes a new broker (cluster add-broker on
a secured cluster) that partitions are reassigned onto."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from replication_util import consume_all, create_topic, partition_meta, produce
from security_util import odradek
from tests.support.polling import wait_for

from odradek.cluster.local import LocalCluster
from odradek.cluster.security_setup import client_config
from odradek.zk.client import connect_zk

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

FAST = {"replica.lag.time.max.ms": "3000", "zookeeper.session.timeout.ms": "4000"}


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster.start(tmp_path / "c", 3, security="sasl_ssl", broker_config=FAST) as c:
        yield c


@pytest.fixture
def anyone(secured: LocalCluster) -> Iterator[KazooClient]:
    """A ZooKeeper session without any authentication."""
    zk = connect_zk(secured.zk_connect, source_ip=None, session_timeout_s=10.0)
    try:
        yield zk
    finally:
        zk.stop()
        zk.close()


def test_unauthenticated_zookeeper_client_cannot_rewrite_the_cluster(
    secured: LocalCluster, anyone: KazooClient, tmp_path: Path
) -> None:
    c, topic = secured, "zk-acl"
    sec = client_config(c.client_properties)
    bs = c.bootstrap_servers
    assert c.zk_set_acl and c.zk_auth_file is not None
    assert (Path(c.zk_auth_file).stat().st_mode & 0o077) == 0  # the secret is 0600
    create_topic(bs, topic, 2, 3, {"min.insync.replicas": "2"}, security=sec)
    meta = lambda: partition_meta(bs, topic, security=sec)  # noqa: E731
    wait_for(lambda: all(len(p.isrs) == 3 for p in meta().values()), 30, "full ISRs")
    broker_id = c.brokers[0].id

    writes = [
        lambda: anyone.set(f"/brokers/ids/{broker_id}", b'{"host":"evil"}'),
        lambda: anyone.create("/brokers/ids/99", b"{}", ephemeral=True),
        lambda: anyone.create("/brokers/topics/evil", b"{}"),
        lambda: anyone.set(f"/brokers/topics/{topic}", b"{}"),
        lambda: anyone.set(
            f"/brokers/topics/{topic}/partitions/0/state", b'{"leader":-1,"isr":[]}'
        ),
        lambda: anyone.delete(f"/brokers/topics/{topic}/partitions/0/state"),
        lambda: anyone.set("/controller", b'{"brokerid":99}'),
        lambda: anyone.set("/controller_epoch", b"99"),
        lambda: anyone.create("/admin/delete_topics/" + topic, b""),
        lambda: anyone.create("/admin/reassign_partitions", b"{}"),
        lambda: anyone.create("/admin/preferred_replica_election", b"{}"),
        lambda: anyone.set(f"/config/topics/{topic}", b'{"version":1,"config":{}}'),
        lambda: anyone.create("/config/changes/config_change_", b"{}", sequence=True),
        lambda: anyone.create("/config/users/mallory", b"{}"),
        lambda: anyone.set("/kafka-acl-changes", b""),
        lambda: anyone.create("/kafka-acl/Topic/evil", b"{}", makepath=True),
    ]
    for i, write in enumerate(writes):
        with pytest.raises(NoAuthError):
            write()
            pytest.fail(f"write #{i} was allowed")
    # The SCRAM credentials (Kafka's sensitive path) cannot even be read or listed.
    with pytest.raises(NoAuthError):
        anyone.get("/config/users/admin")
    with pytest.raises(NoAuthError):
        anyone.get_children("/config/users")
    # Public znodes stay world-readable, as in Kafka (monitoring tools read them).
    assert anyone.exists(f"/brokers/ids/{broker_id}") is not None
    assert anyone.get(f"/brokers/topics/{topic}/partitions/0/state")[0]
    # The brokers' identity can: the manager created the admin's credentials and every
    # broker authenticated SASL clients with them.
    assert b"SCRAM-SHA-512" in c.zk_client().get("/config/users/admin")[0]

    # The secured cluster still elects, fails over and serves.
    acked, errors = produce(bs, topic, [b"a%d" % i for i in range(200)], extra=sec)
    assert errors == [] and len(acked) == 200
    victim = meta()[0].leader
    c.stop_broker(victim, signal.SIGKILL)
    wait_for(
        lambda: meta()[0].leader not in (victim, -1), 30, "a new leader elected after the SIGKILL"
    )
    acked2, errors = produce(bs, topic, [b"b%d" % i for i in range(200)], extra=sec)
    assert errors == [] and len(acked2) == 200
    c.start_broker(victim)
    wait_for(
        lambda: all(len(p.isrs) == 3 for p in meta().values()),
        60,
        "the restarted broker to re-register and rejoin every ISR",
    )
    read = consume_all(bs, topic, [0, 1], security=sec)
    values = {v for recs in read.values() for _, v in recs}
    assert set(acked) | set(acked2) <= values

    # A broker added to the running secured cluster (its own certificate from the
    # cluster's CA, the SCRAM inter-broker user, the ZooKeeper identity) takes replicas.
    new = c.add_broker()
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {
                        "topic": topic,
                        "partition": 0,
                        "replicas": [new.id, *sorted(meta()[0].replicas)[:2]],
                    }
                ],
            }
        )
    )
    r = odradek(
        "reassign-partitions",
        "--bootstrap-server",
        bs,
        "--command-config",
        str(c.client_properties),
        "--execute",
        "--reassignment-json-file",
        str(plan),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    wait_for(
        lambda: new.id in meta()[0].isrs and len(meta()[0].replicas) == 3,
        60,
        "the added broker to join partition 0's ISR over SASL_SSL",
    )
    for b in c.brokers:  # no broker was refused by its own ACLs
        assert "NoAuth" not in Path(b.log).read_text(errors="replace"), b.id
