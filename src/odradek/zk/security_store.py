"""ACLs and SCRAM credentials in ZooKeeper, in Kafka's layout (blocking kazoo calls).

ACLs (Kafka's ``ZkAclStore``): one znode per resource pattern holding every entry of it,
``{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
"operation":"Write","host":"*"}]}``:

* LITERAL patterns at ``/kafka-acl/<ResourceType>/<name>`` (``/kafka-acl/Topic/t``);
* PREFIXED patterns at ``/kafka-acl-extended/prefixed/<ResourceType>/<name>``.

Every change adds a persistent sequential ``acl_changes_N`` under
``/kafka-acl-changes`` (body ``Topic:t``) or ``/kafka-acl-extended-changes`` (body
``{"version":1,"resourceType":"Topic","name":"p","patternType":"PREFIXED"}``); brokers
watch both and re-read the named resource. Writes are conditional on the znode version
(read, change, write; retried on a lost race), as Kafka's authorizer does.

SCRAM credentials (Kafka's ``/config/users/<sanitized name>``):
``{"version":1,"config":{"SCRAM-SHA-256":"salt=...,stored_key=...,server_key=...,
iterations=4096"}}`` plus a ``/config/changes/config_change_N`` notification
``{"version":2,"entity_path":"users/<name>"}``.

Everything ZooKeeper-specific of issue 14 is in this module, so that it can move onto the
``KafkaZkClient`` of issue 13 in one place.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from odradek.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    parse_enum,
    pascal_name,
)
from odradek.zk.cas import change_entity_config, purge_expired_changes, update_znode

logger = logging.getLogger(__name__)

__all__ = [
    "ACL_CHANGE_ROOTS",
    "LITERAL_ACL_ROOT",
    "PREFIXED_ACL_ROOT",
    "acl_path",
    "decode_acl_change",
    "decode_acls",
    "encode_acls",
    "read_acls",
    "read_all_acls",
    "update_acls",
    "read_user_config",
    "read_all_user_configs",
    "update_user_config",
    "sanitize_user",
    "unsanitize_user",
    "USERS_ROOT",
]

LITERAL_ACL_ROOT = "/kafka-acl"
PREFIXED_ACL_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
ACL_CHANGE_ROOTS = (LITERAL_CHANGES, EXTENDED_CHANGES)
CHANGE_PREFIX = "acl_changes_"
USERS_ROOT = "/config/users"
_STORABLE_TYPES = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
    ResourceType.DELEGATION_TOKEN,
    ResourceType.USER,
    ResourceType.SUBJECT,
    ResourceType.REGISTRY,
)


# ------------------------------------------------------------------------ ACL codecs
def _check_name(name: str) -> None:
    # A znode path segment: Kafka (ZooKeeper mode) concatenates the name into the path;
    # "/" would address another znode, "." and ".." are refused by ZooKeeper.
    if not name or "/" in name or name in (".", "..") or "\x00" in name:
        raise ValueError(f"resource name {name!r} cannot be stored in ZooKeeper")


def acl_path(pattern: ResourcePattern) -> str:
    _check_name(pattern.name)
    root = {PatternType.LITERAL: LITERAL_ACL_ROOT, PatternType.PREFIXED: PREFIXED_ACL_ROOT}[
        pattern.pattern_type
    ]
    return f"{root}/{pascal_name(pattern.resource_type)}/{pattern.name}"


def encode_acls(entries: frozenset[AccessControlEntry] | set[AccessControlEntry]) -> bytes:
    acls = [
        {
            "principal": e.principal,
            "permissionType": pascal_name(e.permission_type),
            "operation": pascal_name(e.operation),
            "host": e.host,
        }
        for e in sorted(entries, key=str)
    ]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def decode_acls(data: bytes | None) -> frozenset[AccessControlEntry]:
    if not data:
        return frozenset()
    obj = json.loads(data)
    if not isinstance(obj, dict) or obj.get("version") != 1:
        raise ValueError("unsupported ACL znode version")
    out = set()
    for item in obj.get("acls") or ():
        out.add(
            AccessControlEntry(
                str(item["principal"]),
                str(item["host"]),
                AclOperation(parse_enum(AclOperation, item["operation"])),
                AclPermissionType(parse_enum(AclPermissionType, item["permissionType"])),
            )
        )
    return frozenset(out)


def _encode_change(pattern: ResourcePattern) -> tuple[str, bytes]:
    if pattern.pattern_type == PatternType.LITERAL:
        return LITERAL_CHANGES, f"{pascal_name(pattern.resource_type)}:{pattern.name}".encode()
    body = {
        "version": 1,
        "resourceType": pascal_name(pattern.resource_type),
        "name": pattern.name,
        "patternType": pattern.pattern_type.name,
    }
    return EXTENDED_CHANGES, json.dumps(body, separators=(",", ":")).encode()


def decode_acl_change(root: str, data: bytes) -> ResourcePattern:
    text = data.decode("utf-8")
    if root == LITERAL_CHANGES:
        rtype, sep, name = text.partition(":")
        if not sep:
            raise ValueError(f"expected ResourceType:ResourceName, got {text!r}")
        return ResourcePattern(
            ResourceType(parse_enum(ResourceType, rtype)), name, PatternType.LITERAL
        )
    obj = json.loads(text)
    return ResourcePattern(
        ResourceType(parse_enum(ResourceType, obj["resourceType"])),
        str(obj["name"]),
        PatternType(parse_enum(PatternType, obj["patternType"])),
    )


# ------------------------------------------------------------------------ ACL I/O
def read_acls(
    zk: KazooClient, pattern: ResourcePattern
) -> tuple[frozenset[AccessControlEntry], int | None]:
    try:
        data, stat = zk.get(acl_path(pattern))
    except NoNodeError:
        return frozenset(), None
    return decode_acls(data), stat.version


def read_all_acls(
    zk: KazooClient, only: frozenset[ResourceType] | None = None
) -> dict[ResourcePattern, frozenset[AccessControlEntry]]:
    """Every binding in the store (``only``: only resources of these types)."""
    out: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
    for root, ptype in (
        (LITERAL_ACL_ROOT, PatternType.LITERAL),
        (PREFIXED_ACL_ROOT, PatternType.PREFIXED),
    ):
        try:
            types = zk.get_children(root)
        except NoNodeError:
            continue
        for tname in types:
            try:
                rtype = ResourceType(parse_enum(ResourceType, tname))
                if only is not None and rtype not in only:
                    continue
                names = zk.get_children(f"{root}/{tname}")
            except (ValueError, NoNodeError):
                continue
            for name in names:
                pattern = ResourcePattern(rtype, name, ptype)
                try:
                    entries, _ = read_acls(zk, pattern)
                except ValueError as e:
                    logger.warning("ignoring unreadable ACL znode %s: %s", acl_path(pattern), e)
                    continue
                if entries:
                    out[pattern] = entries
    return out


def latest_change_sequence(zk: KazooClient) -> dict[str, int]:
    """The highest notification number under each change root (-1: none)."""
    out = {}
    for root in ACL_CHANGE_ROOTS:
        try:
            children = zk.get_children(root)
        except NoNodeError:
            children = []
        out[root] = max((_seq(c) for c in children), default=-1)
    return out


def _seq(child: str) -> int:
    try:
        return int(child[len(CHANGE_PREFIX) :])
    except ValueError:
        return -1


def changes_after(
    zk: KazooClient, root: str, after: int
) -> list[tuple[int, ResourcePattern | None]]:
    """Notifications newer than ``after``, in order, decoded (unreadable ones skipped)."""
    try:
        children = zk.get_children(root)
    except NoNodeError:
        return []
    out: list[tuple[int, ResourcePattern | None]] = []
    for child in sorted(children, key=_seq):
        n = _seq(child)
        if n <= after:
            continue
        try:
            data, _ = zk.get(f"{root}/{child}")
            out.append((n, decode_acl_change(root, data)))
        except NoNodeError:
            out.append((n, None))  # purged meanwhile: still advances the position
        except (ValueError, KeyError) as e:
            logger.warning("ignoring unreadable ACL change %s/%s: %s", root, child, e)
            out.append((n, None))
    return out


def update_acls(
    zk: KazooClient,
    pattern: ResourcePattern,
    add: frozenset[AccessControlEntry] = frozenset(),
    remove: frozenset[AccessControlEntry] = frozenset(),
) -> frozenset[AccessControlEntry]:
    """Add and remove entries of one resource pattern, conditionally on the version read
    (a lost race re-reads and re-applies; a pattern left with no entry loses its znode);
    then notify every broker. Returns the new entries."""
    if pattern.resource_type not in _STORABLE_TYPES:
        raise ValueError(f"resource type {pattern.resource_type.name} cannot have ACLs")
    done = update_znode(
        zk,
        acl_path(pattern),
        lambda current: (current | add) - remove,
        decode=decode_acls,
        encode=lambda new: encode_acls(new) if new else None,
        skip_unchanged=True,
    )
    if done.written:
        root, body = _encode_change(pattern)
        zk.create(f"{root}/{CHANGE_PREFIX}", body, sequence=True, makepath=True)
        purge_expired_changes(zk, root)
    return done.new


# ------------------------------------------------------------------------ users
def sanitize_user(name: str) -> str:
    """Kafka's Sanitizer: URL-encode the name so any principal name is one znode name."""
    return (
        urllib.parse.quote(name, safe="").replace(".", "%2E")
        if name in (".", "..")
        else urllib.parse.quote(name, safe="")
    )


