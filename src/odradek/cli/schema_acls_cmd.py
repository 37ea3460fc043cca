"""``odradek schemas acls``: the schema registry's ACLs (resource types ``Subject`` and
``Registry``), written to the cluster's ZooKeeper ACL store the way the brokers write
Kafka's, with a change notification the registries follow.

Kafka's CreateAcls cannot carry these resource types (kafka-acls.sh and librdkafka know
only Kafka's), so this goes to ZooKeeper directly, authenticated as the brokers are
(``--zookeeper-auth-file``, the brokers' ``odradek.zookeeper.auth``)::

    odradek schemas acls --zookeeper Z --add --allow-principal User:alice \\
        --operation Write --subject orders- --resource-pattern-type prefixed
    odradek schemas acls --zookeeper Z --add --allow-principal User:ops \\
        --operation DescribeConfigs --registry
    odradek schemas acls --zookeeper Z --list

Output lines are kafka-acls.sh's.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from odradek.security.acl import (
    REGISTRY_RESOURCE_TYPES,
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    parse_enum,
    pascal_name,
)

__all__ = ["add_acls_parser", "run_acls", "REGISTRY_OPERATIONS"]

# What each resource type's ACLs can name (the mapping from REST calls is in
# odradek.schema_registry.app and docs/schema-registry.md).
REGISTRY_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.SUBJECT: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                                     AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
                                     AclOperation.ALTER_CONFIGS, AclOperation.ALL}),
    ResourceType.REGISTRY: frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
                                      AclOperation.ALL}),
}  # fmt: skip


def add_acls_parser(ops: Any) -> None:
    a = ops.add_parser("acls", help="add, remove and list the registry's ACLs (in ZooKeeper)")
    a.add_argument("--zookeeper", required=True, help="the cluster's zookeeper.connect")
    a.add_argument(
        "--zookeeper-auth-file",
        default=None,
        help="digest:USER:PASSWORD (the brokers' odradek.zookeeper.auth)",
    )
    action = a.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true")
    action.add_argument("--remove", action="store_true")
    action.add_argument("--list", action="store_true")
    a.add_argument("--allow-principal", action="append", default=[])
    a.add_argument("--deny-principal", action="append", default=[])
    a.add_argument(
        "--operation",
        action="append",
        default=[],
        help="Read, Write, Delete, Describe, DescribeConfigs, AlterConfigs, All",
    )
    a.add_argument("--host", default="*")
    a.add_argument("--subject", action="append", default=[])
    a.add_argument("--registry", action="store_true", help="the global config and mode")
    a.add_argument("--resource-pattern-type", default="literal",
                   choices=("literal", "prefixed"))  # fmt: skip


def plan(args: argparse.Namespace) -> list[tuple[ResourcePattern, AccessControlEntry]]:
    """The (pattern, entry) pairs ``--add`` / ``--remove`` name; ValueError if invalid."""
    from odradek.schema_registry.security import REGISTRY_RESOURCE  # noqa: PLC0415

    ptype = PatternType.PREFIXED if args.resource_pattern_type == "prefixed" else (
        PatternType.LITERAL)  # fmt: skip
    patterns = [ResourcePattern(ResourceType.SUBJECT, s, ptype) for s in args.subject]
    if args.registry:
        patterns.append(ResourcePattern(ResourceType.REGISTRY, REGISTRY_RESOURCE))
    if not patterns:
        raise ValueError("name --subject S (repeatable) or --registry")
    ops = [AclOperation(parse_enum(AclOperation, o)) for o in args.operation]
    if not ops:
        raise ValueError("name --operation")
    principals = [(p, AclPermissionType.ALLOW) for p in args.allow_principal]
    principals += [(p, AclPermissionType.DENY) for p in args.deny_principal]
    if not principals:
        raise ValueError("name --allow-principal or --deny-principal")
    out = []
    for pattern in patterns:
        bad = [o.name for o in ops if o not in REGISTRY_OPERATIONS[pattern.resource_type]]
        if bad:
            what = pascal_name(pattern.resource_type)
            raise ValueError(f"{what} ACLs do not take {', '.join(bad)}")
        out += [(pattern, AccessControlEntry(p, args.host, o, perm))
                for p, perm in principals for o in ops]  # fmt: skip
    return out


def run_acls(args: argparse.Namespace) -> int:
    from odradek.zk import security_store  # noqa: PLC0415
    from odradek.zk.client import connect_zk  # noqa: PLC0415
    from odradek.zookeeper_auth import parse_zk_auth  # noqa: PLC0415

    try:
        auth = (parse_zk_auth(Path(args.zookeeper_auth_file).read_text().strip())
                if args.zookeeper_auth_file else None)  # fmt: skip
        bindings = [] if args.list else plan(args)
    except (OSError, ValueError) as e:
        print(f"error: {e}")
        return 2
    zk = connect_zk(args.zookeeper, source_ip=None, session_timeout_s=10.0, auth=auth,
                    secure_acls=auth is not None)  # fmt: skip
    try:
        by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for pattern, entry in bindings:
            by_pattern.setdefault(pattern, set()).add(entry)
        for pattern, wanted in by_pattern.items():
            verb = "Adding" if args.add else "Removing"
            print(f"{verb} ACLs for resource `{pattern}`: ")
            for ace in sorted(wanted, key=str):
                print(f" \t{ace} ")
            if args.add:
                security_store.update_acls(zk, pattern, add=frozenset(wanted))
            else:
                security_store.update_acls(zk, pattern, remove=frozenset(wanted))
            print()
        if args.list or not bindings:
            acls = security_store.read_all_acls(zk, REGISTRY_RESOURCE_TYPES)
            for pattern, entries in sorted(acls.items(), key=lambda kv: str(kv[0])):
                print(f"Current ACLs for resource `{pattern}`: ")
                for ace in sorted(entries, key=str):
                    print(f" \t{ace} ")
                print()
    finally:
        zk.stop()
        zk.close()
    return 0
