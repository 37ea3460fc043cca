"""``odradek acls``: kafka-acls.sh's options and output, over CreateAcls / DescribeAcls /
DeleteAcls (APIs 30, 29, 31) with confluent-kafka's AdminClient.

    odradek acls --bootstrap-server B --command-config client.properties \\
        --add --allow-principal User:alice --operation Write --topic t
    odradek acls ... --list [--topic t] [--principal User:alice]
    odradek acls ... --remove --allow-principal User:alice --operation Read --topic t --force
    odradek acls ... --add --allow-principal User:bob --consumer --topic t --group g
    odradek acls ... --add --allow-principal User:carol --producer --topic t --idempotent

Output lines are Kafka's (``AclCommand``)::

    Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`:
     \t(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)

    Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)`:
     \t(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from typing import Any

from odradek.cli.common import add_command_config, admin_client
from odradek.security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    parse_enum,
)

__all__ = ["add_parser", "plan_bindings"]

_TIMEOUT_S = 30.0


class AclCommandError(Exception):
    pass


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "acls",
        help="add, remove and list ACLs",
        description="Like kafka-acls.sh (--bootstrap-server mode).",
    )
    p.add_argument("--bootstrap-server", required=True)
    add_command_config(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true")
    action.add_argument("--remove", action="store_true")
    action.add_argument("--list", action="store_true")
    p.add_argument("--topic", action="append", default=[])
    p.add_argument("--group", action="append", default=[])
    p.add_argument("--transactional-id", action="append", default=[])
    p.add_argument("--cluster", action="store_true")
    p.add_argument(
        "--resource-pattern-type",
        default=None,
        help="literal, prefixed (add/remove); also any, match (list/remove)",
    )
    p.add_argument("--allow-principal", action="append", default=[])
    p.add_argument("--deny-principal", action="append", default=[])
    p.add_argument("--allow-host", action="append", default=[])
    p.add_argument("--deny-host", action="append", default=[])
    p.add_argument("--operation", action="append", default=[])
    p.add_argument(
        "--principal", action="append", default=[], help="with --list: only ACLs of this principal"
    )
    p.add_argument("--producer", action="store_true")
    p.add_argument("--consumer", action="store_true")
    p.add_argument("--idempotent", action="store_true")
    p.add_argument("--force", action="store_true", help="do not ask before removing")
    p.set_defaults(func=_run)


# =============================================================================== pure
def _resources(args: argparse.Namespace, ptype: PatternType) -> list[ResourcePattern]:
    out = [ResourcePattern(ResourceType.TOPIC, t, ptype) for t in args.topic]
    out += [ResourcePattern(ResourceType.GROUP, g, ptype) for g in args.group]
    out += [ResourcePattern(ResourceType.TRANSACTIONAL_ID, t, ptype) for t in args.transactional_id]
    if args.cluster:
        out.append(ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    return out


def _entries(
    principals: list[str], hosts: list[str], ops: list[AclOperation], perm: AclPermissionType
) -> list[AccessControlEntry]:
    return [
        AccessControlEntry(p, h, op, perm)
        for p in principals
        for h in (hosts or ["*"])
        for op in ops
    ]


def plan_bindings(args: argparse.Namespace) -> dict[ResourcePattern, list[AccessControlEntry]]:
    """What --add / --remove means (Kafka's AclCommand, convenience options included)."""
    ptype = PatternType(parse_enum(PatternType, args.resource_pattern_type or "literal"))
    if ptype not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise AclCommandError(
            "A '--resource-pattern-type' value of 'ANY' or 'MATCH' is not valid when adding acls."
        )
    if not (args.allow_principal or args.deny_principal):
        raise AclCommandError(
            "You must specify one of: --allow-principal, --deny-principal when trying to add ACLs."
        )
    plan: dict[ResourcePattern, list[AccessControlEntry]] = defaultdict(list)

    def add(resources: list[ResourcePattern], ops: list[AclOperation]) -> None:
        for r in resources:
            plan[r] += _entries(args.allow_principal, args.allow_host, ops, AclPermissionType.ALLOW)
            plan[r] += _entries(args.deny_principal, args.deny_host, ops, AclPermissionType.DENY)

    if args.producer or args.consumer:
        if args.consumer and not args.group:
            raise AclCommandError("With --consumer you must specify a --group")
        topics = [ResourcePattern(ResourceType.TOPIC, t, ptype) for t in args.topic]
        if not topics:
            raise AclCommandError("--producer and --consumer need --topic")
        if args.producer:
            add(topics, [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE])
            txn = [
                ResourcePattern(ResourceType.TRANSACTIONAL_ID, t, ptype)
                for t in args.transactional_id
            ]
            add(txn, [AclOperation.WRITE, AclOperation.DESCRIBE])
            if args.idempotent:
                add(
                    [ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)],
                    [AclOperation.IDEMPOTENT_WRITE],
                )
        if args.consumer:
            add(topics, [AclOperation.READ, AclOperation.DESCRIBE])
            add(
                [ResourcePattern(ResourceType.GROUP, g, ptype) for g in args.group],
                [AclOperation.READ],
            )
        return dict(plan)
    ops = [AclOperation(parse_enum(AclOperation, o)) for o in args.operation] or [AclOperation.ALL]
    resources = _resources(args, ptype)
    if not resources:
        raise AclCommandError(
            "You must provide at least one resource: --topic <topic> or "
            "--cluster or --group <group> or --transactional-id <id>"
        )
    for r in resources:
        bad = [
            o
            for o in ops
            if o != AclOperation.ALL and o not in SUPPORTED_OPERATIONS[r.resource_type]
        ]
        if bad:
            raise AclCommandError(
                f"ResourceType {r.resource_type.name} only supports "
                f"operations {', '.join(sorted(o.name for o in SUPPORTED_OPERATIONS[r.resource_type]))}"
            )
    add(resources, ops)
    return dict(plan)


