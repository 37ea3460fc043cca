"""Pieces shared by the commands that talk to brokers as a Kafka client."""

from __future__ import annotations

import argparse
from typing import Any


def add_command_config(p: argparse.ArgumentParser) -> None:
    """Kafka tools' ``--command-config``: extra client properties (here, repeated K=V)."""
    p.add_argument("--command-config", action="append", default=[], metavar="K=V",
                   help="extra client properties")


def admin_client(args: argparse.Namespace) -> Any:
    """A confluent-kafka AdminClient for ``--bootstrap-server`` and ``--command-config``."""
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415 - keep CLI start fast

    conf = {"bootstrap.servers": args.bootstrap_server}
    conf.update(dict(kv.split("=", 1) for kv in args.command_config))
    return AdminClient(conf)
