"""``odradek broker --config server.properties``."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "broker",
        help="run one broker in the foreground",
        description="Run one broker with Kafka's server.properties names.",
    )
    p.add_argument("--config", required=True, help="path to server.properties")
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from odradek.broker.main import run_broker  # noqa: PLC0415 - keep CLI start fast

    return run_broker(args.config, args.log_level)