def format_resource(
    header: str, pattern: ResourcePattern, entries: list[AccessControlEntry]
) -> str:
    body = "\n".join("\t" + str(e) for e in sorted(entries, key=str))
    return f"{header} `{pattern}`: \n {body} \n"


# =============================================================================== confluent
def _ck(pattern: ResourcePattern, e: AccessControlEntry | None) -> Any:
    from confluent_kafka.admin import (  # noqa: PLC0415
        AclBinding,
        AclBindingFilter,
    )
    from confluent_kafka.admin import (
        AclOperation as CkOp,
    )
    from confluent_kafka.admin import (
        AclPermissionType as CkPerm,
    )
    from confluent_kafka.admin import (
        ResourcePatternType as CkPattern,
    )
    from confluent_kafka.admin import (
        ResourceType as CkType,
    )

    # confluent-kafka's enums carry Kafka's wire values (its BROKER is Kafka's CLUSTER, 4)
    rtype = CkType(int(pattern.resource_type))
    if e is None:
        return AclBindingFilter(
            rtype,
            pattern.name,
            CkPattern(int(pattern.pattern_type)),
            None,
            None,
            CkOp.ANY,
            CkPerm.ANY,
        )
    return AclBinding(
        rtype,
        pattern.name,
        CkPattern(int(pattern.pattern_type)),
        e.principal,
        e.host,
        CkOp(int(e.operation)),
        CkPerm(int(e.permission_type)),
    )


def _from_ck(b: Any) -> tuple[ResourcePattern, AccessControlEntry]:
    return (
        ResourcePattern(
            ResourceType(b.restype.value), b.name, PatternType(b.resource_pattern_type.value)
        ),
        AccessControlEntry(
            b.principal,
            b.host,
            AclOperation(b.operation.value),
            AclPermissionType(b.permission_type.value),
        ),
    )


