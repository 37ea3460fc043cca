"""Pieces shared by the commands that talk to brokers as a Kafka client.

``--command-config FILE`` is Kafka's: a client properties file, e.g. the
``client.properties`` that ``odradek cluster up --security sasl_ssl`` writes. Its
security settings may use librdkafka's names (``ssl.ca.location``, ``sasl.username``)
or the Java client's (``ssl.truststore.location`` with PEM, ``sasl.jaas.config``); they
are translated for confluent-kafka (``client_config``) and for Odradek's own protocol
client (``client_security``). Other properties pass through to librdkafka. For
compatibility the option also accepts ``K=V`` (repeatable).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from odradek.config import parse_properties
from odradek.security.client_security import ClientSecurity

# Security properties that only the Java client understands: translated, never passed on.
_SECURITY_KEYS = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.username",
        "sasl.password",
        "sasl.jaas.config",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
        "ssl.truststore.location",
        "ssl.truststore.type",
        "ssl.truststore.password",
        "ssl.keystore.location",
        "ssl.keystore.type",
        "ssl.keystore.password",
    }
)


def add_command_config(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--command-config",
        action="append",
        default=[],
        metavar="FILE",
        help="client properties file (security.protocol, sasl.*, ssl.*), as "
        "Kafka's tools take; K=V pairs are accepted too",
    )


def command_properties(args: argparse.Namespace) -> dict[str, str]:
    props: dict[str, str] = {}
    for item in getattr(args, "command_config", None) or []:
        path = Path(item)
        if path.is_file():
            props.update(parse_properties(path.read_text()))
        elif "=" in item:
            k, v = item.split("=", 1)
            props[k.strip()] = v.strip()
        else:
            raise SystemExit(f"--command-config: {item} is not a file")
    return props


def client_security(args: argparse.Namespace) -> ClientSecurity:
    return ClientSecurity.from_properties(command_properties(args))


def client_config(args: argparse.Namespace) -> dict[str, str]:
    """librdkafka settings for ``--bootstrap-server`` and ``--command-config``."""
    props = command_properties(args)
    conf = {"bootstrap.servers": args.bootstrap_server}
    conf.update({k: v for k, v in props.items() if k not in _SECURITY_KEYS})
    conf.update(ClientSecurity.from_properties(props).librdkafka_config())
    return conf


def admin_client(args: argparse.Namespace) -> Any:
    """A confluent-kafka AdminClient for ``--bootstrap-server`` and ``--command-config``."""
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415 - keep CLI start fast

    # librdkafka takes str values; the stub's dict[str, str | int | float | bool] is invariant.
    conf: dict[str, Any] = client_config(args)
    return AdminClient(conf)
