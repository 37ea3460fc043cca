"""Honest listeners: a listener is never served with less security than configured.

``listeners=SSL://...`` once started and served plaintext, even with a keystore that did
not exist. SSL, SASL_PLAINTEXT and SASL_SSL listeners are now served (issue 14, see
test_security.py); a listener whose settings are incomplete or unsupported still stops the
broker process with exit status 1 and a message naming the listener and what is wrong,
before anything is bound -- checked by running the real ``odradek broker`` command (no
ZooKeeper needed: the check comes first).
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from odradek.cluster import addresses

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def _start(tmp_path: Path, props: dict[str, str]) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "server.properties"
    base = {
        "broker.id": "1",
        "zookeeper.connect": "127.0.0.1:1",
        "log.dirs": str(tmp_path / "d"),
        "zookeeper.session.timeout.ms": "2000",
    }
    base.update(props)
    config.write_text("".join(f"{k}={v}\n" for k, v in base.items()))
    return subprocess.run(
        [sys.executable, "-m", "odradek", "broker", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=45,
    )


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL"])
def test_missing_key_material_stops_the_broker(tmp_path: Path, protocol: str) -> None:
    port = addresses.BROKER_PORT + 7
    host = "127.0.0.1"
    proc = _start(
        tmp_path,
        {
            "listeners": f"{protocol}://{host}:{port}",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(tmp_path / "missing.pem"),
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            "inter.broker.listener.name": protocol,
        },
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    assert (
        f"listener {protocol}://{host}:{port} ({protocol}): its key material is missing: "
        f"ssl.keystore.location {tmp_path / 'missing.pem'} does not exist" in out
    )
    assert "serving on" not in out
    assert not _listening(host, port)


def test_missing_keystore_setting_is_named(tmp_path: Path) -> None:
    proc = _start(
        tmp_path, {"listeners": "SSL://127.0.0.1:19093", "inter.broker.listener.name": "SSL"}
    )
    assert proc.returncode == 1
    assert "ssl.keystore.location is not set" in proc.stdout + proc.stderr


def test_jks_keystores_are_named_not_misread(tmp_path: Path) -> None:
    jks = tmp_path / "k.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed")
    proc = _start(
        tmp_path,
        {
            "listeners": "SSL://127.0.0.1:19093",
            "inter.broker.listener.name": "SSL",
            "ssl.keystore.location": str(jks),
        },
    )
    assert proc.returncode == 1
    assert (
        "ssl.keystore.type=JKS is not supported; Odradek reads PEM files"
        in proc.stdout + proc.stderr
    )


def test_mapped_listener_names_and_sasl_settings(tmp_path: Path) -> None:
    proc = _start(tmp_path, {"listeners": "INTERNAL://127.0.0.1:19094"})
    assert proc.returncode == 1
    assert "no security protocol defined for listener INTERNAL" in proc.stdout + proc.stderr
    # PLAIN without its users in the JAAS config: nobody could log in -- refused.
    proc = _start(
        tmp_path,
        {
            "listeners": "PLAINTEXT://127.0.0.1:19095,INTERNAL://127.0.0.1:19094",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
        },
    )
    assert proc.returncode == 1
    out = proc.stdout + proc.stderr
    assert "PLAIN needs its users in listener.name.internal.plain.sasl.jaas.config" in out
    assert not _listening("127.0.0.1", 19095)  # the good listener is not half-served
    proc = _start(
        tmp_path,
        {"listeners": "PLAINTEXT://127.0.0.1:19095", "security.inter.broker.protocol": "SSL"},
    )
    assert proc.returncode == 1
    assert (
        "inter.broker.listener.name must be a listener name defined in "
        "advertised.listeners" in proc.stdout + proc.stderr
    )
    proc = _start(
        tmp_path,
        {
            "listeners": "PLAINTEXT://127.0.0.1:19095",
            "authorizer.class.name": "com.example.MyAuthorizer",
        },
    )
    assert proc.returncode == 1
    assert "Odradek provides" in proc.stdout + proc.stderr


def test_zookeeper_acls_without_zookeeper_authentication_stop_the_broker(tmp_path: Path) -> None:
    """zookeeper.set.acl=true needs an authenticated creator (Kafka refuses it without a
    JAAS Client section too): the broker says so instead of starting."""
    proc = _start(
        tmp_path, {"listeners": "PLAINTEXT://127.0.0.1:19095", "zookeeper.set.acl": "true"}
    )
    assert proc.returncode == 1
    assert (
        "zookeeper.set.acl is true, but no ZooKeeper authentication is configured"
        in proc.stdout + proc.stderr
    )
    proc = _start(
        tmp_path,
        {"listeners": "PLAINTEXT://127.0.0.1:19095", "odradek.zookeeper.auth": "kafka:no-scheme"},
    )
    assert proc.returncode == 1
    assert "Invalid odradek.zookeeper.auth" in proc.stdout + proc.stderr
    assert "no-scheme" not in proc.stdout + proc.stderr  # the secret is not echoed
