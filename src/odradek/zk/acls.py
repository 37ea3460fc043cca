"""ZooKeeper authentication and znode ACLs (``zookeeper.set.acl``), as Kafka does them.

Why: without ACLs any client that reaches ZooKeeper can rewrite partition state, the
controller's election or the SCRAM credentials (issue 14, item 5). Kafka's rules
(``kafka.zk.ZkData.defaultAcls`` in ZooKeeper mode), which Odradek follows:

* ``zookeeper.set.acl=false``: every znode is created ``world:anyone`` with all rights
  (``OPEN_ACL_UNSAFE``).
* ``zookeeper.set.acl=true``: every znode is created with ``CREATOR_ALL_ACL`` (all rights
  for the identities the creating session authenticated as) plus ``READ_ACL_UNSAFE``
  (world read) -- except under the *sensitive* roots, which are creator-only:
  ``/config/users`` (SCRAM credentials), ``/config/brokers`` (dynamic broker configs,
  passwords among them) and ``/delegation_token`` (Kafka's ``ZkData.SensitiveRootPaths``).
  The old consumer path ``/consumers`` stays open, as in Kafka.

``CREATOR_ALL_ACL`` names no user: ZooKeeper replaces its ``auth`` id with the session's
authenticated ids when the znode is created. Every broker must therefore authenticate
with the same identity, or a broker could not update the znodes another one created.

The policy is applied per path by :class:`AclKazooClient` on every create (plain,
``ensure_path`` and inside transactions), so no call site has to remember it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import NoNodeError
from kazoo.security import ACL, CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE

from odradek.zookeeper_auth import ZkAuth, parse_zk_auth

__all__ = [
    "AclKazooClient",
    "CONSUMERS_PATH",
    "SENSITIVE_ROOT_PATHS",
    "ZkAuth",
    "default_acls",
    "is_sensitive_path",
    "migrate_acls",
    "parse_zk_auth",
]

logger = logging.getLogger(__name__)

# Kafka's ZkData.SensitiveRootPaths: ConfigEntityTypeZNode.path(USER), (BROKER) and
# DelegationTokensZNode.path.
SENSITIVE_ROOT_PATHS: tuple[str, ...] = ("/config/users", "/config/brokers", "/delegation_token")
# Kafka keeps the old consumers' path open: consumers of any identity write under it.
CONSUMERS_PATH = "/consumers"
# ZooKeeper's own subtree (quotas, config): never re-ACLed by the migration.
_ZOOKEEPER_PATH = "/zookeeper"


def is_sensitive_path(path: str) -> bool:
    """Kafka's ``ZkData.sensitivePath``: a prefix test on the root paths (so
    ``/config/users`` itself and everything under it)."""
    return any(path.startswith(root) for root in SENSITIVE_ROOT_PATHS)


def default_acls(secure: bool, path: str) -> list[ACL]:
    """Kafka's ``ZkData.defaultAcls(isSecure, path)``."""
    if not secure or path == CONSUMERS_PATH:
        return list(OPEN_ACL_UNSAFE)
    acls = list(CREATOR_ALL_ACL)
    if not is_sensitive_path(path):
        acls += list(READ_ACL_UNSAFE)
    return acls


class _AclTransactionRequest(TransactionRequest):
    """A ZooKeeper multi whose creates get the client's per-path ACL."""

    def create(
        self,
        path: str,
        value: bytes = b"",
        acl: Any = None,
        ephemeral: bool = False,
        sequence: bool = False,
    ) -> None:
        if acl is None:
            acl = self.client.acl_for(path)
        super().create(path, value, acl=acl, ephemeral=ephemeral, sequence=sequence)


class AclKazooClient(KazooClient):
    """A kazoo client that creates every znode with :func:`default_acls` for its path
    (relative to the chroot, which is what Kafka's rules name)."""

    def __init__(self, *args: Any, secure_acls: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.secure_acls = secure_acls

    def acl_for(self, path: str) -> list[ACL]:
        return default_acls(self.secure_acls, path)

    def create_async(
        self,
        path: str,
        value: bytes = b"",
        acl: Any = None,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
        include_data: bool = False,
    ) -> Any:
        if acl is None:
            acl = self.acl_for(path)
        return super().create_async(
            path,
            value,
            acl=acl,
            ephemeral=ephemeral,
            sequence=sequence,
            makepath=makepath,
            include_data=include_data,
        )

    def transaction(self) -> _AclTransactionRequest:
        return _AclTransactionRequest(self)


def migrate_acls(
    zk: KazooClient, secure: bool, *, on_path: Callable[[str, list[ACL]], None] | None = None
) -> int:
    """Kafka's ``ZkSecurityMigrator``: set :func:`default_acls` on every znode under the
    client's root (its chroot), ``/zookeeper`` excepted; returns the number of znodes set.

    Znodes that vanish while the tree is walked (ephemeral ones, notifications) are
    skipped. The caller's session must be allowed ADMIN on each znode (for a secured
    tree: the identity that created it).
    """
    count = 0
    stack = ["/"]
    while stack:
        path = stack.pop()
        if path == _ZOOKEEPER_PATH:
            continue
        try:
            children = zk.get_children(path)
            # The chroot node itself is one of the cluster's znodes (Kafka creates it
            # with the same rules); the real ZooKeeper root is not.
            if path != "/" or zk.chroot:
                name = path if path != "/" else zk.chroot
                acls = default_acls(secure, name)
                zk.set_acls(path, acls)
                count += 1
                if on_path is not None:
                    on_path(name, acls)
        except NoNodeError:
            continue
        base = path.rstrip("/")
        stack.extend(f"{base}/{c}" for c in children)
    return count
