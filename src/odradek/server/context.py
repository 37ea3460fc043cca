"""What a request handler may use: a narrow view of the broker, not the broker itself.

Handlers (``odradek.server.handlers``) sit below the process wiring (``odradek.broker``)
in the layering checked by import-linter: they receive a ``RequestContext`` with the
services a request can need -- the metadata image, the replica manager, the group
coordinator, producer ids, the ZooKeeper admin gateway and the broker's configuration --
and nothing that starts, stops or rewires the process.

Security (issue 14): ``ctx.session`` is the session of the connection whose request is
being handled (principal, client host, listener); ``ctx.authorize(op, type, name)``
asks the broker's authorizer about it -- always True when no authorizer is configured
(``authorizer.class.name`` empty), as in Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from odradek.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from odradek.server.client_quotas import QuotaManager
from odradek.server.metadata_answers import MetadataAnswers, TopicEntries
from odradek.server.schema_validation import SchemaIdValidator
from odradek.server.session import Session, current_session
from odradek.server.settings import ServerSettings

if TYPE_CHECKING:
    from odradek.config import BrokerConfig
    from odradek.coordinator.group_coordinator import GroupCoordinator
    from odradek.coordinator.producer_ids import ProducerIdManager
    from odradek.coordinator.transaction_coordinator import TransactionCoordinator
    from odradek.metadata.image import MetadataImage
    from odradek.replication.replica_manager import ReplicaManager
    from odradek.server.authorizer import Authorizer, CredentialCache
    from odradek.zk.admin_gateway import AdminGateway

__all__ = ["MetadataSource", "RequestContext"]


class MetadataSource(Protocol):
    """The current metadata image and a way to wait for the next one."""

    @property
    def image(self) -> MetadataImage: ...

    async def wait_for_image(self, timeout_s: float) -> None: ...


class RequestContext:
    __slots__ = (
        "broker_id",
        "config",
        "settings",
        "replicas",
        "groups",
        "producer_ids",
        "_admin",
        "_metadata",
        "authorizer",
        "credentials",
        "txns",
        "quotas",
        "schema_ids",
        "metadata_answers",
        "topic_entries",
    )

    def __init__(
        self,
        *,
        broker_id: int,
        config: BrokerConfig,
        replicas: ReplicaManager,
        groups: GroupCoordinator,
        producer_ids: ProducerIdManager | None,
        admin: AdminGateway | None,
        metadata: MetadataSource,
        txns: TransactionCoordinator | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.config = config
        # The settings handlers read (a context without a config, in unit tests: defaults).
        self.settings = config.settings(ServerSettings) if config is not None else ServerSettings()
        self.replicas = replicas
        self.groups = groups
        self.producer_ids = producer_ids
        # Admin reads and writes (topics, configs, ACLs, SCRAM users, quotas, elections,
        # reassignments) go to ZooKeeper through this gateway, as Kafka's go through
        # AdminZkClient; handlers never see the kazoo session. None only before the
        # broker connected.
        self._admin = admin
        self.txns: TransactionCoordinator = txns  # type: ignore[assignment]
        self._metadata = metadata
        # Filled in by the broker once connected to ZooKeeper (None: no authorizer /
        # no SCRAM listener).
        self.authorizer: Authorizer | None = None
        self.credentials: CredentialCache | None = None
        # Client quotas (KIP-13/55/124): inactive (one boolean on the hot path) until a
        # quota is configured; the broker's QuotaFollower keeps it in step with ZooKeeper.
        self.quotas = QuotaManager()
        # confluent.schema.registry.url: the registry of schema id validation (issue 27);
        # None without one (a validating topic's produce is then refused).
        self.schema_ids: SchemaIdValidator | None = None
        # Encoded Metadata answers while the image is unchanged (server/metadata_answers).
        self.metadata_answers = MetadataAnswers()
        self.topic_entries = TopicEntries()

    # ------------------------------------------------------------------ ZooKeeper
    @property
    def admin(self) -> AdminGateway:
        """The admin gateway; the listeners start serving only once it is there."""
        if self._admin is None:
            raise RuntimeError("the broker is not connected to ZooKeeper yet")
        return self._admin

    @admin.setter
    def admin(self, gateway: AdminGateway) -> None:
        self._admin = gateway

    @property
    def admin_connected(self) -> bool:
        return self._admin is not None

    # ------------------------------------------------------------------ security
    @property
    def session(self) -> Session:
        return current_session()

    def authorize(self, op: AclOperation, rtype: ResourceType, name: str) -> bool:
        auth = self.authorizer
        if auth is None:
            return True
        s = current_session()
        return auth.cache.authorize(s.principal_or_anonymous, s.client_host, op, rtype, name)

    def authorize_cluster(self, op: AclOperation) -> bool:
        return self.authorize(op, ResourceType.CLUSTER, CLUSTER_NAME)

    def authorize_any_topic(self, op: AclOperation) -> bool:
        """Kafka's authorizeByResourceType(TOPIC) (KIP-679)."""
        auth = self.authorizer
        if auth is None:
            return True
        s = current_session()
        return auth.cache.authorize_by_resource_type(
            s.principal_or_anonymous, s.client_host, op, ResourceType.TOPIC
        )

    @property
    def image(self) -> MetadataImage:
        """The current image: replaced as a whole on each change, so one read gives a
        consistent view for the whole request."""
        return self._metadata.image

    async def wait_for_image(self, timeout_s: float) -> None:
        """Wait (bounded) until the next metadata image is applied (after an admin write
        whose effect the answer must show)."""
        await self._metadata.wait_for_image(timeout_s)
