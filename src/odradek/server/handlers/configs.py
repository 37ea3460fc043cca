"""AlterConfigs (API 33) and IncrementalAlterConfigs (API 44): topic configs at runtime.

Kafka (ZooKeeper mode) keeps a topic's overrides in ``/config/topics/T`` and announces
each change with a persistent sequential ``/config/changes/config_change_N`` whose body
is ``{"version":2,"entity_path":"topics/T"}``. Odradek writes both, the same way, so
zookeeper-shell users see what they expect. Kafka forwards these requests to the
controller; with ZooKeeper as the store any broker may write, so every broker serves
them (as CreateTopics does, see handlers_admin.py).

Every broker watches ``/config/topics/T`` (metadata_store ``TopicConfigChanged``) and
its replica manager swaps each local ``Log.config`` when a topic's overrides change, so
a change takes effect without a restart (issue #5). The controller reads
``unclean.leader.election.enable`` fresh from ZooKeeper on each pass (REQ-R10).

Semantics, as in Kafka:

* AlterConfigs replaces the whole override set of the resource (omitted keys go back to
  their defaults); a null value is INVALID_REQUEST.
* IncrementalAlterConfigs applies SET(0) / DELETE(1) / APPEND(2) / SUBTRACT(3) to the
  current overrides; APPEND/SUBTRACT are for LIST configs only (``cleanup.policy``,
  the throttled-replica lists) and start from the config's default when not overridden.
* The result is validated as a whole with ``odradek.config.validate_topic_configs``
  (unknown names, bad values → INVALID_CONFIG with Kafka's messages); ``validate_only``
  validates and writes nothing.
* The write is conditional on the znode version (a concurrent change makes us re-read
  and re-apply the operations), like every other read-modify-write of Odradek's znodes.
* Broker resources (dynamic broker configs, KIP-226, ZooKeeper mode): the overrides of
  ``/config/brokers/<id>`` (resource name = this broker's id: as in Kafka, a per-broker
  change must be sent to that broker, else INVALID_REQUEST "Unexpected broker id") or
  ``/config/brokers/<default>`` (empty resource name: every broker), with the change
  notification ``brokers/<id>`` / ``brokers/<default>``. Only the configs in
  ``configdefs.DYNAMIC_BROKER_CONFIGS`` may change (the replication throttle rates,
  ``transaction.partition.verification.enable``, Kafka's Kerberos settings);
  other broker properties answer INVALID_REQUEST "Cannot update these configs
  dynamically". Names that are no broker property are stored as custom configs (Kafka
  keeps them too, and DescribeConfigs lists them). Every broker watches both znodes;
  the replica manager applies the rates from its metadata image.

The pure parts (``apply_incremental``, ``replace_all``) are unit-tested in
tests/unit/test_configs_ops.py; the ZooKeeper write goes through ``ctx.admin``
(``odradek.zk.admin_gateway``: the conditional write and the change notification of
``odradek.zk.cas.change_entity_config``, blocking, run in a worker thread), so the
handlers' logic is unit-tested with an in-memory gateway in
tests/unit/server/test_configs_handler.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from odradek.config import validate_topic_configs
from odradek.configdefs import (
    BROKER_CONFIGS,
    DYNAMIC_BROKER_CONFIGS,
    TOPIC_CONFIGS,
    ConfigType,
    ConfigValueError,
    parse_list,
)
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.codec import RequestHeaderInfo
from odradek.protocol.responses import part, response
from odradek.security.acl import AclOperation, ResourceType
from odradek.topics import topic_name_error
from odradek.zk import znodes

if TYPE_CHECKING:
    from odradek.server.context import RequestContext

ConfigChange = Callable[[dict[str, str]], dict[str, str]]

logger = logging.getLogger(__name__)

__all__ = [
    "OP_SET",
    "OP_DELETE",
    "OP_APPEND",
    "OP_SUBTRACT",
    "apply_incremental",
    "replace_all",
    "validate_broker_configs",
    "handle_alter_configs",
    "handle_incremental_alter_configs",
]

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8

# IncrementalAlterConfigs config_operation (Kafka's AlterConfigOp.OpType ids).
OP_SET = 0
OP_DELETE = 1
OP_APPEND = 2
OP_SUBTRACT = 3
_OP_NAMES = {OP_SET: "set", OP_DELETE: "delete", OP_APPEND: "append", OP_SUBTRACT: "subtract"}

# After answering, wait (bounded) until this broker's own metadata image shows the new
# overrides, so "alter, then describe on the same broker" reads its own write (Kafka's
# ZooKeeper-mode DescribeConfigs reads ZooKeeper directly and has that property).
_OWN_IMAGE_WAIT_S = 5.0


# =============================================================================== pure
def _invalid_request(message: str) -> KafkaError:
    return KafkaError(ErrorCode.invalid_request, message)


def _is_list(name: str) -> bool:
    d = TOPIC_CONFIGS.get(name)
    return d is not None and d.type is ConfigType.LIST


def apply_incremental(
    current: Mapping[str, str], ops: Sequence[tuple[str, int, str | None]]
) -> dict[str, str]:
    """The overrides after IncrementalAlterConfigs ``ops`` = [(name, op, value)]. Pure.

    Kafka's ``prepareIncrementalConfigs``: SET puts, DELETE removes (unknown names are
    fine: nothing to remove), APPEND/SUBTRACT work on the comma-separated list of the
    override, else of the config's default; APPEND keeps the first occurrence of each
    element. Values are not validated here (``validate_topic_configs`` does that on the
    whole result). Raises INVALID_REQUEST for duplicate keys, unknown operations and
    null values, INVALID_CONFIG for APPEND/SUBTRACT on a non-LIST config.
    """
    dups = sorted(n for n, c in Counter(name for name, _, _ in ops).items() if c > 1)
    if dups:
        raise _invalid_request(f"Error due to duplicate config keys : {','.join(dups)}")
    out = dict(current)
    for name, op, value in ops:
        if op == OP_DELETE:
            out.pop(name, None)
            continue
        if op not in _OP_NAMES:
            raise _invalid_request(f"Unknown alter configs operation type {op}")
        if value is None:
            raise _invalid_request(f"Null value not supported for : {name}")
        if op == OP_SET:
            out[name] = value
            continue
        if not _is_list(name):
            raise KafkaError(
                ErrorCode.invalid_config,
                f"Config value {_OP_NAMES[op]} is not allowed for config key: {name}",
            )
        base = out.get(name)
        if base is None:
            base = TOPIC_CONFIGS[name].default or ""
        old = parse_list(base)
        given = parse_list(value)
        if op == OP_APPEND:
            merged = list(dict.fromkeys([*old, *given]))  # distinct, order kept
        else:
            merged = [x for x in old if x not in given]
        out[name] = ",".join(merged)
    return out


def replace_all(configs: Sequence[tuple[str, str | None]]) -> dict[str, str]:
    """The overrides after a (legacy) AlterConfigs: exactly the given ones. Pure.

    Kafka's ZooKeeper-mode ``alterConfigs`` rejects null values as a whole
    (INVALID_REQUEST "Null value not supported for : a,b"); a repeated key keeps the
    last value (it builds a java.util.Properties).
    """
    nulls = [n for n, v in configs if v is None]
    if nulls:
        raise _invalid_request(f"Null value not supported for : {','.join(nulls)}")
    return {n: v for n, v in configs if v is not None}


# =============================================================================== validation
def validate_broker_configs(configs: Mapping[str, str]) -> dict[str, str]:
    """Dynamic broker overrides: of the broker properties, only DYNAMIC_BROKER_CONFIGS,
    each a valid value. Any other name is kept as a custom config, as Kafka's
    DynamicBrokerConfig.validate does (only its own non-dynamic names are refused):
    KafkaJS's suite sets ``cleanup.policy`` on a broker and expects NONE."""
    static = sorted(n for n in configs if n in BROKER_CONFIGS and n not in DYNAMIC_BROKER_CONFIGS)
    if static:
        raise _invalid_request(f"Cannot update these configs dynamically: Set({', '.join(static)})")
    for name, value in configs.items():
        d = BROKER_CONFIGS.get(name)
        if d is None:
            continue
        try:
            d.parse(value)
        except ConfigValueError as e:
            raise KafkaError(ErrorCode.invalid_config, str(e)) from None
    return dict(configs)


