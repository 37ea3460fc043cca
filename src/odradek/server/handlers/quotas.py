"""DescribeClientQuotas (API 48) and AlterClientQuotas (API 49), KIP-546, ZooKeeper mode.

Kafka's ``ZkAdminManager.describeClientQuotas`` / ``alterClientQuotas`` over the quota
entity configs of ``odradek.zk.quota_store`` (``/config/users``, ``/config/clients``):

* Describe needs DESCRIBE_CONFIGS on the cluster, Alter ALTER_CONFIGS (else
  CLUSTER_AUTHORIZATION_FAILED, top level / for every entry).
* A filter component matches EXACT (0, a name), DEFAULT (1, the ``<default>`` entity)
  or SPECIFIED (2, any entity that has that component); ``strict`` excludes entities
  with components the filter does not name. Only ``user`` and ``client-id`` are served
  (``ip`` quotas are not: INVALID_REQUEST, which is also what Kafka answers for an
  ``ip`` filter mixed with the others); an unknown entity type is UNSUPPORTED_VERSION,
  a repeated one INVALID_REQUEST.
* An alteration sets (``remove: false``) or removes (``remove: true``) keys of one
  entity; unknown keys and a non-integral value for a LONG quota are INVALID_REQUEST;
  ``validate_only`` validates and writes nothing. Other keys of the znode (a user's
  SCRAM credentials) are kept.

Brokers apply a change when its ``/config/changes`` notification arrives
(``odradek.server.quota_follower``), this broker included.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.codec import RequestHeaderInfo
from odradek.protocol.responses import part, response
from odradek.security.acl import AclOperation
from odradek.server.client_quotas import DEFAULT, QUOTA_KEYS, sanitize, unsanitize
from odradek.zk import quota_store

if TYPE_CHECKING:
    from odradek.server.context import RequestContext

logger = logging.getLogger(__name__)

__all__ = [
    "USER",
    "CLIENT_ID",
    "MATCH_EXACT",
    "MATCH_DEFAULT",
    "MATCH_SPECIFIED",
    "apply_ops",
    "describe_matches",
    "entity_key",
    "handle_describe_client_quotas",
    "handle_alter_client_quotas",
]

USER, CLIENT_ID, IP = "user", "client-id", "ip"
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
_EPSILON = 1e-6
_OWN_APPLY_WAIT_S = 5.0


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.invalid_request, message)


# =============================================================================== pure
def entity_key(components: Sequence[tuple[str, str | None]]) -> quota_store.EntityKey:
    """Kafka's ``parseAndSanitizeQuotaEntity``: (type, name or None for the default)
    pairs -> the sanitized (user, client-id) znode names."""
    if not components:
        raise _invalid("Invalid empty client quota entity")
    user: str | None = None
    client: str | None = None
    for etype, name in components:
        if name is not None and name == "":
            raise _invalid(f"Empty {etype} not supported")
        sanitized = DEFAULT if name is None else sanitize(name)
        if etype == USER:
            user = sanitized
        elif etype == CLIENT_ID:
            client = sanitized
        elif etype == IP:
            raise _invalid("IP quotas are not supported by Odradek")
        else:
            raise _invalid(f"Unhandled client quota entity type: {etype}")
    return user, client


def apply_ops(current: dict[str, str], ops: Sequence[tuple[str, float, bool]]) -> dict[str, str]:
    """The entity's config after AlterClientQuotas ``ops`` = [(key, value, remove)]."""
    out = dict(current)
    for key, value, remove in ops:
        if remove:
            out.pop(key, None)
            continue
        integral = QUOTA_KEYS.get(key)
        if integral is None:
            raise _invalid(f"Invalid configuration key {key}")
        if not math.isfinite(value) or value <= 0:
            raise _invalid(f"Configuration {key} must be a positive number")
        if integral:
            as_int = int(value + _EPSILON)
            if abs(as_int - value) > _EPSILON:
                raise _invalid(f"Configuration {key} must be a LONG value")
            out[key] = str(as_int)
        else:
            out[key] = repr(float(value))
    return out


_Filter = tuple[int, str | None]  # (match type, name)


def parse_filter(components: Sequence[tuple[str, int, str | None]]) -> dict[str, _Filter]:
    """Filter components by entity type; Kafka's checks on their combination."""
    out: dict[str, _Filter] = {}
    for etype, match_type, match in components:
        if etype == "":
            raise _invalid("Unexpected empty filter component entity type")
        if etype not in (USER, CLIENT_ID, IP):
            raise KafkaError(
                ErrorCode.unsupported_version, f"Custom entity type '{etype}' not supported"
            )
        if etype in out:
            raise _invalid(f"Duplicate {etype} filter component entity type")
        if match_type == MATCH_EXACT:
            if match is None:
                raise _invalid("Exact match requires a name")
            out[etype] = (MATCH_EXACT, match)
        elif match_type in (MATCH_DEFAULT, MATCH_SPECIFIED):
            out[etype] = (match_type, None)
        else:
            raise _invalid(f"Unexpected match type: {match_type}")
    if IP in out and len(out) > 1:
        raise _invalid(
            "Invalid entity filter component combination, IP filter component "
            "should not be used with user or clientId filter component."
        )
    return out


