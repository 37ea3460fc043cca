"""Honest listeners: a listener Odradek cannot speak stops the broker at start.

``listeners=SSL://...`` once started and served plaintext, even with a keystore that did
not exist. Now the broker process exits with status 1 and a message naming the listener,
its protocol and any missing key material, before binding anything -- checked by running
the real ``odradek broker`` command (no ZooKeeper needed: the check comes first).
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
    base = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:1", "log.dirs": str(tmp_path / "d"),
            "zookeeper.session.timeout.ms": "2000"}
    base.update(props)
    config.write_text("".join(f"{k}={v}\n" for k, v in base.items()))
    return subprocess.run([sys.executable, "-m", "odradek", "broker", "--config", str(config)],
                          capture_output=True, text=True, timeout=45)


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL", "SASL_PLAINTEXT"])
def test_unsupported_listener_stops_the_broker(tmp_path: Path, protocol: str) -> None:
    port = addresses.BROKER_PORT + 7
    host = "127.0.0.1"
    proc = _start(tmp_path, {"listeners": f"{protocol}://{host}:{port}",
                             "ssl.keystore.location": str(tmp_path / "missing.jks")})
    assert proc.returncode == 1, proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    assert f"listener {protocol}://{host}:{port} uses security protocol {protocol}" in out
    assert "refusing to start rather than serve it as plaintext" in out
    if protocol.endswith("SSL"):
        assert f"ssl.keystore.location {tmp_path / 'missing.jks'} does not exist" in out
    assert "serving on" not in out
    assert not _listening(host, port)


def test_missing_keystore_setting_is_named(tmp_path: Path) -> None:
    proc = _start(tmp_path, {"listeners": "SSL://127.0.0.1:19093"})
    assert proc.returncode == 1
    assert "ssl.keystore.location is not set" in proc.stdout + proc.stderr


def test_mapped_listener_names_and_inter_broker_protocol(tmp_path: Path) -> None:
    proc = _start(tmp_path, {
        "listeners": "INTERNAL://127.0.0.1:19094",
        "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT",
    })
    assert proc.returncode == 1
    assert "uses security protocol SASL_PLAINTEXT" in proc.stdout + proc.stderr
    proc = _start(tmp_path, {"listeners": "INTERNAL://127.0.0.1:19094"})
    assert proc.returncode == 1
    assert "no security protocol defined for listener INTERNAL" in proc.stdout + proc.stderr
    proc = _start(tmp_path, {"listeners": "PLAINTEXT://127.0.0.1:19095",
                             "security.inter.broker.protocol": "SSL"})
    assert proc.returncode == 1
    assert "security.inter.broker.protocol=SSL is not supported" in proc.stdout + proc.stderr


def test_two_listeners_are_refused_not_half_served(tmp_path: Path) -> None:
    proc = _start(tmp_path, {"listeners": "PLAINTEXT://127.0.0.1:19096,SSL://127.0.0.1:19097"})
    assert proc.returncode == 1
    out = proc.stdout + proc.stderr
    assert "Odradek serves exactly one listener" in out
    assert "uses security protocol SSL" in out
    assert not _listening("127.0.0.1", 19096)