def broker_entity(name: str, own_id: int) -> str:
    """The ``/config/brokers`` child a BROKER resource names (Kafka's getBrokerId)."""
    if not name:
        return znodes.DEFAULT_BROKER_ENTITY
    if name != str(own_id):
        raise _invalid_request(f"Unexpected broker id, expected {own_id}, but received {name}")
    return name


def _validated(
    change: ConfigChange, validate: Callable[[dict[str, Any]], dict[str, str]]
) -> ConfigChange:
    """``change``, then the validation of the whole result (on every CAS attempt)."""
    return lambda current: validate(dict(change(current)))


# =============================================================================== handlers
async def _alter(
    ctx: RequestContext,
    api_key: int,
    v: int,
    req: Any,
    change_for: Callable[[Any], Callable[[dict[str, str]], dict[str, str]]],
) -> Any:
    results = []
    counts = Counter((int(r.resource_type), r.resource_name) for r in req.resources)
    written: dict[str, dict[str, str]] = {}
    brokers_written: dict[str, dict[str, str]] = {}
    for res in req.resources:
        rtype, name = int(res.resource_type), res.resource_name
        code, message = ErrorCode.none, None
        try:
            if counts[(rtype, name)] > 1:
                raise _invalid_request("Each resource must appear at most once.")
            if rtype == RESOURCE_TOPIC:
                if not ctx.authorize(AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, name):
                    raise KafkaError(
                        ErrorCode.topic_authorization_failed,
                        f"Authorization failed for topic {name}.",
                    )
                why = topic_name_error(name)
                if why:
                    raise KafkaError(ErrorCode.invalid_topic_exception, why)
                change = change_for(res)
                change({})  # request-shape errors first, before any ZooKeeper round trip
                new = await asyncio.to_thread(
                    ctx.admin.alter_topic_config,
                    name,
                    _validated(change, validate_topic_configs),
                    bool(req.validate_only),
                )
                if not req.validate_only:
                    written[name] = new
            elif rtype in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER):
                if not ctx.authorize_cluster(AclOperation.ALTER_CONFIGS):
                    raise KafkaError(
                        ErrorCode.cluster_authorization_failed, "Cluster authorization failed."
                    )
                if rtype == RESOURCE_BROKER_LOGGER:
                    raise _invalid_request("broker loggers are not configurable in Odradek")
                entity = broker_entity(name, ctx.broker_id)
                change = change_for(res)
                change({})
                new = await asyncio.to_thread(
                    ctx.admin.alter_broker_config,
                    entity,
                    _validated(change, validate_broker_configs),
                    bool(req.validate_only),
                )
                if not req.validate_only:
                    brokers_written[entity] = new
            else:
                raise _invalid_request(
                    f"AlterConfigs is only supported for topics and brokers, but resource "
                    f"type is {rtype}"
                )
        except KafkaError as e:
            code, message = e.code, e.message or None
        except Exception:
            logger.exception("altering configs of %s failed", name)
            code, message = ErrorCode.unknown_server_error, "unexpected error; see broker log"
        results.append(
            part(
                api_key,
                v,
                "AlterConfigsResourceResponse",
                error_code=code,
                error_message=message,
                resource_type=rtype,
                resource_name=name,
            )
        )
    if written or brokers_written:
        await _wait_own_image(ctx, written, brokers_written)
    return response(api_key, v, throttle_time=0, responses=tuple(results))


