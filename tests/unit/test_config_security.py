"""Listener honesty and connection-limit settings (issue 11): pure config checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.config import (
    BrokerConfig,
    ConfigError,
    listener_security_errors,
    parse_connection_overrides,
)
from odradek.configdefs import INT_MAX

BASE = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181"}


def broker(props: dict[str, str]) -> BrokerConfig:
    return BrokerConfig.from_dict({**BASE, **props})


def test_plaintext_listener_is_fine() -> None:
    assert listener_security_errors(broker({"listeners": "PLAINTEXT://127.0.0.1:9092"})) == []


@pytest.mark.parametrize("proto", ["SSL", "SASL_SSL", "SASL_PLAINTEXT"])
def test_unsupported_protocols_are_named(proto: str) -> None:
    (why,) = listener_security_errors(broker({"listeners": f"{proto}://h:1"}))
    assert f"listener {proto}://h:1 uses security protocol {proto}" in why
    assert "plaintext" in why
    assert ("ssl.keystore.location is not set" in why) == proto.endswith("SSL")


def test_keystore_that_exists_still_cannot_start(tmp_path: Path) -> None:
    ks = tmp_path / "k.jks"
    ks.write_bytes(b"x")
    (why,) = listener_security_errors(broker({
        "listeners": "SECURE://h:1", "listener.security.protocol.map": "SECURE:SSL",
        "listener.name.secure.ssl.keystore.location": str(ks)}))
    assert "does not support" in why and "key material" not in why


def test_unmapped_listener_and_inter_broker_protocol() -> None:
    errors = listener_security_errors(broker({"listeners": "FOO://h:1",
                                              "security.inter.broker.protocol": "SSL"}))
    assert any("no security protocol defined for listener FOO" in e for e in errors)
    assert any("security.inter.broker.protocol=SSL" in e for e in errors)


def test_several_listeners_are_refused() -> None:
    errors = listener_security_errors(broker({"listeners": "PLAINTEXT://h:1,OTHER://h:2",
                                              "listener.security.protocol.map":
                                              "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT"}))
    assert errors == [
        "listeners=PLAINTEXT://h:1,OTHER://h:2: Odradek serves exactly one listener; the "
        "others would be silently ignored"]


def test_connection_overrides() -> None:
    assert parse_connection_overrides("") == {}
    assert parse_connection_overrides("hostA:100, 127.0.0.1 : 200,[::1]:3") == {
        "hostA": 100, "127.0.0.1": 200, "::1": 3}
    for bad in ("hostA", "hostA:x", ":5"):
        with pytest.raises(ConfigError):
            parse_connection_overrides(bad)


def test_connection_limit_defaults_and_zero_per_ip() -> None:
    cfg = broker({})
    assert cfg.get("max.connections") == INT_MAX
    assert cfg.get("max.connections.per.ip") == INT_MAX
    assert cfg.get("connections.max.idle.ms") == 600000
    assert cfg.get("queued.max.requests") == 500
    assert cfg.get("odradek.request.max.elements") == 200000
    assert cfg.get("odradek.max.partitions.per.request") == 10000
    assert cfg.get("odradek.max.partitions") == 200000
    with pytest.raises(ConfigError, match="can be set to zero only if"):
        broker({"max.connections.per.ip": "0"})
    assert broker({"max.connections.per.ip": "0",
                   "max.connections.per.ip.overrides": "10.0.0.1:5"})
