"""``odradek schema-registry --bootstrap-server B [--listen http://127.0.0.1:8081]``: a
Confluent-compatible Schema Registry storing its state in the ``_schemas`` topic.

Several instances share one topic; with ``--zookeeper`` they elect a primary that takes
the writes (the others forward them). Without it the instance is the only writer.

On a secured cluster (a ``--command-config`` with SASL) requests need HTTP basic
authentication with a SCRAM user of the cluster (Confluent's ``authentication.method=
BASIC``) and ACLs on the ``Subject`` and ``Registry`` resources; ``--listen https://...``
with ``--ssl-keystore-location`` serves TLS.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from odradek.cli.common import add_command_config, command_properties

__all__ = ["add_parser"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("schema-registry", help="Confluent-compatible schema registry (REST API v1)")
    p.add_argument("--bootstrap-server", required=True, help="any broker(s) of the cluster")
    p.add_argument("--listen", default="http://127.0.0.1:8081", help="http://HOST:PORT")
    p.add_argument(
        "--zookeeper",
        default=None,
        help="ZooKeeper connect string: elect one primary among several instances",
    )
    p.add_argument(
        "--advertised-url", default=None, help="URL the other instances forward writes to"
    )
    p.add_argument("--topic", default="_schemas", help="the compacted topic holding schemas")
    p.add_argument(
        "--group",
        default=None,
        help="instances electing one primary share it (default: the topic's name, so "
        "registries on different topics never elect each other)",
    )
    p.add_argument("--log-file", default=None, help="log file (default: the terminal)")
    p.add_argument(
        "--authentication-method",
        choices=("NONE", "BASIC"),
        default=None,
        help="Confluent's authentication.method: BASIC checks every request's user and "
        "password against the cluster's SCRAM credentials (needs --zookeeper); default: "
        "BASIC when --command-config uses SASL, else NONE",
    )
    p.add_argument(
        "--authentication-realm",
        default="SchemaRegistry",
        help="Confluent's authentication.realm: the realm of the 401's WWW-Authenticate",
    )
    p.add_argument(
        "--super-users",
        default=None,
        help="principals allowed everything, ';'-separated as Kafka's super.users "
        "(default: the --command-config user)",
    )
    p.add_argument(
        "--allow-everyone-if-no-acl-found",
        action="store_true",
        help="as the broker setting: a subject without any ACL is open to every user",
    )
    p.add_argument(
        "--zookeeper-auth-file",
        default=None,
        help="a file holding digest:USER:PASSWORD or sasl:USER:PASSWORD (the brokers' "
        "odradek.zookeeper.auth): needed to read SCRAM credentials under zookeeper.set.acl",
    )
    p.add_argument(
        "--ssl-keystore-location",
        default=None,
        help="PEM file with the certificate chain and private key of an https listener "
        "(Confluent's ssl.keystore.location with ssl.keystore.type=PEM)",
    )
    p.add_argument("--ssl-key-password", default=None, help="the private key's password")
    p.add_argument(
        "--ssl-truststore-location",
        default=None,
        help="PEM CA file to verify the other instances' https listeners (forwarding)",
    )
    add_command_config(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from odradek.schema_registry.kafka_store import SchemasTopicError  # noqa: PLC0415
    from odradek.schema_registry.server import (  # noqa: PLC0415
        SecurityOptions,
        parse_listener,
        serve,
    )
    from odradek.security.client_security import ClientSecurity  # noqa: PLC0415
    from odradek.zookeeper_auth import parse_zk_auth  # noqa: PLC0415

    try:
        parse_listener(args.listen)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    handler: logging.Handler = (
        logging.FileHandler(args.log_file) if args.log_file else logging.StreamHandler()
    )
    logging.basicConfig(
        level=logging.INFO,
        handlers=[handler],
        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s",
    )
    props = command_properties(args)
    client = ClientSecurity.from_properties(props) if props else None
    client_conf = client.librdkafka_config() if client is not None else None
    try:
        zk_auth = (
            parse_zk_auth(Path(args.zookeeper_auth_file).read_text().strip())
            if args.zookeeper_auth_file
            else None
        )
    except (OSError, ValueError) as e:
        print(f"error: --zookeeper-auth-file: {e}", file=sys.stderr)
        return 2
    sasl_user = client.sasl_username if client is not None and client.sasl else None
    method = args.authentication_method or ("BASIC" if sasl_user else "NONE")
    if args.super_users is not None:
        super_users = [p.strip() for p in args.super_users.split(";") if p.strip()]
    else:
        super_users = [f"User:{sasl_user}"] if sasl_user else []
    security = SecurityOptions(
        authentication_method=method,
        realm=args.authentication_realm,
        super_users=super_users,
        allow_everyone_if_no_acl_found=args.allow_everyone_if_no_acl_found,
        zk_auth=zk_auth,
        keystore=args.ssl_keystore_location,
        key_password=args.ssl_key_password,
        truststore=args.ssl_truststore_location,
    )
    print(f"schema registry: {args.listen} (cluster {args.bootstrap_server})", flush=True)
    try:
        asyncio.run(
            serve(
                args.bootstrap_server,
                args.listen,
                zookeeper=args.zookeeper,
                advertised=args.advertised_url,
                topic=args.topic,
                group=args.group,
                client_conf=client_conf,
                security=security,
            )
        )
    except (SchemasTopicError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"error: cannot serve on {args.listen}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0
