"""Kafka's ACL model and the authorizer's decision, as pure code.

An ACL binds a resource pattern (resource type, name, LITERAL or PREFIXED) to an access
control entry (principal, host, operation, ALLOW or DENY). The decision follows Kafka's
``AclAuthorizer`` (ZooKeeper mode) exactly:

1. a principal in ``super.users`` may do everything;
2. the ACLs that match the resource are those of its literal name, of the literal
   wildcard ``*`` and of every PREFIXED pattern its name starts with; if there are none,
   the answer is ``allow.everyone.if.no.acl.found``;
3. a DENY that matches the principal (or ``User:*``), the host (or ``*``) and the
   operation (or ALL) refuses; hosts are compared as addresses (``canonical_host``):
   an IPv4 client on a dual-stack listener (``::ffff:a.b.c.d``) is ``a.b.c.d``, as
   Java's InetAddress makes it for Kafka;
4. otherwise an ALLOW that matches the same way allows; READ, WRITE, DELETE and ALTER
   imply DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS (Kafka's implied operations);
5. nothing matched: refused.

``AclCache`` holds the bindings (the authorizer's cache of ``/kafka-acl``), answers
``authorize`` and matches Describe/DeleteAcls filters. It is replaced or updated one
resource at a time from ZooKeeper change notifications by ``server.authorizer``.
"""

from __future__ import annotations

import enum
import functools
import ipaddress
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from odradek.errors import ErrorCode
from odradek.security.principal import KafkaPrincipal

__all__ = [
    "AccessControlEntry",
    "AclBinding",
    "AclBindingFilter",
    "AclCache",
    "AclOperation",
    "AclPermissionType",
    "PatternType",
    "ResourcePattern",
    "ResourceType",
    "KAFKA_RESOURCE_TYPES",
    "REGISTRY_RESOURCE_TYPES",
    "WILDCARD_HOST",
    "WILDCARD_RESOURCE",
    "CLUSTER_NAME",
    "authorization_error",
    "canonical_host",
    "pascal_name",
    "parse_enum",
]

WILDCARD_HOST = "*"
WILDCARD_RESOURCE = "*"
CLUSTER_NAME = "kafka-cluster"  # Kafka's only Cluster resource name


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7
    # The schema registry's resources (Redpanda's ``subject`` and ``registry`` ACL types):
    # kept in the same ZooKeeper ACL store (``/kafka-acl/Subject/<name>``) but with codes
    # no Kafka request can carry (the wire field is an int8), so that no broker API ever
    # creates, describes or deletes them and no Kafka client sees a type it cannot parse.
    SUBJECT = 1001
    REGISTRY = 1002


# The resource types Kafka's own APIs and the broker's authorizer deal with.
REGISTRY_RESOURCE_TYPES = frozenset({ResourceType.SUBJECT, ResourceType.REGISTRY})
KAFKA_RESOURCE_TYPES = frozenset(t for t in ResourceType if t not in REGISTRY_RESOURCE_TYPES)


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def pascal_name(value: enum.IntEnum) -> str:
    """Kafka's SecurityUtils names in znodes: TRANSACTIONAL_ID -> TransactionalId."""
    return "".join(w.capitalize() for w in value.name.split("_"))


def parse_enum(cls: type[enum.IntEnum], text: str) -> enum.IntEnum:
    """Kafka accepts both ``Topic`` and ``TOPIC`` (and ``transactional-id`` on the CLI)."""
    key = text.strip().replace("-", "_").upper()
    if key not in cls.__members__:
        squashed = {m.replace("_", ""): m for m in cls.__members__}
        if key.replace("_", "") not in squashed:
            raise ValueError(f"unknown {cls.__name__} {text!r}")
        key = squashed[key.replace("_", "")]
    return cls[key]


# Operations each resource type supports (Kafka's AclEntry.supportedOperations).
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset(
        {
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.CREATE,
            AclOperation.DESCRIBE,
            AclOperation.DELETE,
            AclOperation.ALTER,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
        }
    ),
    ResourceType.GROUP: frozenset(
        {
            AclOperation.READ,
            AclOperation.DESCRIBE,
            AclOperation.DELETE,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
        }
    ),
    ResourceType.CLUSTER: frozenset(
        {
            AclOperation.CREATE,
            AclOperation.CLUSTER_ACTION,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
            AclOperation.IDEMPOTENT_WRITE,
            AclOperation.ALTER,
            AclOperation.DESCRIBE,
        }
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({AclOperation.DESCRIBE}),
    ResourceType.USER: frozenset({AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS}),
}

