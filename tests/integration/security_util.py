"""Helpers for the security tests: a secured cluster's addresses and credentials for each
client library, mTLS client certificates, a raw (Odradek client) connection."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from odradek.client.connection import KafkaConnection
from odradek.cluster.certs import load_ca
from odradek.cluster.local import LocalCluster
from odradek.cluster.security_setup import EXTRA_LISTENERS
from odradek.config import parse_properties
from odradek.security.client_security import ClientSecurity
from odradek.security.private_files import write_private

PLAIN_USERS = {"carol": "carol-secret"}
CLIENT_DN = "CN=client,O=Odradek"


@dataclass(frozen=True)
class Access:
    """How to reach one listener as one user (what each client library needs)."""

    protocol: str  # SSL | SASL_SSL | SASL_PLAINTEXT
    bootstrap: str
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    ca: str | None = None
    cert: str | None = None  # mTLS
    key: str | None = None

    def confluent(self) -> dict[str, Any]:
        c: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": self.protocol,
        }
        if self.mechanism:
            c.update(
                {
                    "sasl.mechanism": self.mechanism,
                    "sasl.username": self.username,
                    "sasl.password": self.password,
                }
            )
        if self.ca:
            c["ssl.ca.location"] = self.ca
        if self.cert:
            c.update({"ssl.certificate.location": self.cert, "ssl.key.location": self.key})
        return c

    def kcat_args(self) -> list[str]:
        return [
            x
            for k, v in self.confluent().items()
            if k != "bootstrap.servers"
            for x in ("-X", f"{'sasl.mechanisms' if k == 'sasl.mechanism' else k}={v}")
        ]

    def kafka_python(self) -> dict[str, Any]:
        c: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap.split(","),
            "security_protocol": self.protocol,
        }
        if self.mechanism:
            c.update(
                {
                    "sasl_mechanism": self.mechanism,
                    "sasl_plain_username": self.username,
                    "sasl_plain_password": self.password,
                }
            )
        if self.ca:
            c["ssl_cafile"] = self.ca
        if self.cert:
            c.update({"ssl_certfile": self.cert, "ssl_keyfile": self.key})
        return c

    def aiokafka(self) -> dict[str, Any]:
        from aiokafka.helpers import create_ssl_context

        c: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "security_protocol": self.protocol,
        }
        if self.mechanism:
            c.update(
                {
                    "sasl_mechanism": self.mechanism,
                    "sasl_plain_username": self.username,
                    "sasl_plain_password": self.password,
                }
            )
        if self.ca:
            c["ssl_context"] = create_ssl_context(
                cafile=self.ca, certfile=self.cert, keyfile=self.key
            )
        return c

    def security(self) -> ClientSecurity:
        props = {"security.protocol": self.protocol}
        if self.mechanism:
            props.update(
                {
                    "sasl.mechanism": self.mechanism,
                    "sasl.username": self.username or "",
                    "sasl.password": self.password or "",
                }
            )
        if self.ca:
            props["ssl.ca.location"] = self.ca
        if self.cert:
            props.update(
                {"ssl.certificate.location": self.cert, "ssl.key.location": self.key or ""}
            )
        return ClientSecurity.from_properties(props)


def admin_password(c: LocalCluster) -> str:
    assert c.client_properties
    return parse_properties(Path(c.client_properties).read_text())["sasl.password"]


def ca_file(c: LocalCluster) -> str:
    return str(c.dir / "security" / "ca.pem")


def bootstrap(c: LocalCluster, protocol: str) -> str:
    port_off = 0 if protocol == "SASL_SSL" else EXTRA_LISTENERS[protocol]
    return ",".join(f"{b.host}:{b.port + port_off}" for b in c.brokers)


def access(
    c: LocalCluster,
    protocol: str,
    mechanism: str | None = None,
    user: str = "admin",
    password: str | None = None,
) -> Access:
    if protocol == "SSL":
        cert, key = client_certificate(c)
        return Access("SSL", bootstrap(c, "SSL"), ca=ca_file(c), cert=cert, key=key)
    pw = (
        password
        if password is not None
        else (admin_password(c) if user == "admin" else PLAIN_USERS.get(user))
    )
    return Access(
        protocol,
        bootstrap(c, protocol),
        mechanism,
        user,
        pw,
        ca_file(c) if protocol == "SASL_SSL" else None,
    )


def client_certificate(c: LocalCluster) -> tuple[str, str]:
    """(certificate file, key file) of a client certificate CN=client,O=Odradek."""
    sec = c.dir / "security"
    cert, key = sec / "client-cert.pem", sec / "client-key.pem"
    if not cert.exists():
        combined = load_ca(sec).issue(sec / "client.pem", "client", [])
        text = combined.read_text()
        blocks = re.findall(r"-----BEGIN [^-]+-----.*?-----END [^-]+-----\n", text, re.S)
        write_private(key, "".join(b for b in blocks if "PRIVATE KEY" in b))
        cert.write_text("".join(b for b in blocks if "CERTIFICATE" in b))
    return str(cert), str(key)


def raw_connection(a: Access, host_port: str | None = None) -> KafkaConnection:
    host, port = (host_port or a.bootstrap.split(",")[0]).rsplit(":", 1)
    return KafkaConnection(host, int(port), timeout_s=15.0, security=a.security())


def odradek(*args: str, timeout: float = 90.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=timeout
    )
