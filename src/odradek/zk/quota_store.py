"""Client quota configs in ZooKeeper, in Kafka's layout (blocking kazoo calls).

Kafka (ZooKeeper mode) keeps quotas as entity configs (``AdminZkClient.changeConfigs``)::

    /config/users/<user>                    {"version":1,"config":{"producer_byte_rate":"1024"}}
    /config/users/<user>/clients/<client>
    /config/users/<default>[/clients/<default>]
    /config/clients/<client> | /config/clients/<default>

User and client-id names are sanitized (URL-encoded) into one znode name; ``<default>``
is the default entity. A user's znode also holds its SCRAM credentials, which a quota
change keeps. Each change adds a ``/config/changes/config_change_N`` notification whose
entity path is ``users/<user>``, ``clients/<client>`` or ``users/<user>/clients/<client>``;
brokers follow those notifications (``odradek.server.quota_follower``), as Kafka's
``ZkConfigManager`` does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from odradek.zk import znodes
from odradek.zk.cas import change_entity_config

logger = logging.getLogger(__name__)

__all__ = [
    "USERS",
    "CLIENTS",
    "entity_path",
    "parse_entity_path",
    "read_entity",
    "read_all",
    "alter_entity",
    "latest_change_sequence",
    "changes_after",
]

USERS = "/config/users"
CLIENTS = "/config/clients"
_CHANGE_PREFIX = "config_change_"

# (sanitized user | "<default>" | None, sanitized client-id | "<default>" | None)
EntityKey = tuple[str | None, str | None]


def entity_path(entity: EntityKey) -> str:
    """The entity path of a notification, ``/config/`` + it is the znode."""
    user, client = entity
    if user is not None and client is not None:
        return f"users/{user}/clients/{client}"
    if user is not None:
        return f"users/{user}"
    if client is not None:
        return f"clients/{client}"
    raise ValueError("a quota entity names a user, a client-id or both")


def parse_entity_path(path: str) -> EntityKey | None:
    """The quota entity of a notification's entity path; None for other entities
    (topics, brokers) and for malformed paths."""
    parts = path.split("/")
    if len(parts) == 2 and parts[0] == "users" and parts[1]:
        return parts[1], None
    if len(parts) == 2 and parts[0] == "clients" and parts[1]:
        return None, parts[1]
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients" and parts[1] and parts[3]:
        return parts[1], parts[3]
    return None


def _path(entity: EntityKey) -> str:
    for name in entity:
        if name is not None and (not name or "/" in name or name in (".", "..")):
            raise ValueError(f"{name!r} cannot be a znode name")
    return f"{znodes.CONFIG}/{entity_path(entity)}"


def read_entity(zk: KazooClient, entity: EntityKey) -> dict[str, str]:
    try:
        data, _ = zk.get(_path(entity))
    except NoNodeError:
        return {}
    return znodes.decode_topic_config(data)


def _children(zk: KazooClient, path: str) -> list[str]:
    try:
        return list(zk.get_children(path))
    except NoNodeError:
        return []


def read_all(zk: KazooClient) -> dict[EntityKey, dict[str, str]]:
    """Every user, client-id and (user, client-id) entity config (Kafka's
    fetchAllEntityConfigs and fetchAllChildEntityConfigs)."""
    out: dict[EntityKey, dict[str, str]] = {}
    entities: list[EntityKey] = [(None, c) for c in _children(zk, CLIENTS)]
    for user in _children(zk, USERS):
        entities.append((user, None))
        entities.extend((user, c) for c in _children(zk, f"{USERS}/{user}/clients"))
    for entity in entities:
        try:
            config = read_entity(zk, entity)
        except Exception as e:  # noqa: BLE001 - one unreadable znode must not hide the rest
            logger.warning("ignoring unreadable quota config %s: %s", entity, e)
            continue
        if config:
            out[entity] = config
    return out


def alter_entity(
    zk: KazooClient,
    entity: EntityKey,
    change: Callable[[dict[str, str]], dict[str, str]],
    validate_only: bool,
) -> dict[str, str]:
    """Read the entity's config, apply ``change`` (which validates), write it back
    conditionally and add the change notification. Returns the new config."""
    _path(entity)  # refuses names that are no znode name
    return change_entity_config(
        zk, entity_path(entity), change, validate_only=validate_only, skip_unchanged=True
    )


def _seq(child: str) -> int:
    try:
        return int(child[len(_CHANGE_PREFIX) :])
    except ValueError:
        return -1


def latest_change_sequence(zk: KazooClient) -> int:
    return max((_seq(c) for c in _children(zk, znodes.CONFIG_CHANGES)), default=-1)


def changes_after(zk: KazooClient, after: int) -> list[tuple[int, str | None]]:
    """Config change notifications newer than ``after``, in order: (sequence, entity
    path or None when unreadable or purged meanwhile)."""
    out: list[tuple[int, str | None]] = []
    for child in sorted(_children(zk, znodes.CONFIG_CHANGES), key=_seq):
        n = _seq(child)
        if n <= after:
            continue
        try:
            data, _ = zk.get(f"{znodes.CONFIG_CHANGES}/{child}")
            out.append((n, znodes.decode_config_change(data)))
        except NoNodeError:
            out.append((n, None))
        except Exception as e:  # noqa: BLE001 - garbage in one notification
            logger.warning("ignoring unreadable config change %s: %s", child, e)
            out.append((n, None))
    return out
