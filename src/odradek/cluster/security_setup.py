"""What ``odradek cluster up --security sasl_ssl`` adds to a local cluster.

* A CA and one PEM keystore per broker (``DIR/security/``, ``odradek.cluster.certs``),
  valid for the broker's loopback address.
* An admin SCRAM user (SCRAM-SHA-256 and -512, random password) written to
  ``/config/users/admin`` before any broker starts, as ``kafka-configs --zookeeper``
  does; it is a super user, and the brokers authenticate to each other as it.
* Broker properties: one ``SASL_SSL`` listener for clients and replication,
  SCRAM mechanisms, PEM key material, the ACL authorizer.
* ``DIR/client.properties`` for the admin user with librdkafka's names
  (``security.protocol``, ``sasl.mechanism``, ``sasl.username``, ``sasl.password``,
  ``ssl.ca.location``): ``--command-config`` for every ``odradek`` tool, and what
  confluent-kafka, kcat (``-F``) and the Spark ``kafka.*`` options take.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from kazoo.client import KazooClient

from odradek.cluster.certs import load_ca, make_ca
from odradek.config import parse_properties
from odradek.security.client_security import ClientSecurity
from odradek.security.private_files import write_private
from odradek.security.scram import MECHANISMS, credential_from_password
from odradek.zk import security_store

__all__ = ["ADMIN_USER", "SECURITY_MODES", "SecuritySetup", "client_config", "prepare"]

SECURITY_MODES = ("plaintext", "sasl_ssl")
ADMIN_USER = "admin"
LISTENER = "SASL_SSL"
INTER_BROKER_MECHANISM = "SCRAM-SHA-512"


# Extra listeners a secured cluster can have besides SASL_SSL (tests, demos of each
# protocol): name -> port offset from the SASL_SSL port.
EXTRA_LISTENERS = {"SSL": 1, "SASL_PLAINTEXT": 2, "PLAINTEXT": 3}


@dataclass
class SecuritySetup:
    client_properties: Path
    ca: Path
    keystores: dict[int, Path]
    admin_password: str
    # extra listener names; SASL_PLAINTEXT serves PLAIN (users below) and SCRAM, SSL
    # requires client certificates (ssl.client.auth=required: User:<subject DN>)
    extra_listeners: tuple[str, ...] = ()
    plain_users: dict[str, str] | None = None

    def broker_properties(self, broker_id: int, host: str, port: int) -> dict[str, str]:
        jaas = (
            'org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="{ADMIN_USER}" password="{self.admin_password}";'
        )
        ln = LISTENER.lower()
        listeners = [f"{LISTENER}://{host}:{port}"] + [
            f"{name}://{host}:{port + EXTRA_LISTENERS[name]}" for name in self.extra_listeners
        ]
        extra: dict[str, str] = {}
        if "SSL" in self.extra_listeners:
            extra["listener.name.ssl.ssl.client.auth"] = "required"
        if "SASL_PLAINTEXT" in self.extra_listeners:
            users = {ADMIN_USER: self.admin_password, **(self.plain_users or {})}
            extra["listener.name.sasl_plaintext.sasl.enabled.mechanisms"] = (
                "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
            )
            extra["listener.name.sasl_plaintext.plain.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'username="{ADMIN_USER}" password="{self.admin_password}" '
                + " ".join(f'user_{u}="{p}"' for u, p in users.items())
                + ";"
            )
            for m in ("scram-sha-256", "scram-sha-512"):
                extra[f"listener.name.sasl_plaintext.{m}.sasl.jaas.config"] = jaas
        return {
            **extra,
            "listeners": ",".join(listeners),
            "advertised.listeners": ",".join(listeners),
            "inter.broker.listener.name": LISTENER,
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": INTER_BROKER_MECHANISM,
            f"listener.name.{ln}.scram-sha-256.sasl.jaas.config": jaas,
            f"listener.name.{ln}.scram-sha-512.sasl.jaas.config": jaas,
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.keystores[broker_id]),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca),
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": f"User:{ADMIN_USER}",
        }


def prepare(
    directory: Path,
    brokers: dict[int, str],
    zk: KazooClient,
    *,
    extra_listeners: tuple[str, ...] = (),
    plain_users: dict[str, str] | None = None,
) -> SecuritySetup:
    """Key material, the admin user in ZooKeeper and client.properties (idempotent for
    the user: a restarted cluster keeps its password)."""
    sec_dir = directory / "security"
    props_path = directory / "client.properties"
    password = None
    if props_path.exists():
        password = parse_properties(props_path.read_text()).get("sasl.password")
    password = password or secrets.token_urlsafe(18)
    ca = make_ca(sec_dir)
    keystores = {
        bid: ca.issue(sec_dir / f"broker-{bid}.pem", f"broker-{bid}", [host])
        for bid, host in brokers.items()
    }
    security_store.update_user_config(
        zk,
        ADMIN_USER,
        {m: credential_from_password(m, password, 4096).to_config() for m in MECHANISMS},
        set(),
    )
    write_private(
        props_path,
        "# written by `odradek cluster up --security sasl_ssl`: the admin user (a super "
        "user)\n"
        "security.protocol=SASL_SSL\n"
        f"sasl.mechanism={INTER_BROKER_MECHANISM}\n"
        f"sasl.username={ADMIN_USER}\n"
        f"sasl.password={password}\n"
        f"ssl.ca.location={ca.cert_path}\n",
    )
    return SecuritySetup(
        props_path, ca.cert_path, keystores, password, tuple(extra_listeners), plain_users
    )


def added_broker_properties(
    directory: Path, first: dict[str, str], broker_id: int, first_host: str, host: str
) -> dict[str, str]:
    """Properties of a broker added to a running ``sasl_ssl`` cluster: a keystore for
    ``host`` issued by the cluster's CA (hostname verification between brokers must
    pass) and the first broker's listeners moved to ``host``."""
    sec_dir = directory / "security"
    keystore = load_ca(sec_dir).issue(
        sec_dir / f"broker-{broker_id}.pem", f"broker-{broker_id}", [host]
    )
    out = {"ssl.keystore.location": str(keystore)}
    for key in ("listeners", "advertised.listeners"):
        if key in first:
            out[key] = first[key].replace(f"//{first_host}:", f"//{host}:")
    return out


def client_config(client_properties: str | Path | None) -> dict[str, str]:
    """librdkafka settings from a client.properties file ({} for None)."""
    if not client_properties:
        return {}
    props = parse_properties(Path(client_properties).read_text())
    return ClientSecurity.from_properties(props).librdkafka_config()
