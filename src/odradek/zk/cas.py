"""Read-modify-write of one znode, conditional on its version, and Kafka's entity configs.

Every admin write of Odradek that changes part of a znode (topic, broker, user and client
configs, ACLs, the reassignment request) is a compare-and-set: read the data with its
version, compute the new data, ``set(..., version=v)``; a concurrent writer makes the set
fail (BadVersionError), a concurrent create or delete makes the create or set fail
(NodeExistsError / NoNodeError), and the change is re-applied to a fresh read. Kafka's
AdminZkClient and AclAuthorizer do the same. ``update_znode`` is that loop, once;
``change_entity_config`` is Kafka's ``AdminZkClient.changeConfigs`` on top of it: write
``/config/<type>/<name>``, then announce it with a sequential
``/config/changes/config_change_N`` that every broker follows.

Blocking kazoo calls: the request handlers reach them through
``odradek.zk.admin_gateway`` in a worker thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from odradek.zk import znodes

logger = logging.getLogger(__name__)

__all__ = [
    "CAS_ATTEMPTS",
    "CHANGE_EXPIRATION_MS",
    "ConcurrentUpdateError",
    "Updated",
    "change_entity_config",
    "purge_expired_changes",
    "update_znode",
]

T = TypeVar("T")

CAS_ATTEMPTS = 20
# Kafka purges change notifications older than 15 minutes
# (ZkNodeChangeNotificationListener.changeExpirationMs); each write purges a few.
CHANGE_EXPIRATION_MS = 15 * 60 * 1000
_PURGE_PER_WRITE = 10
# What a lost race looks like: the version moved, the znode appeared or vanished (or,
# for a delete, gained a child) between our read and our write.
_CONFLICTS = (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError)


class ConcurrentUpdateError(TimeoutError):
    """Every attempt lost a race with another writer of the same znode."""

    def __init__(self, path: str, attempts: int) -> None:
        super().__init__(f"{path}: changed concurrently {attempts} times; retry")
        self.path = path
        self.attempts = attempts


@dataclass(frozen=True, slots=True)
class Updated(Generic[T]):
    """The outcome of ``update_znode``: the value before and after, and whether the znode
    was written (False: unchanged, or a dry run)."""

    old: T
    new: T
    written: bool


def _drop_traceback(e: BaseException) -> None:
    """Forget where a handled kazoo error passed. kazoo raises the exception object its
    AsyncResult keeps, so the traceback (its get() frame holds that AsyncResult) is a
    reference cycle; and it holds this frame, whose f_back holds every caller's frame with
    their locals (a test's Kafka clients, say) until a full garbage collection."""
    e.__traceback__ = None


def update_znode(
    zk: KazooClient,
    path: str,
    change: Callable[[T], T],
    *,
    decode: Callable[[bytes | None], T],
    encode: Callable[[T], bytes | None],
    create: bool = True,
    skip_unchanged: bool = False,
    dry_run: bool = False,
    attempts: int = CAS_ATTEMPTS,
) -> Updated[T]:
    """Apply ``change`` to the decoded data of ``path`` and write it back conditionally.

    ``decode(None)`` is the value of an absent znode, which is created (with parents)
    when ``create``, else NoNodeError is raised. ``encode`` returning None deletes the
    znode (an ACL resource with no entries left). ``change`` may raise: that ends the
    update with nothing written. ``skip_unchanged``: when the new value equals the old
    one and the znode already is in that state, nothing is written. ``dry_run``: compute
    and return the new value, write nothing. After ``attempts`` lost races,
    ConcurrentUpdateError.
    """
    for _ in range(attempts):
        try:
            data, stat = zk.get(path)
            version: int | None = stat.version
        except NoNodeError as e:
            if not create:
                raise
            _drop_traceback(e)
            data, version = None, None
        old = decode(data)
        new = change(old)
        if dry_run:
            return Updated(old, new, False)
        body = encode(new)
        if (skip_unchanged and new == old and (version is not None or body is None)) or (
            version is None and body is None
        ):
            return Updated(old, new, False)
        try:
            if version is None:
                zk.create(path, body, makepath=True)
            elif body is None:
                zk.delete(path, version=version)
            else:
                zk.set(path, body, version=version)
        except _CONFLICTS as e:
            _drop_traceback(e)
            continue  # someone else changed it meanwhile: re-read, re-apply
        return Updated(old, new, True)
    raise ConcurrentUpdateError(path, attempts)


def change_entity_config(
    zk: KazooClient,
    entity_path: str,
    change: Callable[[dict[str, str]], dict[str, str]],
    *,
    validate_only: bool = False,
    skip_unchanged: bool = False,
    attempts: int = CAS_ATTEMPTS,
) -> dict[str, str]:
    """Kafka's ``AdminZkClient.changeConfigs`` for one entity: ``/config/<entity_path>``
    (``topics/T``, ``brokers/<id>``, ``users/<u>``, ``clients/<c>``,
    ``users/<u>/clients/<c>``; names already sanitized) gets ``change`` of its current
    overrides, conditionally on its version; then the change notification. ``change``
    validates (and may raise). Returns the new overrides."""
    done = update_znode(
        zk,
        f"{znodes.CONFIG}/{entity_path}",
        lambda current: dict(change(dict(current))),
        decode=znodes.decode_topic_config,
        encode=znodes.encode_topic_config,
        skip_unchanged=skip_unchanged,
        dry_run=validate_only,
        attempts=attempts,
    )
    if done.written:
        zk.create(
            znodes.CONFIG_CHANGE_PREFIX,
            znodes.encode_config_change(entity_path),
            sequence=True,
            makepath=True,
        )
        purge_expired_changes(zk, znodes.CONFIG_CHANGES)
        logger.info("%s: configs are now %s", entity_path, done.new)
    return done.new


def _seq(child: str) -> int:
    digits = child[-10:]  # ZooKeeper's sequence suffix: ten digits
    return int(digits) if digits.isdigit() else -1


def purge_expired_changes(zk: KazooClient, root: str) -> None:
    """Delete a bounded number of the oldest change notifications under ``root`` that are
    older than CHANGE_EXPIRATION_MS (Kafka's brokers purge them after 15 minutes)."""
    try:
        children = sorted(zk.get_children(root), key=_seq)
        now_ms = time.time() * 1000
        for child in children[:_PURGE_PER_WRITE]:
            stat = zk.exists(f"{root}/{child}")
            if stat is None or now_ms - stat.ctime < CHANGE_EXPIRATION_MS:
                break  # sequential: the rest are younger
            zk.delete(f"{root}/{child}")
    except NoNodeError:
        pass  # purged concurrently by another broker
    except Exception:
        logger.debug("change notification purge of %s failed", root, exc_info=True)
