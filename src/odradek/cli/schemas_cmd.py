"""``odradek schemas list|get|register|check|delete|config --url URL``: a schema registry's
REST API from the command line (this project's ``odradek schema-registry`` or Confluent's).

Answers are printed as JSON; a registry error prints its ``error_code`` and message and
exits 1. A registry with basic authentication (a secured cluster's) is logged in to with
``basic.auth.user.info=USER:PASSWORD`` from ``--command-config``, else with the file's SASL
user and password (the same user as on the cluster); an https one is verified with
``schema.registry.ssl.ca.location``, else ``ssl.ca.location``.
"""

from __future__ import annotations

import argparse
import base64
import json
import ssl
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

from odradek.cli.common import add_command_config, client_config, command_properties
from odradek.cli.schema_acls_cmd import add_acls_parser, run_acls

__all__ = ["add_parser", "RegistryHttpError", "request"]

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryHttpError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status, self.body = status, body


def request(
    url: str,
    method: str,
    path: str,
    body: Any = None,
    timeout: float = 30.0,
    *,
    user_info: str | None = None,
    cafile: str | None = None,
) -> Any:
    """One REST call; ``user_info``: ``USER:PASSWORD`` for basic authentication;
    ``cafile``: the CA of an https registry."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": _CONTENT_TYPE, "Accept": _CONTENT_TYPE}
    if user_info:
        headers["Authorization"] = "Basic " + base64.b64encode(user_info.encode()).decode()
    req = urllib.request.Request(url.rstrip("/") + path, data=data, method=method, headers=headers)
    ctx = ssl.create_default_context(cafile=cafile) if cafile else None
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:
            text = resp.read().decode()
    except urllib.error.HTTPError as e:
        raw = e.read().decode(errors="replace")
        try:
            parsed: Any = json.loads(raw)
        except ValueError:
            parsed = raw
        raise RegistryHttpError(e.code, parsed) from None
    try:
        return json.loads(text)
    except ValueError:
        return text


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("schemas", help="list, get, register, check and delete registry schemas")
    p.add_argument(
        "--url",
        default=None,
        help="the schema registry (default: found with "
        "--bootstrap-server, else http://127.0.0.1:8081)",
    )
    p.add_argument(
        "--bootstrap-server",
        default=None,
        help="find the registry through the cluster: its brokers' zookeeper.connect, "
        "then the primary that registries started with --zookeeper elect",
    )
    p.add_argument(
        "--topic",
        default="_schemas",
        help="the registry's topic (with --bootstrap-server: which registry)",
    )
    add_command_config(p)
    ops = p.add_subparsers(dest="op", metavar="OP", required=True)
    add_acls_parser(ops)

    ls = ops.add_parser("list", help="subjects, or a subject's versions")
    ls.add_argument("subject", nargs="?")
    ls.add_argument("--deleted", action="store_true", help="include soft-deleted ones")

    get = ops.add_parser("get", help="a subject's version (default latest), or --id N")
    get.add_argument("subject", nargs="?")
    get.add_argument("--version", default="latest")
    get.add_argument("--id", type=int, default=None, help="a schema by its global id")

    for name, helptext in (
        ("register", "register a schema under a subject"),
        ("check", "test a schema's compatibility with a subject"),
    ):
        op = ops.add_parser(name, help=helptext)
        op.add_argument("subject")
        op.add_argument("schema_file", help="the schema (file; - for stdin)")
        op.add_argument("--type", default="AVRO", choices=("AVRO", "JSON", "PROTOBUF"))
        op.add_argument(
            "--reference",
            action="append",
            default=[],
            metavar="NAME=SUBJECT:VERSION",
            help="a referenced schema (repeatable)",
        )
        if name == "check":
            op.add_argument("--version", default=None, help="against one version only")

    de = ops.add_parser("delete", help="soft-delete a subject or one version")
    de.add_argument("subject")
    de.add_argument("--version", default=None)
    de.add_argument("--permanent", action="store_true", help="hard delete (after a soft one)")

    cf = ops.add_parser("config", help="show or set a compatibility level")
    cf.add_argument("subject", nargs="?", help="default: the global level")
    cf.add_argument("--set", default=None, metavar="LEVEL", help="e.g. BACKWARD, FULL, NONE")
    p.set_defaults(func=_run)


def _schema_body(args: argparse.Namespace) -> dict[str, Any]:
    text = sys.stdin.read() if args.schema_file == "-" else Path(args.schema_file).read_text()
    body: dict[str, Any] = {"schema": text}
    if args.type != "AVRO":
        body["schemaType"] = args.type
    refs = []
    for r in args.reference:
        name, _, rest = r.partition("=")
        subject, _, version = rest.rpartition(":")
        if not name or not subject or not version.isdigit():
            raise SystemExit(f"--reference {r!r}: want NAME=SUBJECT:VERSION")
        refs.append({"name": name, "subject": subject, "version": int(version)})
    if refs:
        body["references"] = refs
    return body


def _access(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """(basic auth ``USER:PASSWORD``, CA file) from ``--command-config``."""
    props = command_properties(args)
    user_info = props.get("basic.auth.user.info")
    if not user_info and props.get("sasl.username") and props.get("sasl.password"):
        user_info = f"{props['sasl.username']}:{props['sasl.password']}"
    cafile = props.get("schema.registry.ssl.ca.location") or props.get("ssl.ca.location")
    return user_info or None, cafile or None


def _call(args: argparse.Namespace) -> Any:
    url, op = args.url, args.op
    user_info, cafile = _access(args)

    def call(u: str, method: str, path: str, body: Any = None) -> Any:
        return request(u, method, path, body, user_info=user_info, cafile=cafile)

    s = quote(args.subject, safe="") if getattr(args, "subject", None) else None
    if op == "list":
        q = "?deleted=true" if args.deleted else ""
        return call(url, "GET", f"/subjects/{s}/versions{q}" if s else f"/subjects{q}")
    if op == "get":
        if args.id is not None:
            return call(url, "GET", f"/schemas/ids/{args.id}")
        if s is None:
            raise SystemExit("get: give a subject or --id")
        return call(url, "GET", f"/subjects/{s}/versions/{args.version}")
    if op == "register":
        return call(url, "POST", f"/subjects/{s}/versions", _schema_body(args))
    if op == "check":
        path = f"/compatibility/subjects/{s}/versions"
        if args.version:
            path += f"/{args.version}"
        return call(url, "POST", path + "?verbose=true", _schema_body(args))
    if op == "delete":
        q = "?permanent=true" if args.permanent else ""
        if args.version:
            return call(url, "DELETE", f"/subjects/{s}/versions/{args.version}{q}")
        return call(url, "DELETE", f"/subjects/{s}{q}")
    path = f"/config/{s}" if s else "/config"
    if args.set:
        return call(url, "PUT", path, {"compatibility": args.set})
    return call(url, "GET", path + ("?defaultToGlobal=true" if s else ""))


def _registry_url(args: argparse.Namespace) -> str:
    """--url, else the primary found through --bootstrap-server, else the default."""
    if args.url:
        return str(args.url)
    if not args.bootstrap_server:
        return "http://127.0.0.1:8081"
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType  # noqa: PLC0415

    from odradek.schema_registry.election import find_primary  # noqa: PLC0415

    conf: dict[str, Any] = client_config(args)
    admin = AdminClient(conf)
    brokers = admin.list_topics(timeout=15).brokers
    if not brokers:
        raise SystemExit(f"error: no broker answered at {args.bootstrap_server}")
    resource = ConfigResource(ResourceType.BROKER, str(min(brokers)))
    entry = admin.describe_configs([resource])[resource].result(15).get("zookeeper.connect")
    if entry is None or not entry.value:
        raise SystemExit("error: the brokers do not show zookeeper.connect; give --url")
    url = find_primary(entry.value, args.topic)
    if url is None:
        raise SystemExit(
            f"error: no schema registry for {args.topic} elected a primary in ZooKeeper "
            "(start it with --zookeeper, or give --url)"
        )
    return url


def _run(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException  # noqa: PLC0415
    from kazoo.handlers.threading import KazooTimeoutError  # noqa: PLC0415

    if args.op == "acls":  # to ZooKeeper, not to a registry
        return run_acls(args)
    try:
        args.url = _registry_url(args)
    except (KafkaException, KazooTimeoutError) as e:
        print(f"error: finding the registry through {args.bootstrap_server}: {e}", file=sys.stderr)
        return 1
    try:
        result = _call(args)
    except RegistryHttpError as e:
        print(f"error: HTTP {e.status}: {json.dumps(e.body)}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError) as e:
        print(f"error: {args.url}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2))
    if args.op == "check" and isinstance(result, dict) and not result.get("is_compatible"):
        return 1
    return 0
