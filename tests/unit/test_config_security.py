"""Listener honesty and connection-limit settings (issue 11): pure config checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.config import BrokerConfig, ConfigError, parse_connection_overrides
from odradek.configdefs import INT_MAX
from odradek.security.listener_config import listener_security_errors

BASE = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181"}


def broker(props: dict[str, str]) -> BrokerConfig:
    return BrokerConfig.from_dict({**BASE, **props})


def test_plaintext_listener_is_fine() -> None:
    assert listener_security_errors(broker({"listeners": "PLAINTEXT://127.0.0.1:9092"})) == []


@pytest.mark.parametrize("proto", ["SSL", "SASL_SSL"])
def test_tls_listener_without_key_material_is_refused(proto: str) -> None:
    errors = listener_security_errors(
        broker({"listeners": f"{proto}://h:1", "security.inter.broker.protocol": proto})
    )
    assert any(
        f"listener {proto}://h:1 ({proto}): its key material is missing: "
        "ssl.keystore.location is not set" in e
        for e in errors
    ), errors


def test_keystore_must_be_pem_and_exist(tmp_path: Path) -> None:
    ks = tmp_path / "k.jks"
    ks.write_bytes(b"x")
    errors = listener_security_errors(
        broker(
            {
                "listeners": "SECURE://h:1",
                "listener.security.protocol.map": "SECURE:SSL",
                "inter.broker.listener.name": "SECURE",
                "listener.name.secure.ssl.keystore.location": str(ks),
            }
        )
    )
    assert any("ssl.keystore.type=JKS is not supported" in e for e in errors), errors
    errors = listener_security_errors(
        broker(
            {
                "listeners": "SECURE://h:1",
                "listener.security.protocol.map": "SECURE:SSL",
                "inter.broker.listener.name": "SECURE",
                "ssl.keystore.type": "PEM",
                "listener.name.secure.ssl.keystore.location": str(tmp_path / "missing.pem"),
            }
        )
    )
    assert any("does not exist" in e for e in errors), errors


def test_sasl_listener_needs_supported_mechanisms() -> None:
    errors = listener_security_errors(
        broker(
            {
                "listeners": "SASL_PLAINTEXT://h:1",
                "security.inter.broker.protocol": "SASL_PLAINTEXT",
            }
        )
    )
    assert any("SASL mechanism GSSAPI is not supported" in e for e in errors), errors
    errors = listener_security_errors(
        broker(
            {
                "listeners": "SASL_PLAINTEXT://h:1",
                "inter.broker.listener.name": "SASL_PLAINTEXT",
                "sasl.enabled.mechanisms": "PLAIN",
                "sasl.mechanism.inter.broker.protocol": "PLAIN",
            }
        )
    )
    assert any("PLAIN needs its users" in e for e in errors), errors
    jaas = (
        'org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="a-secret" user_admin="a-secret";'
    )
    assert (
        listener_security_errors(
            broker(
                {
                    "listeners": "SASL_PLAINTEXT://h:1",
                    "inter.broker.listener.name": "SASL_PLAINTEXT",
                    "sasl.enabled.mechanisms": "PLAIN",
                    "sasl.mechanism.inter.broker.protocol": "PLAIN",
                    "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
                }
            )
        )
        == []
    )


def test_unmapped_listener_and_inter_broker_listener() -> None:
    errors = listener_security_errors(
        broker({"listeners": "FOO://h:1", "security.inter.broker.protocol": "SSL"})
    )
    assert any("no security protocol defined for listener FOO" in e for e in errors)
    assert any("inter.broker.listener.name must be a listener name" in e for e in errors)
    errors = listener_security_errors(
        broker(
            {
                "listeners": "PLAINTEXT://h:1",
                "inter.broker.listener.name": "PLAINTEXT",
                "security.inter.broker.protocol": "PLAINTEXT",
            }
        )
    )
    assert any("Only one of inter.broker.listener.name" in e for e in errors)


def test_several_listeners_are_served() -> None:
    assert (
        listener_security_errors(
            broker(
                {
                    "listeners": "PLAINTEXT://h:1,OTHER://h:2",
                    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT",
                }
            )
        )
        == []
    )
    errors = listener_security_errors(
        broker(
            {
                "listeners": "PLAINTEXT://h:1",
                "advertised.listeners": "PLAINTEXT://h:1,X://h:2",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,X:PLAINTEXT",
            }
        )
    )
    assert errors == ["advertised.listeners: listener X is not in listeners"]


def test_authorizer_and_mapping_rules() -> None:
    errors = listener_security_errors(
        broker(
            {"authorizer.class.name": "com.example.Mine", "ssl.principal.mapping.rules": "RULE:x"}
        )
    )
    assert len(errors) == 2
    assert (
        listener_security_errors(
            broker({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
        )
        == []
    )


def test_connection_overrides() -> None:
    assert parse_connection_overrides("") == {}
    assert parse_connection_overrides("hostA:100, 127.0.0.1 : 200,[::1]:3") == {
        "hostA": 100,
        "127.0.0.1": 200,
        "::1": 3,
    }
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
    assert broker({"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "10.0.0.1:5"})