def _describe(admin: Any, flt: Any) -> dict[ResourcePattern, list[AccessControlEntry]]:
    out: dict[ResourcePattern, list[AccessControlEntry]] = defaultdict(list)
    for b in admin.describe_acls(flt, request_timeout=_TIMEOUT_S).result(_TIMEOUT_S):
        pattern, entry = _from_ck(b)
        out[pattern].append(entry)
    return out


def _list_filters(args: argparse.Namespace) -> list[Any]:
    from confluent_kafka.admin import (  # noqa: PLC0415
        AclBindingFilter,
    )
    from confluent_kafka.admin import (
        AclOperation as CkOp,
    )
    from confluent_kafka.admin import (
        AclPermissionType as CkPerm,
    )
    from confluent_kafka.admin import (
        ResourcePatternType as CkPattern,
    )
    from confluent_kafka.admin import (
        ResourceType as CkType,
    )

    ptype = CkPattern[(args.resource_pattern_type or "any").upper()]
    principals = args.principal or [None]
    res = [(CkType(int(r.resource_type)), r.name) for r in _resources(args, PatternType.ANY)]
    if not res:
        res = [(CkType.ANY, None)]
    return [
        AclBindingFilter(
            t, n, ptype if t != CkType.BROKER else CkPattern.ANY, p, None, CkOp.ANY, CkPerm.ANY
        )
        for t, n in res
        for p in principals
    ]


def _run(args: argparse.Namespace) -> int:
    try:
        admin = admin_client(args)
        if args.list:
            found: dict[ResourcePattern, list[AccessControlEntry]] = defaultdict(list)
            for flt in _list_filters(args):
                for pattern, entries in _describe(admin, flt).items():
                    found[pattern] += [e for e in entries if e not in found[pattern]]
            if args.principal:
                print(f"ACLs for principal `{', '.join(args.principal)}`")
            for pattern in sorted(found, key=str):
                print(format_resource("Current ACLs for resource", pattern, found[pattern]))
            return 0
        plan = plan_bindings(args)
        if args.add:
            for pattern, entries in plan.items():
                print(format_resource("Adding ACLs for resource", pattern, entries))
            bindings = [_ck(p, e) for p, es in plan.items() for e in es]
            for fut in admin.create_acls(bindings, request_timeout=_TIMEOUT_S).values():
                fut.result(_TIMEOUT_S)
        else:
            if not args.force:
                print(
                    f"Are you sure you want to remove ACLs: \n "
                    f"{', '.join(str(e) for es in plan.values() for e in es)} \n "
                    f"from resource filter(s) {', '.join(map(str, plan))}? (y/n)"
                )
                if sys.stdin.readline().strip().lower() != "y":
                    return 0
            for pattern, entries in plan.items():
                print(format_resource("Removing ACLs for resource", pattern, entries))
            filters = [_ck_filter_for(p, e) for p, es in plan.items() for e in es]
            for fut in admin.delete_acls(filters, request_timeout=_TIMEOUT_S).values():
                fut.result(_TIMEOUT_S)
        for pattern in plan:
            current = _describe(admin, _ck(pattern, None)).get(pattern, [])
            print(format_resource("Current ACLs for resource", pattern, current))
        return 0
    except AclCommandError as e:
        print(str(e), file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - Kafka's tool prints the failure and exits 1
        err = e.args[0] if e.args else e
        text = f"{err.name()}: {err.str()}" if hasattr(err, "str") else f"{e!r}"
        print(f"Error while executing ACL command: {text}", file=sys.stderr)
        return 1


def _ck_filter_for(pattern: ResourcePattern, e: AccessControlEntry) -> Any:
    from confluent_kafka.admin import AclBindingFilter  # noqa: PLC0415

    b = _ck(pattern, e)
    return AclBindingFilter(
        b.restype,
        b.name,
        b.resource_pattern_type,
        b.principal,
        b.host,
        b.operation,
        b.permission_type,
    )
