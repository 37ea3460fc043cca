"""Where each node of a local cluster runs (odradek.cluster.hosts): plain functions of the
hosts mode, the block and the nodes handed in -- no cluster object needed."""

from __future__ import annotations

import pytest

from odradek.cluster import hosts, netns
from odradek.cluster.layout import BrokerInfo, ZkNodeInfo
from odradek.errors import KafkaError


def _broker(broker_id: int, host: str) -> BrokerInfo:
    return BrokerInfo(broker_id, host, 9092, None, None, "c", "d", "l")


def test_addresses_follow_the_mode_and_the_block() -> None:
    assert hosts.broker_address("loopback", 7, 2) == "127.0.7.3"
    assert hosts.broker_address("netns", 7, 2) == "10.209.7.3"
    assert hosts.zk_address("loopback", 7, 2) == "127.0.7.202"
    assert hosts.zk_address("netns", 7, 1) == "10.209.7.1"


def test_roles_prefixes_and_namespaces() -> None:
    # --first-broker-id 0: broker 0 is in slot 1, on b1, in either mode.
    loop = [_broker(0, "127.0.7.2"), _broker(1, "127.0.7.3")]
    assert [hosts.broker_role("loopback", loop, b) for b in loop] == ["b1", "b2"]
    ns = [_broker(0, "10.209.7.2"), _broker(1, "10.209.7.3")]
    assert [hosts.broker_role("netns", ns, b) for b in ns] == ["b1", "b2"]
    assert hosts.exec_prefix("loopback", 7, "b1") == []
    assert hosts.exec_prefix("netns", 7, "b1")[-1] == netns.namespace_name(7, "b1")
    zk = [ZkNodeInfo(1, "10.209.7.1", 2181, None, None, "z", None)]
    assert hosts.netns_hosts("netns", 7, zk, ns).roles == ["zk1", "b1", "b2", "c1", "c2"]
    with pytest.raises(KafkaError, match="not a --hosts netns cluster"):
        hosts.netns_hosts("loopback", 7, zk, loop)
