"""Secrets on disk (issue 28 item 4): files holding a password or a key are 0600 from the
moment they exist, whatever the umask or the mode of a file they replace; inline PEM key
material loaded through a temporary file leaves no file behind."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.cluster.certs import make_ca
from odradek.config import BrokerConfig
from odradek.security.listener_config import client_ssl_context, server_ssl_context
from odradek.security.private_files import write_private


@pytest.fixture
def open_umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def test_write_private_is_0600_whatever_the_umask_and_the_old_file(
    tmp_path: Path, open_umask: None
) -> None:
    path = tmp_path / "client.properties"
    path.write_text("old\n")
    path.chmod(0o666)
    write_private(path, "sasl.password=secret\n")
    assert path.read_text() == "sasl.password=secret\n"
    assert path.stat().st_mode & 0o777 == 0o600
    write_private(tmp_path / "new.pem", b"key")
    assert (tmp_path / "new.pem").stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["client.properties", "new.pem"]


def test_inline_pem_keystores_leave_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pem = make_ca(tmp_path / "ca").issue(tmp_path / "b.pem", "broker-1", ["127.0.0.1"])
    text = pem.read_text()
    cut = text.index("-----BEGIN CERTIFICATE-----")
    config = BrokerConfig.from_dict(
        {
            "broker.id": "1",
            "zookeeper.connect": "127.0.0.1:2181",
            "listeners": "SSL://127.0.0.1:9093",
            "security.inter.broker.protocol": "SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.key": text[:cut],
            "ssl.keystore.certificate.chain": text[cut:],
        }
    )
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    for _ in range(3):  # the inter-broker client makes one per connection
        server_ssl_context(config, "SSL")
        client_ssl_context(config, "SSL")
    assert list(temp.iterdir()) == []
