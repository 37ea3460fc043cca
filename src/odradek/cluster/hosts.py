"""Where each node of a local cluster runs (``odradek.cluster.local``): on loopback, at
its address in the cluster's claimed /24 block (``odradek.cluster.addresses``), or with
``hosts="netns"`` in a network namespace of its own on a private bridge
(``odradek.cluster.netns``). A node's place in the block is its role: ``zk<j>`` for
ZooKeeper node j, ``b<slot>`` for the broker in that slot (its id unless the ids start
elsewhere, ``--first-broker-id``), ``c<n>`` for the netns client hosts.

``ClusterHosts`` is a base class of ``LocalCluster``, not an object of its own. The
attributes and methods declared in the class belong to ``LocalCluster``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.cluster import addresses, netns
from odradek.errors import ErrorCode, KafkaError
from odradek.zk.server import cgroup2_root

if TYPE_CHECKING:
    from odradek.cluster.layout import BrokerInfo, ZkNodeInfo

__all__ = ["CLIENT_HOSTS", "HOSTS_MODES", "ClusterHosts"]

HOSTS_MODES = ("loopback", "netns")
CLIENT_HOSTS = 2  # netns client hosts c1, c2: producers/consumers "on other machines"


class ClusterHosts:
    """The nodes' addresses, host roles and process prefixes (see the module docstring)."""

    block: int | None
    hosts: str
    zookeeper_nodes: list[ZkNodeInfo]
    brokers: list[BrokerInfo]

    if TYPE_CHECKING:

        def broker(self, broker_id: int) -> BrokerInfo: ...

    def _broker_address(self, slot: int) -> str:
        """The address of the broker in ``slot`` (1..) of the block: its id unless the
        ids start elsewhere (--first-broker-id)."""
        assert self.block is not None
        if self.hosts == "netns":
            return netns.host_address(self.block, f"b{slot}")
        return addresses.broker_address(self.block, slot)

    def _zk_address(self, node_id: int) -> str:
        assert self.block is not None
        if self.hosts == "netns":
            return netns.host_address(self.block, f"zk{node_id}")
        return addresses.zk_address(self.block, node_id)

    def netns_hosts(self) -> netns.NetnsHosts:
        """The namespaces of a running ``hosts="netns"`` cluster (faults, client hosts)."""
        if self.hosts != "netns" or self.block is None:
            raise KafkaError(ErrorCode.unknown_server_error, "not a --hosts netns cluster")
        roles = [f"zk{z.id}" for z in self.zookeeper_nodes]
        roles += [self.broker_role(b.id) for b in self.brokers]
        roles += [f"c{n}" for n in range(1, CLIENT_HOSTS + 1)]
        return netns.NetnsHosts(self.block, roles)

    def broker_role(self, broker_id: int) -> str:
        """The host role (``b<slot>``) of a broker: its place in the block, which is its
        id unless the ids start elsewhere (--first-broker-id 0 puts broker 0 on b1)."""
        b = self.broker(broker_id)
        if self.hosts == "netns":
            # Broker slot i lives on .(1+i) (netns.role_octet).
            return f"b{int(b.host.rsplit('.', 1)[1]) - 1}"
        return f"b{self.brokers.index(b) + 1}"

    def exec_prefix(self, role: str) -> list[str]:
        """Command prefix that runs a process on host ``role`` (b<i>, zk<j>, c<n>):
        empty on loopback, ``ip netns exec <ns>`` on netns hosts."""
        if self.hosts != "netns":
            return []
        assert self.block is not None
        return netns.NetnsHosts(self.block).exec_prefix(role)

    @staticmethod
    def _remove_cgroup(z: ZkNodeInfo) -> None:
        root = cgroup2_root()
        if z.cgroup and root is not None:
            try:
                (root / z.cgroup).rmdir()
            except OSError:
                pass
