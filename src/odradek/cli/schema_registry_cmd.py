"""``odradek schema-registry --bootstrap-server B [--listen http://127.0.0.1:8081]``: a
Confluent-compatible Schema Registry storing its state in the ``_schemas`` topic.

Several instances share one topic; with ``--zookeeper`` they elect a primary that takes
the writes (the others forward them). Without it the instance is the only writer.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

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
    add_command_config(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from odradek.schema_registry.kafka_store import SchemasTopicError  # noqa: PLC0415
    from odradek.schema_registry.server import parse_listener, serve  # noqa: PLC0415
    from odradek.security.client_security import ClientSecurity  # noqa: PLC0415

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
    client_conf = ClientSecurity.from_properties(props).librdkafka_config() if props else None
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
            )
        )
    except SchemasTopicError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"error: cannot serve on {args.listen}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0