def unsanitize_user(name: str) -> str:
    return urllib.parse.unquote(name)


def _user_path(name: str) -> str:
    if not name:
        raise ValueError("user name must not be empty")
    return f"{USERS_ROOT}/{sanitize_user(name)}"


def _decode_config(data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    obj = json.loads(data)
    config = obj.get("config") if isinstance(obj, dict) else None
    return {str(k): str(v) for k, v in (config or {}).items()}


def read_user_config(zk: KazooClient, name: str) -> dict[str, str]:
    try:
        data, _ = zk.get(_user_path(name))
    except NoNodeError:
        return {}
    return _decode_config(data)


def read_all_user_configs(zk: KazooClient) -> dict[str, dict[str, str]]:
    try:
        children = zk.get_children(USERS_ROOT)
    except NoNodeError:
        return {}
    out = {}
    for child in children:
        try:
            data, _ = zk.get(f"{USERS_ROOT}/{child}")
            out[unsanitize_user(child)] = _decode_config(data)
        except NoNodeError:
            continue
        except ValueError as e:
            logger.warning("ignoring unreadable user config %s: %s", child, e)
    return out


def update_user_config(
    zk: KazooClient, name: str, set_keys: dict[str, str], delete_keys: set[str]
) -> dict[str, str]:
    """Set and delete keys of ``/config/users/<name>`` (conditional write), then add the
    config change notification. Returns the new config."""
    _user_path(name)  # refuses an empty name

    def change(current: dict[str, str]) -> dict[str, str]:
        new = {k: v for k, v in current.items() if k not in delete_keys}
        new.update(set_keys)
        return new

    return change_entity_config(zk, f"users/{sanitize_user(name)}", change, skip_unchanged=True)


def watch_paths() -> tuple[str, ...]:
    """Paths the broker creates at start so that watches can be set on them."""
    return (LITERAL_CHANGES, EXTENDED_CHANGES, USERS_ROOT)


def acl_store_paths() -> tuple[str, ...]:
    """Kafka's ``KafkaZkClient.createAclPaths``: both ACL stores and a znode per resource
    type. Created at start so that, with ``zookeeper.set.acl``, they carry the brokers'
    ACLs: a path left to be created on the first CreateAcls could be created first by
    any ZooKeeper client (the ZooKeeper root is world-writable) with its own ACL."""
    return tuple(
        f"{root}/{pascal_name(t)}"
        for root in (LITERAL_ACL_ROOT, PREFIXED_ACL_ROOT)
        for t in _STORABLE_TYPES
    )


def ensure_paths(zk: KazooClient) -> None:
    for p in (*watch_paths(), *acl_store_paths()):
        zk.ensure_path(p)


def describe(obj: Any) -> str:  # pragma: no cover - debugging aid
    return json.dumps(obj, sort_keys=True)