_AUTH_ERRORS = {
    ResourceType.TOPIC: ErrorCode.topic_authorization_failed,
    ResourceType.GROUP: ErrorCode.group_authorization_failed,
    ResourceType.CLUSTER: ErrorCode.cluster_authorization_failed,
    ResourceType.TRANSACTIONAL_ID: ErrorCode.transactional_id_authorization_failed,
    ResourceType.DELEGATION_TOKEN: ErrorCode.delegation_token_authorization_failed,
}


def authorization_error(resource_type: ResourceType) -> ErrorCode:
    return _AUTH_ERRORS[resource_type]


# Kafka's implied operations: an ALLOW for any of these also allows the key.
_ALLOW_OPS: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset(
        {
            AclOperation.DESCRIBE,
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.DELETE,
            AclOperation.ALTER,
        }
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset(
        {AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
    ),
}


@functools.lru_cache(maxsize=4096)
def canonical_host(host: str) -> str:
    """One spelling per address: an IPv4-mapped IPv6 address as its IPv4 address, IPv6
    compressed and lower-case. Anything that is not an address (``*``, a host name) is
    returned unchanged and compared as text."""
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return str(addr.ipv4_mapped)
    return str(addr)


def _host_matches(acl_host: str, client_host: str) -> bool:
    """``client_host`` already canonical."""
    return acl_host == WILDCARD_HOST or canonical_host(acl_host) == client_host


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __str__(self) -> str:  # kafka-acls prints exactly this
        return (
            f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
            f"patternType={self.pattern_type.name})"
        )


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str  # "User:alice" (kept as text: ACLs may name any principal type)
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __str__(self) -> str:
        return (
            f"(principal={self.principal}, host={self.host}, "
            f"operation={self.operation.name}, permissionType={self.permission_type.name})"
        )


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """DescribeAcls / DeleteAcls filter: None and ANY match everything."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches_pattern(self, p: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and p.resource_type != self.resource_type:
            return False
        pt = self.pattern_type
        if pt == PatternType.MATCH:
            # Kafka's ResourcePatternFilter MATCH: every pattern that would match a
            # resource of this name (literal, literal wildcard, covering prefixes).
            if self.name is None:
                return True
            if p.pattern_type == PatternType.LITERAL:
                return p.name == self.name or p.name == WILDCARD_RESOURCE
            return p.pattern_type == PatternType.PREFIXED and self.name.startswith(p.name)
        if pt != PatternType.ANY and p.pattern_type != pt:
            return False
        return self.name is None or p.name == self.name

    def matches_entry(self, e: AccessControlEntry) -> bool:
        return (
            (self.principal is None or e.principal == self.principal)
            and (self.host is None or e.host == self.host)
            and (self.operation == AclOperation.ANY or e.operation == self.operation)
            and (
                self.permission_type == AclPermissionType.ANY
                or e.permission_type == self.permission_type
            )
        )

    def matches(self, b: AclBinding) -> bool:
        return self.matches_pattern(b.pattern) and self.matches_entry(b.entry)

    def find_indefinite_field(self) -> str | None:
        """What makes this filter unusable for creation (Kafka's findIndefiniteField)."""
        if self.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            return "Resource type is ANY or UNKNOWN."
        if self.name is None:
            return "Resource name is NULL."
        if self.pattern_type in (PatternType.ANY, PatternType.MATCH, PatternType.UNKNOWN):
            return "Resource pattern type is ANY, MATCH or UNKNOWN."
        if self.principal is None:
            return "Principal is NULL."
        if self.host is None:
            return "Host is NULL."
        if self.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            return "Operation is ANY or UNKNOWN."
        if self.permission_type in (AclPermissionType.ANY, AclPermissionType.UNKNOWN):
            return "Permission type is ANY or UNKNOWN."
        return None


class AclCache:
    """Every binding, indexed for the decision: literal patterns by (type, name),
    prefixed patterns by type. Not thread-safe: owned by the event loop."""

    def __init__(self, super_users: Iterable[str] = (), allow_if_no_acl: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        self._literal: dict[tuple[ResourceType, str], frozenset[AccessControlEntry]] = {}
        self._prefixed: dict[ResourceType, dict[str, frozenset[AccessControlEntry]]] = {}

    # -------------------------------------------------------------- contents
    def set_acls(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """Replace the entries of one resource pattern (empty: forget it)."""
        entries = frozenset(entries)
        if entries:
            self._acls[pattern] = entries
        else:
            self._acls.pop(pattern, None)
        if pattern.pattern_type == PatternType.LITERAL:
            key = (pattern.resource_type, pattern.name)
            if entries:
                self._literal[key] = entries
            else:
                self._literal.pop(key, None)
        elif pattern.pattern_type == PatternType.PREFIXED:
            by_prefix = self._prefixed.setdefault(pattern.resource_type, {})
            if entries:
                by_prefix[pattern.name] = entries
            else:
                by_prefix.pop(pattern.name, None)

    def replace_all(self, acls: dict[ResourcePattern, frozenset[AccessControlEntry]]) -> None:
        """Replace every binding (a reload from ZooKeeper)."""
        self._acls, self._literal, self._prefixed = {}, {}, {}
        for pattern, entries in acls.items():
            self.set_acls(pattern, entries)

    def acls(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        return self._acls.get(pattern, frozenset())

    def bindings(self, flt: AclBindingFilter | None = None) -> Iterator[AclBinding]:
        for pattern, entries in self._acls.items():
            if flt is not None and not flt.matches_pattern(pattern):
                continue
            for e in entries:
                if flt is None or flt.matches_entry(e):
                    yield AclBinding(pattern, e)

    def __len__(self) -> int:
        return sum(len(v) for v in self._acls.values())

    # -------------------------------------------------------------- the decision
    def matching_entries(
        self, resource_type: ResourceType, name: str
    ) -> list[frozenset[AccessControlEntry]]:
        found = []
        lit = self._literal
        e = lit.get((resource_type, name))
        if e:
            found.append(e)
        if name != WILDCARD_RESOURCE:
            e = lit.get((resource_type, WILDCARD_RESOURCE))
            if e:
                found.append(e)
        prefixed = self._prefixed.get(resource_type)
        if prefixed:
            found.extend(v for k, v in prefixed.items() if name.startswith(k))
        return found

    def is_super_user(self, principal: KafkaPrincipal | str) -> bool:
        return str(principal) in self.super_users

    def authorize(
        self,
        principal: KafkaPrincipal | str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        p = str(principal)
        if p in self.super_users:
            return True
        groups = self.matching_entries(resource_type, name)
        if not groups:
            return self.allow_if_no_acl
        host = canonical_host(host)
        allow_ops = _ALLOW_OPS.get(operation, (operation,))
        allowed = False
        for entries in groups:
            for e in entries:
                if e.principal != p and e.principal != "User:*":
                    continue
                if not _host_matches(e.host, host):
                    continue
                if e.permission_type == AclPermissionType.DENY:
                    if e.operation == operation or e.operation == AclOperation.ALL:
                        return False
                elif not allowed and (e.operation in allow_ops or e.operation == AclOperation.ALL):
                    allowed = True
        return allowed

    def authorize_by_resource_type(
        self,
        principal: KafkaPrincipal | str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool:
        """Kafka's ``authorizeByResourceType`` (KIP-679: an idempotent producer may use
        WRITE on any topic instead of IDEMPOTENT_WRITE on the cluster): is there a
        resource of this type the principal may do ``operation`` on?  Simplified to what
        the ACLs can prove: an ALLOW for the principal that no DENY on the wildcard or the
        same pattern cancels; with no ACL for this type at all,
        ``allow.everyone.if.no.acl.found``."""
        p = str(principal)
        if p in self.super_users:
            return True
        any_acl = False
        chost = canonical_host(host)
        for pattern, entries in self._acls.items():
            if pattern.resource_type != resource_type:
                continue
            any_acl = True
            for e in entries:
                if (
                    e.permission_type == AclPermissionType.ALLOW
                    and (e.principal == p or e.principal == "User:*")
                    and _host_matches(e.host, chost)
                    and (e.operation == operation or e.operation == AclOperation.ALL)
                    and self.authorize(p, host, operation, resource_type, pattern.name)
                ):
                    return True
        return not any_acl and self.allow_if_no_acl
