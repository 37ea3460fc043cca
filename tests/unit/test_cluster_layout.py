"""The files of a local cluster's DIR (odradek.cluster.layout): plain functions of what
they are given -- cluster.json, a broker's server.properties, the ZooKeeper identity --
no cluster object needed."""

from __future__ import annotations

import stat
from pathlib import Path

from odradek.cluster import layout
from odradek.cluster.layout import BrokerInfo, ZkNodeInfo


def test_cluster_json_round_trips(tmp_path: Path) -> None:
    zk = [ZkNodeInfo(1, "127.0.7.1", 2181, 11, 22, "zkdata", None)]
    brokers = [BrokerInfo(1, "127.0.7.2", 9092, None, None, "c", "d", "l")]
    path = tmp_path / layout.STATE_FILE
    layout.write_state(path, {"block": 7, "hosts": "loopback"}, zk, brokers)
    state = layout.read_state(path)
    assert state["block"] == 7 and state["hosts"] == "loopback"
    assert state["zookeeper_nodes"] == zk and state["brokers"] == brokers
    assert state["zookeeper"]["connect"] == "127.0.7.1:2181"  # older readers' key
    assert not path.with_suffix(".json.tmp").exists()


def test_broker_config_and_zookeeper_identity(tmp_path: Path) -> None:
    b = layout.write_broker_config(
        tmp_path,
        3,
        "127.0.7.4",
        {"num.partitions": "5"},
        2,
        zk_connect="127.0.7.1:2181",
        zk_session_timeout_ms=6000,
        metrics=True,
    )
    props = layout.read_properties(Path(b.config))
    assert props["broker.id"] == "3" and props["num.partitions"] == "5"  # override wins
    assert props["listeners"] == "PLAINTEXT://127.0.7.4:9092"
    assert b.metrics_url == props["metrics.listener"] + "/metrics"
    assert stat.S_IMODE(Path(b.config).stat().st_mode) & 0o077 == 0  # private

    assert layout.zk_identity(tmp_path, {}, "plaintext") == (None, False)
    auth_file, set_acl = layout.zk_identity(tmp_path, {}, "sasl_ssl")
    assert auth_file is not None and set_acl
    value = layout.read_zk_auth(auth_file)
    assert value is not None and value.startswith(f"digest:{layout.ZK_DIGEST_USER}:")
    # A restart reuses the identity.
    assert layout.read_zk_auth(layout.zk_identity(tmp_path, {}, "sasl_ssl")[0]) == value
    assert layout.read_zk_auth(None) is None
