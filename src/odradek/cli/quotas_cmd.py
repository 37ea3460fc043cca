"""``odradek configs`` for client quotas: kafka-configs.sh's users / clients forms.

    --entity-type users --entity-name U [--entity-type clients --entity-name C] \\
        --alter --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152
    --entity-type clients --entity-default --alter --delete-config producer_byte_rate
    --entity-type users [--entity-name U | --entity-default] --describe

Quotas go through AlterClientQuotas / DescribeClientQuotas (APIs 49/48, KIP-546), as
kafka-configs.sh does since Kafka 2.6; neither confluent-kafka nor kafka-python has them,
so the requests are sent with the project's own client codec. Output lines are Kafka's::

    Quota configs for user-principal 'alice', the default client-id are producer_byte_rate=1024.0
    Completed updating config for user alice.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from odradek.cli.common import client_security
from odradek.cli.configs_cmd import (
    ConfigCommandError,
    _addresses,
    _request,
    parse_add_config,
    parse_delete_config,
)

__all__ = [
    "QUOTA_KEYS",
    "ENTITY_TYPES",
    "alter_quotas",
    "describe_quotas",
    "format_quota_line",
    "quota_entity",
]

QUOTA_KEYS = frozenset(
    {"producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"}
)
# kafka-configs' entity types -> ClientQuotaEntity's component types.
ENTITY_TYPES = {"users": "user", "clients": "client-id"}
_DESCRIPTIONS = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
DEFAULT = object()  # --entity-default
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def quota_entity(entities: Sequence[tuple[str, Any]]) -> list[tuple[str, str | None]]:
    """[(kafka-configs entity type, name | DEFAULT)] -> [(component type, name | None)]."""
    out: list[tuple[str, str | None]] = []
    for etype, name in entities:
        if etype not in ENTITY_TYPES:
            raise ConfigCommandError(f"Invalid entity type {etype} with client quotas")
        if name is None:
            raise ConfigCommandError(
                f"an entity name or --entity-default must be given for {etype}"
            )
        out.append((ENTITY_TYPES[etype], None if name is DEFAULT else str(name)))
    return out


def format_quota_line(entity: Sequence[tuple[str, str | None]], values: dict[str, float]) -> str:
    """Kafka's ConfigCommand.describeQuotaConfigs line."""
    desc = ", ".join(
        f"{_DESCRIPTIONS.get(t, t)} '{n}'"
        if n is not None
        else f"the default {_DESCRIPTIONS.get(t, t)}"
        for t, n in entity
    )
    vals = ", ".join(f"{k}={float(v)!r}" for k, v in sorted(values.items()))
    return f"Quota configs for {desc} are {vals}"


def alter_quotas(
    args: argparse.Namespace,
    entity: list[tuple[str, str | None]],
    to_add: dict[str, str],
    to_delete: list[str],
) -> None:
    """One AlterClientQuotas v1 entry; raises ConfigCommandError on a refusal."""
    from odradek.errors import error_name  # noqa: PLC0415
    from odradek.protocol.client_codec import nested_request, request_entity  # noqa: PLC0415

    ops = []
    for k, v in to_add.items():
        try:
            value = float(v)
        except ValueError:
            raise ConfigCommandError(f"Invalid value {v!r} for {k}: not a number") from None
        ops.append(nested_request(49, 1, "OpData", key=k, value=value, remove=False))
    ops += [nested_request(49, 1, "OpData", key=k, value=0.0, remove=True) for k in to_delete]
    req = request_entity(
        49,
        1,
        validate_only=False,
        entries=(
            nested_request(
                49,
                1,
                "EntryData",
                entity=tuple(
                    nested_request(49, 1, "EntityData", entity_type=t, entity_name=n)
                    for t, n in entity
                ),
                ops=tuple(ops),
            ),
        ),
    )
    resp = _request(_addresses(args.bootstrap_server), req, client_security(args))
    for r in resp.entries:
        if int(r.error_code) != 0:
            raise ConfigCommandError(f"{error_name(int(r.error_code))}: {r.error_message}")


def describe_quotas(
    args: argparse.Namespace, components: list[tuple[str, int, str | None]], strict: bool
) -> list[tuple[list[tuple[str, str | None]], dict[str, float]]]:
    """DescribeClientQuotas v1 -> [(entity, values)]."""
    from odradek.errors import error_name  # noqa: PLC0415
    from odradek.protocol.client_codec import nested_request, request_entity  # noqa: PLC0415

    req = request_entity(
        48,
        1,
        strict=strict,
        components=tuple(
            nested_request(48, 1, "ComponentData", entity_type=t, match_type=m, match=n)
            for t, m, n in components
        ),
    )
    resp = _request(_addresses(args.bootstrap_server), req, client_security(args))
    if int(resp.error_code) != 0:
        raise ConfigCommandError(f"{error_name(int(resp.error_code))}: {resp.error_message}")
    return [
        (
            [(e.entity_type, e.entity_name) for e in entry.entity],
            {v.key: float(v.value) for v in entry.values},
        )
        for entry in resp.entries or ()
    ]


def describe_filter(
    entities: Sequence[tuple[str, Any]],
) -> tuple[list[tuple[str, int, str | None]], bool]:
    """kafka-configs' describe: a named entity matches exactly, --entity-default the
    default, no name any entity of that type; strict, as ConfigCommand asks."""
    components: list[tuple[str, int, str | None]] = []
    for etype, name in entities:
        t = ENTITY_TYPES[etype]
        if name is DEFAULT:
            components.append((t, MATCH_DEFAULT, None))
        elif name is None:
            components.append((t, MATCH_SPECIFIED, None))
        else:
            components.append((t, MATCH_EXACT, str(name)))
    return components, True


def run_quota_command(args: argparse.Namespace, entities: list[tuple[str, Any]]) -> int:
    """Quota part of ``odradek configs`` for users / clients entities; returns the exit
    status. SCRAM credentials of users are handled by configs_cmd."""
    if args.describe:
        components, strict = describe_filter(entities)
        for entity, values in describe_quotas(args, components, strict):
            print(format_quota_line(entity, values))
        return 0
    entity = quota_entity(entities)
    to_add = {k: v for k, v in parse_add_config(args.add_config).items() if k in QUOTA_KEYS}
    to_delete = [k for k in parse_delete_config(args.delete_config) if k in QUOTA_KEYS]
    if not to_add and not to_delete:
        return 0
    alter_quotas(args, entity, to_add, to_delete)
    names = ", ".join(
        f"{'user' if t == 'user' else 'client-id'} {n if n is not None else '<default>'}"
        for t, n in entity
    )
    print(f"Completed updating config for {names}.")
    return 0