async def _wait_own_image(
    ctx: RequestContext,
    written: dict[str, dict[str, str]],
    brokers_written: dict[str, dict[str, str]],
) -> None:
    def ready() -> bool:
        image = ctx.image
        topics = image.topics
        if any(t in topics and topics[t].configs != c for t, c in written.items()):
            return False
        for entity, c in brokers_written.items():
            mine = (
                image.default_broker_overrides
                if entity == znodes.DEFAULT_BROKER_ENTITY
                else image.broker_overrides
            )
            if mine != c:
                return False
        return True

    deadline = time.monotonic() + _OWN_IMAGE_WAIT_S
    while not ready() and time.monotonic() < deadline:
        await ctx.wait_for_image(deadline - time.monotonic())


def handle_alter_configs(ctx: RequestContext, header: RequestHeaderInfo, req: Any) -> Any:
    """AlterConfigs v0–2: replace each resource's whole override set."""

    def change_for(res: Any) -> Callable[[dict[str, str]], dict[str, str]]:
        new = replace_all([(c.name, c.value) for c in res.configs])
        return lambda _current: dict(new)

    return _alter(ctx, 33, header.api_version, req, change_for)


def handle_incremental_alter_configs(
    ctx: RequestContext, header: RequestHeaderInfo, req: Any
) -> Any:
    """IncrementalAlterConfigs v0–1: SET / DELETE / APPEND / SUBTRACT per key."""

    def change_for(res: Any) -> Callable[[dict[str, str]], dict[str, str]]:
        ops = [(c.name, int(c.config_operation), c.value) for c in res.configs]
        return lambda current: apply_incremental(current, ops)

    return _alter(ctx, 44, header.api_version, req, change_for)
