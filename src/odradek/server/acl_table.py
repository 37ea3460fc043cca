"""Which ACL each served API checks: the table of Kafka's "Operations and Resources on
Protocols", as Odradek's handlers implement it (issue 28).

One row per API key the broker serves. A row lists every (operation, resource) pair the
handler may check, with when; ``()`` means the API is served to any authenticated
principal (Kafka's ApiVersions, SASL handshake and authentication). The unit test
``tests/unit/server/test_acl_table.py`` keeps this table honest three ways: every API in
the dispatch table has a row (a new API cannot be added without saying what it checks),
every pair of a row appears as a check in the module of the API's handler (a module-level
cross-check: it catches a row no code checks, not which branch checks it), and the table
in ``docs/security.md`` is ``markdown_table()``'s output.
"""

from __future__ import annotations

from dataclasses import dataclass

from odradek.protocol.versions import api_name
from odradek.security.acl import AclOperation, ResourceType

__all__ = ["AclCheck", "ACL_CHECKS", "markdown_table"]

Op = AclOperation
Res = ResourceType


@dataclass(frozen=True, slots=True)
class AclCheck:
    operation: AclOperation
    resource: ResourceType
    when: str = ""  # the condition under which this pair is checked, if not always


def _c(op: AclOperation, res: ResourceType, when: str = "") -> AclCheck:
    return AclCheck(op, res, when)


ACL_CHECKS: dict[int, tuple[AclCheck, ...]] = {
    0: (_c(Op.WRITE, Res.TOPIC), _c(Op.WRITE, Res.TRANSACTIONAL_ID, "a transactional batch")),
    1: (
        _c(Op.READ, Res.TOPIC, "a consumer's fetch"),
        _c(Op.CLUSTER_ACTION, Res.CLUSTER, "a follower's fetch (replica id >= 0)"),
    ),
    2: (_c(Op.DESCRIBE, Res.TOPIC),),
    3: (
        _c(Op.DESCRIBE, Res.TOPIC, "each topic returned"),
        _c(Op.CREATE, Res.CLUSTER, "auto-creation (or CREATE on the topic)"),
        _c(Op.CREATE, Res.TOPIC, "auto-creation, without CREATE on the cluster"),
    ),
    8: (_c(Op.READ, Res.GROUP), _c(Op.READ, Res.TOPIC)),
    9: (_c(Op.DESCRIBE, Res.GROUP), _c(Op.DESCRIBE, Res.TOPIC)),
    10: (
        _c(Op.DESCRIBE, Res.GROUP, "a group coordinator"),
        _c(Op.DESCRIBE, Res.TRANSACTIONAL_ID, "a transaction coordinator"),
    ),
    11: (_c(Op.READ, Res.GROUP),),
    12: (_c(Op.READ, Res.GROUP),),
    13: (_c(Op.READ, Res.GROUP),),
    14: (_c(Op.READ, Res.GROUP),),
    15: (_c(Op.DESCRIBE, Res.GROUP),),
    16: (
        _c(Op.DESCRIBE, Res.CLUSTER, "every group"),
        _c(Op.DESCRIBE, Res.GROUP, "else each group listed"),
    ),
    17: (),
    18: (),
    19: (
        _c(Op.CREATE, Res.CLUSTER, "or CREATE on the topic"),
        _c(Op.CREATE, Res.TOPIC, "without CREATE on the cluster"),
        _c(Op.DESCRIBE_CONFIGS, Res.TOPIC, "to see the created topic's configs"),
    ),
    20: (_c(Op.DELETE, Res.TOPIC),),
    21: (_c(Op.DELETE, Res.TOPIC),),
    22: (
        _c(Op.WRITE, Res.TRANSACTIONAL_ID, "a transactional producer"),
        _c(Op.IDEMPOTENT_WRITE, Res.CLUSTER, "an idempotent producer (or WRITE on a topic)"),
    ),
    23: (
        _c(Op.DESCRIBE, Res.TOPIC, "a client"),
        _c(Op.CLUSTER_ACTION, Res.CLUSTER, "a follower (replica id >= 0)"),
    ),
    24: (
        _c(Op.WRITE, Res.TRANSACTIONAL_ID, "v0-v3 (clients)"),
        _c(Op.WRITE, Res.TOPIC, "v0-v3 (clients)"),
        _c(Op.CLUSTER_ACTION, Res.CLUSTER, "v4+ (brokers verifying, KIP-890)"),
    ),
    25: (_c(Op.WRITE, Res.TRANSACTIONAL_ID), _c(Op.READ, Res.GROUP)),
    26: (_c(Op.WRITE, Res.TRANSACTIONAL_ID),),
    27: (_c(Op.CLUSTER_ACTION, Res.CLUSTER),),
    28: (_c(Op.WRITE, Res.TRANSACTIONAL_ID), _c(Op.READ, Res.GROUP), _c(Op.READ, Res.TOPIC)),
    29: (_c(Op.DESCRIBE, Res.CLUSTER),),
    30: (_c(Op.ALTER, Res.CLUSTER),),
    31: (_c(Op.ALTER, Res.CLUSTER),),
    32: (
        _c(Op.DESCRIBE_CONFIGS, Res.TOPIC, "a topic"),
        _c(Op.DESCRIBE_CONFIGS, Res.CLUSTER, "a broker"),
    ),
    33: (_c(Op.ALTER_CONFIGS, Res.TOPIC, "a topic"), _c(Op.ALTER_CONFIGS, Res.CLUSTER, "a broker")),
    36: (),
    37: (_c(Op.ALTER, Res.TOPIC),),
    42: (_c(Op.DELETE, Res.GROUP),),
    43: (_c(Op.ALTER, Res.CLUSTER),),
    44: (_c(Op.ALTER_CONFIGS, Res.TOPIC, "a topic"), _c(Op.ALTER_CONFIGS, Res.CLUSTER, "a broker")),
    45: (_c(Op.ALTER, Res.CLUSTER),),
    46: (_c(Op.DESCRIBE, Res.CLUSTER),),
    47: (_c(Op.DELETE, Res.GROUP), _c(Op.READ, Res.TOPIC)),
    48: (_c(Op.DESCRIBE_CONFIGS, Res.CLUSTER),),
    49: (_c(Op.ALTER_CONFIGS, Res.CLUSTER),),
    50: (_c(Op.DESCRIBE, Res.CLUSTER),),
    51: (_c(Op.ALTER, Res.CLUSTER),),
    60: (_c(Op.DESCRIBE, Res.CLUSTER),),
    61: (_c(Op.READ, Res.TOPIC),),
    65: (_c(Op.DESCRIBE, Res.TRANSACTIONAL_ID),),
    66: (_c(Op.DESCRIBE, Res.TRANSACTIONAL_ID, "each transaction listed"),),
}


def markdown_table(api_keys: list[int]) -> str:
    """The docs' table for the given (served) API keys, in key order."""
    lines = ["| API (key) | Operation on resource | When |", "| --- | --- | --- |"]
    for key in sorted(api_keys):
        checks = ACL_CHECKS[key]
        name = f"{api_name(key)} ({key})"
        if not checks:
            lines.append(f"| {name} | none (any authenticated principal) | |")
        for i, c in enumerate(checks):
            lines.append(
                f"| {name if i == 0 else ''} | {c.operation.name} on {c.resource.name} | {c.when} |"
            )
    return "\n".join(lines) + "\n"
