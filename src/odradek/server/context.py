"""What a request handler may use: a narrow view of the broker, not the broker itself.

Handlers (``odradek.server.handlers``) sit below the process wiring (``odradek.broker``)
in the layering checked by import-linter: they receive a ``RequestContext`` with the
services a request can need -- the metadata image, the replica manager, the group
coordinator, producer ids, the ZooKeeper admin client and the broker's configuration --
and nothing that starts, stops or rewires the process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from odradek.config import BrokerConfig
    from odradek.coordinator.group_coordinator import GroupCoordinator
    from odradek.coordinator.producer_ids import ProducerIdManager
    from odradek.coordinator.transaction_coordinator import TransactionCoordinator
    from odradek.metadata.image import MetadataImage
    from odradek.replication.replica_manager import ReplicaManager

__all__ = ["MetadataSource", "RequestContext"]


class MetadataSource(Protocol):
    """The current metadata image and a way to wait for the next one."""

    @property
    def image(self) -> MetadataImage: ...

    async def wait_for_image(self, timeout_s: float) -> None: ...


class RequestContext:
    __slots__ = ("broker_id", "config", "replicas", "groups", "producer_ids", "zk",
                 "txns", "_metadata")

    def __init__(self, *, broker_id: int, config: BrokerConfig, replicas: ReplicaManager,
                 groups: GroupCoordinator, producer_ids: ProducerIdManager | None,
                 zk: KazooClient | None, metadata: MetadataSource,
                 txns: TransactionCoordinator | None = None) -> None:
        self.broker_id = broker_id
        self.config = config
        self.replicas = replicas
        self.groups = groups
        self.producer_ids = producer_ids
        # Admin writes (topics, configs, elections) go to ZooKeeper as Kafka's
        # AdminZkClient does; None only before the broker connected.
        self.zk = zk
        self.txns: TransactionCoordinator = txns  # type: ignore[assignment]
        self._metadata = metadata

    @property
    def image(self) -> MetadataImage:
        """The current image: replaced as a whole on each change, so one read gives a
        consistent view for the whole request."""
        return self._metadata.image

    async def wait_for_image(self, timeout_s: float) -> None:
        """Wait (bounded) until the next metadata image is applied (after an admin write
        whose effect the answer must show)."""
        await self._metadata.wait_for_image(timeout_s)