def _matches(component: _Filter | None, name: str | None, strict: bool) -> bool:
    if component is None:
        return name is None or not strict
    match_type, match = component
    if match_type == MATCH_SPECIFIED:
        return name is not None
    if match_type == MATCH_DEFAULT:
        return name == DEFAULT
    return name is not None and name != DEFAULT and name == sanitize(match or "")


def describe_matches(
    configs: dict[quota_store.EntityKey, dict[str, str]], filt: dict[str, _Filter], strict: bool
) -> list[tuple[quota_store.EntityKey, dict[str, float]]]:
    """The entities (with their quota values) a filter selects, sorted. Pure."""
    if IP in filt:
        return []  # no IP quotas are stored
    out = []
    for entity, config in configs.items():
        quotas = {k: float(v) for k, v in config.items() if k in QUOTA_KEYS}
        if not quotas:
            continue
        if _matches(filt.get(USER), entity[0], strict) and _matches(
            filt.get(CLIENT_ID), entity[1], strict
        ):
            out.append((entity, quotas))
    out.sort(key=lambda ev: (ev[0][0] or "", ev[0][1] or ""))
    return out


def _entity_parts(entity: quota_store.EntityKey) -> list[tuple[str, str | None]]:
    parts: list[tuple[str, str | None]] = []
    if entity[0] is not None:
        parts.append((USER, None if entity[0] == DEFAULT else unsanitize(entity[0])))
    if entity[1] is not None:
        parts.append((CLIENT_ID, None if entity[1] == DEFAULT else unsanitize(entity[1])))
    return parts


# =============================================================================== handlers
async def _describe(ctx: RequestContext, v: int, req: Any) -> Any:
    def error(code: ErrorCode, message: str | None) -> Any:
        return response(48, v, error_code=code, error_message=message, entries=None)

    if not ctx.authorize_cluster(AclOperation.DESCRIBE_CONFIGS):
        return error(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    try:
        filt = parse_filter([(c.entity_type, int(c.match_type), c.match) for c in req.components])
    except KafkaError as e:
        return error(e.code, e.message or None)
    configs = await asyncio.to_thread(ctx.admin.read_quotas)
    entries = tuple(
        part(
            48,
            v,
            "EntryData",
            entity=tuple(
                part(48, v, "EntityData", entity_type=t, entity_name=n)
                for t, n in _entity_parts(entity)
            ),
            values=tuple(
                part(48, v, "ValueData", key=k, value=val) for k, val in sorted(values.items())
            ),
        )
        for entity, values in describe_matches(configs, filt, bool(req.strict))
    )
    return response(48, v, error_code=ErrorCode.none, error_message=None, entries=entries)


def handle_describe_client_quotas(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    return _describe(ctx, header.api_version, req)


async def _alter(ctx: RequestContext, v: int, req: Any) -> Any:
    allowed = ctx.authorize_cluster(AclOperation.ALTER_CONFIGS)
    results = []
    written: dict[quota_store.EntityKey, dict[str, float]] = {}
    for entry in req.entries:
        code, message = ErrorCode.none, None
        try:
            if not allowed:
                raise KafkaError(
                    ErrorCode.cluster_authorization_failed, "Cluster authorization failed."
                )
            entity = entity_key([(e.entity_type, e.entity_name) for e in entry.entity])
            ops = [(o.key, float(o.value), bool(o.remove)) for o in entry.ops]
            change: Callable[[dict[str, str]], dict[str, str]] = partial(apply_ops, ops=ops)
            change({})  # request-shape errors first, before any ZooKeeper round trip
            new = await asyncio.to_thread(
                ctx.admin.alter_quota, entity, change, bool(req.validate_only)
            )
            if not req.validate_only:
                written[entity] = {k: float(v) for k, v in new.items() if k in QUOTA_KEYS}
        except KafkaError as e:
            code, message = e.code, e.message or None
        except Exception:
            logger.exception("altering client quotas failed")
            code, message = ErrorCode.unknown_server_error, "unexpected error; see broker log"
        results.append(
            part(
                49,
                v,
                "EntryData",
                error_code=code,
                error_message=message,
                entity=tuple(
                    part(49, v, "EntityData", entity_type=e.entity_type, entity_name=e.entity_name)
                    for e in entry.entity
                ),
            )
        )
    if written:
        await _wait_own_quotas(ctx, written)
    return response(49, v, entries=tuple(results))


async def _wait_own_quotas(
    ctx: RequestContext, written: dict[quota_store.EntityKey, dict[str, float]]
) -> None:
    """Wait (bounded) until this broker applies its own change (its QuotaFollower reads
    the notification), so that a client starting right after the answer is already
    held to the new quota on this broker; the other brokers follow within a ZooKeeper
    round trip (Kafka's brokers apply quota changes asynchronously too)."""
    deadline = time.monotonic() + _OWN_APPLY_WAIT_S
    while time.monotonic() < deadline:
        configs = ctx.quotas.configs
        if all(configs.get(e, {}) == q for e, q in written.items()):
            return
        await asyncio.sleep(0.01)


def handle_alter_client_quotas(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    return _alter(ctx, header.api_version, req)
