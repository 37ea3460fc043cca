"""Where each node of a local cluster runs (``odradek.cluster.local``): on loopback, at
its address in the cluster's claimed /24 block (``odradek.cluster.addresses``), or with
``hosts="netns"`` in a network namespace of its own on a private bridge
(``odradek.cluster.netns``). A node's place in the block is its role: ``zk<j>`` for
ZooKeeper node j, ``b<slot>`` for the broker in that slot (its id unless the ids start
elsewhere, ``--first-broker-id``), ``c<n>`` for the netns client hosts.

Plain functions of the hosts mode (``"loopback"`` or ``"netns"``), the block and the
nodes they are given: ``LocalCluster`` holds that state and calls them (its public
``netns_hosts``, ``broker_role`` and ``exec_prefix`` are one-line wrappers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from odradek.cluster import addresses, netns
from odradek.errors import ErrorCode, KafkaError
from odradek.zk.server import cgroup2_root

if TYPE_CHECKING:
    from odradek.cluster.layout import BrokerInfo, ZkNodeInfo

__all__ = [
    "CLIENT_HOSTS",
    "HOSTS_MODES",
    "broker_address",
    "broker_role",
    "exec_prefix",
    "netns_hosts",
    "remove_cgroup",
    "zk_address",
]

HOSTS_MODES = ("loopback", "netns")
CLIENT_HOSTS = 2  # netns client hosts c1, c2: producers/consumers "on other machines"


def broker_address(hosts: str, block: int, slot: int) -> str:
    """The address of the broker in ``slot`` (1..) of the block: its id unless the ids
    start elsewhere (--first-broker-id)."""
    if hosts == "netns":
        return netns.host_address(block, f"b{slot}")
    return addresses.broker_address(block, slot)


def zk_address(hosts: str, block: int, node_id: int) -> str:
    if hosts == "netns":
        return netns.host_address(block, f"zk{node_id}")
    return addresses.zk_address(block, node_id)


def netns_hosts(
    hosts: str,
    block: int | None,
    zookeeper_nodes: Sequence[ZkNodeInfo],
    brokers: Sequence[BrokerInfo],
) -> netns.NetnsHosts:
    """The namespaces of a running ``hosts="netns"`` cluster (faults, client hosts)."""
    if hosts != "netns" or block is None:
        raise KafkaError(ErrorCode.unknown_server_error, "not a --hosts netns cluster")
    roles = [f"zk{z.id}" for z in zookeeper_nodes]
    roles += [broker_role(hosts, brokers, b) for b in brokers]
    roles += [f"c{n}" for n in range(1, CLIENT_HOSTS + 1)]
    return netns.NetnsHosts(block, roles)


def broker_role(hosts: str, brokers: Sequence[BrokerInfo], broker: BrokerInfo) -> str:
    """The host role (``b<slot>``) of ``broker``, one of ``brokers``: its place in the
    block, which is its id unless the ids start elsewhere (--first-broker-id 0 puts
    broker 0 on b1)."""
    if hosts == "netns":
        # Broker slot i lives on .(1+i) (netns.role_octet).
        return f"b{int(broker.host.rsplit('.', 1)[1]) - 1}"
    return f"b{list(brokers).index(broker) + 1}"


def exec_prefix(hosts: str, block: int | None, role: str) -> list[str]:
    """Command prefix that runs a process on host ``role`` (b<i>, zk<j>, c<n>): empty on
    loopback, ``ip netns exec <ns>`` on netns hosts."""
    if hosts != "netns":
        return []
    assert block is not None
    return netns.NetnsHosts(block).exec_prefix(role)


def remove_cgroup(z: ZkNodeInfo) -> None:
    root = cgroup2_root()
    if z.cgroup and root is not None:
        try:
            (root / z.cgroup).rmdir()
        except OSError:
            pass
