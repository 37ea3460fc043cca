"""AlterConfigs / IncrementalAlterConfigs handler logic without a ZooKeeper: the handler
gets an in-memory admin gateway (tests/support/admin_gateway.py) in its RequestContext,
as a broker gets the ZooKeeper one. What is checked is the handler's part -- request
validation, the per-resource errors, merging with the current overrides (and again
after a lost race), validate_only, broker entities -- the ZooKeeper side has its own
tests (tests/unit/zk/test_cas.py, tests/integration/test_configs.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import pytest
from tests.support.admin_gateway import FakeAdminGateway

from odradek.errors import ErrorCode
from odradek.metadata.image import MetadataImage
from odradek.protocol.codec import RequestHeaderInfo
from odradek.server.context import RequestContext
from odradek.server.handlers.configs import (
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    OP_SUBTRACT,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    handle_alter_configs,
    handle_incremental_alter_configs,
)
from odradek.zk.admin_gateway import AdminGateway, ZkAdminGateway

BROKER_ID = 1
RATE = "leader.replication.throttled.rate"


class _Metadata:
    """The broker's image as it would follow the gateway's znodes (broker overrides)."""

    def __init__(self, gateway: FakeAdminGateway) -> None:
        self.gateway = gateway

    @property
    def image(self) -> MetadataImage:
        configs = self.gateway.configs
        return MetadataImage(
            broker_overrides=dict(configs.get(f"brokers/{BROKER_ID}", {})),
            default_broker_overrides=dict(configs.get("brokers/<default>", {})),
        )

    async def wait_for_image(self, timeout_s: float) -> None:
        await asyncio.sleep(0)


def _ctx(gateway: FakeAdminGateway) -> RequestContext:
    none = cast(Any, None)
    return RequestContext(
        broker_id=BROKER_ID,
        config=none,
        replicas=none,
        groups=none,
        producer_ids=None,
        admin=gateway,
        metadata=_Metadata(gateway),
    )


def _header(api_key: int, version: int) -> RequestHeaderInfo:
    return RequestHeaderInfo(
        api_key=api_key, api_version=version, correlation_id=1, client_id="test", header_size=0
    )


def _resource(rtype: int, name: str, *configs: tuple[str, int, str | None]) -> Any:
    return SimpleNamespace(
        resource_type=rtype,
        resource_name=name,
        configs=[SimpleNamespace(name=n, config_operation=op, value=v) for n, op, v in configs],
    )


def _send(
    api_key: int, gateway: FakeAdminGateway, resources: tuple[Any, ...], validate_only: bool
) -> list[tuple[ErrorCode, str | None]]:
    handler = handle_incremental_alter_configs if api_key == 44 else handle_alter_configs
    req = SimpleNamespace(resources=list(resources), validate_only=validate_only)
    resp = asyncio.run(handler(_ctx(gateway), _header(api_key, 1), req))
    return [(ErrorCode(r.error_code), r.error_message) for r in resp.responses]


def _incremental(gateway: FakeAdminGateway, *resources: Any, validate_only: bool = False) -> Any:
    return _send(44, gateway, resources, validate_only)


def _alter(gateway: FakeAdminGateway, *resources: Any, validate_only: bool = False) -> Any:
    return _send(33, gateway, resources, validate_only)


OK = [(ErrorCode.none, None)]


# ---------------------------------------------------------------------------- topics
def test_incremental_merges_with_the_current_overrides_and_notifies() -> None:
    gw = FakeAdminGateway(["t"])
    gw.configs["topics/t"] = {
        "retention.ms": "1000",
        "cleanup.policy": "compact",
        "segment.bytes": "1048576",
    }
    got = _incremental(
        gw,
        _resource(
            RESOURCE_TOPIC,
            "t",
            ("retention.ms", OP_SET, "5000"),
            ("cleanup.policy", OP_APPEND, "delete"),
            ("segment.bytes", OP_DELETE, None),
        ),
    )
    assert got == OK
    assert gw.configs["topics/t"] == {"retention.ms": "5000", "cleanup.policy": "compact,delete"}
    assert gw.notifications == ["topics/t"]


def test_incremental_subtract_starts_from_the_default() -> None:
    gw = FakeAdminGateway(["t"])
    assert (
        _incremental(gw, _resource(RESOURCE_TOPIC, "t", ("cleanup.policy", OP_SUBTRACT, "delete")))
        == OK
    )
    assert gw.configs["topics/t"] == {"cleanup.policy": ""}


def test_a_lost_race_re_applies_the_operations_to_the_winner_s_overrides() -> None:
    gw = FakeAdminGateway(["t"])
    gw.configs["topics/t"] = {"retention.ms": "1000"}
    gw.race = lambda entity: gw.configs.__setitem__(
        entity, {"retention.ms": "1000", "segment.ms": "60000"}
    )
    assert _incremental(gw, _resource(RESOURCE_TOPIC, "t", ("retention.ms", OP_SET, "2000"))) == OK
    assert gw.attempts == 2
    assert gw.configs["topics/t"] == {"retention.ms": "2000", "segment.ms": "60000"}


def test_alter_configs_replaces_the_whole_override_set() -> None:
    gw = FakeAdminGateway(["t"])
    gw.configs["topics/t"] = {"retention.ms": "1000", "segment.ms": "60000"}
    assert _alter(gw, _resource(RESOURCE_TOPIC, "t", ("retention.ms", OP_SET, "7"))) == OK
    assert gw.configs["topics/t"] == {"retention.ms": "7"}


def test_alter_configs_refuses_null_values_before_any_write() -> None:
    gw = FakeAdminGateway(["t"])
    got = _alter(
        gw,
        _resource(
            RESOURCE_TOPIC, "t", ("retention.ms", OP_SET, None), ("segment.ms", OP_SET, None)
        ),
    )
    assert got == [
        (ErrorCode.invalid_request, "Null value not supported for : retention.ms,segment.ms")
    ]
    assert gw.attempts == 0 and gw.notifications == []


@pytest.mark.parametrize(
    ("configs", "code", "message"),
    [
        ((("retention.ms", OP_SET, "soon"),), ErrorCode.invalid_config, None),
        ((("no.such.config", OP_SET, "1"),), ErrorCode.invalid_config, None),
        (
            (("retention.ms", 9, "1"),),
            ErrorCode.invalid_request,
            "Unknown alter configs operation type 9",
        ),
        (
            (("retention.ms", OP_APPEND, "1"),),
            ErrorCode.invalid_config,
            "Config value append is not allowed for config key: retention.ms",
        ),
        (
            (("retention.ms", OP_SET, "1"), ("retention.ms", OP_DELETE, None)),
            ErrorCode.invalid_request,
            "Error due to duplicate config keys : retention.ms",
        ),
    ],
)
def test_invalid_changes_write_nothing(
    configs: tuple[tuple[str, int, str | None], ...], code: ErrorCode, message: str | None
) -> None:
    gw = FakeAdminGateway(["t"])
    gw.configs["topics/t"] = before = {"retention.ms": "1000"}
    [(got_code, got_message)] = _incremental(gw, _resource(RESOURCE_TOPIC, "t", *configs))
    assert got_code == code
    if message is not None:
        assert got_message == message
    assert gw.configs["topics/t"] is before and gw.notifications == []


def test_validate_only_validates_and_writes_nothing() -> None:
    gw = FakeAdminGateway(["t"])
    assert (
        _incremental(
            gw, _resource(RESOURCE_TOPIC, "t", ("retention.ms", OP_SET, "5")), validate_only=True
        )
        == OK
    )
    assert (
        _incremental(
            gw, _resource(RESOURCE_TOPIC, "t", ("retention.ms", OP_SET, "x")), validate_only=True
        )[0][0]
        == ErrorCode.invalid_config
    )
    assert gw.configs == {} and gw.notifications == []


def test_unknown_topic_and_bad_names_and_duplicate_resources() -> None:
    gw = FakeAdminGateway(["t"])
    got = _incremental(
        gw,
        _resource(RESOURCE_TOPIC, "missing", ("retention.ms", OP_SET, "1")),
        _resource(RESOURCE_TOPIC, "bad/name", ("retention.ms", OP_SET, "1")),
        _resource(RESOURCE_TOPIC, "t", ("retention.ms", OP_SET, "1")),
        _resource(RESOURCE_TOPIC, "t", ("retention.ms", OP_SET, "2")),
        _resource(3, "g", ("retention.ms", OP_SET, "2")),
    )
    assert got[0] == (ErrorCode.unknown_topic_or_partition, "Topic 'missing' does not exist.")
    assert got[1][0] == ErrorCode.invalid_topic_exception
    assert (
        got[2] == got[3] == (ErrorCode.invalid_request, "Each resource must appear at most once.")
    )
    assert got[4] == (
        ErrorCode.invalid_request,
        "AlterConfigs is only supported for topics and brokers, but resource type is 3",
    )
    assert gw.notifications == []


# ---------------------------------------------------------------------------- brokers
def test_broker_dynamic_config_for_this_broker_and_the_default() -> None:
    gw = FakeAdminGateway()
    assert (
        _incremental(
            gw,
            _resource(RESOURCE_BROKER, str(BROKER_ID), (RATE, OP_SET, "1000")),
            _resource(RESOURCE_BROKER, "", (RATE, OP_SET, "500")),
        )
        == OK * 2
    )
    assert gw.configs == {
        f"brokers/{BROKER_ID}": {RATE: "1000"},
        "brokers/<default>": {RATE: "500"},
    }
    assert gw.notifications == [f"brokers/{BROKER_ID}", "brokers/<default>"]


def test_broker_config_refusals() -> None:
    gw = FakeAdminGateway()
    got = _incremental(
        gw,
        _resource(RESOURCE_BROKER, "2", (RATE, OP_SET, "1")),
        _resource(RESOURCE_BROKER, "", ("num.partitions", OP_SET, "3")),
        _resource(RESOURCE_BROKER, str(BROKER_ID), (RATE, OP_SET, "fast")),
        _resource(8, str(BROKER_ID), ("kafka", OP_SET, "DEBUG")),
    )
    assert got[0] == (ErrorCode.invalid_request, "Unexpected broker id, expected 1, but received 2")
    assert got[1] == (
        ErrorCode.invalid_request,
        "Cannot update these configs dynamically: Set(num.partitions)",
    )
    assert got[2][0] == ErrorCode.invalid_config
    assert got[3] == (ErrorCode.invalid_request, "broker loggers are not configurable in Odradek")
    assert gw.configs == {} and gw.notifications == []


def test_custom_broker_configs_are_kept() -> None:
    gw = FakeAdminGateway()
    assert (
        _incremental(gw, _resource(RESOURCE_BROKER, "", ("cleanup.policy", OP_SET, "compact")))
        == OK
    )
    assert gw.configs["brokers/<default>"] == {"cleanup.policy": "compact"}


def test_the_fake_offers_every_gateway_operation() -> None:
    """The fake stands in for ZkAdminGateway: same operations (the Protocol's)."""

    def ops(cls: type) -> set[str]:
        return {n for n, v in vars(cls).items() if callable(v) and not n.startswith("_")}

    assert ops(AdminGateway) == ops(ZkAdminGateway) == ops(FakeAdminGateway)
