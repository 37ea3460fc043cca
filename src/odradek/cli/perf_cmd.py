"""``odradek perf produce|consume``: kafka-producer-perf-test / kafka-consumer-perf-test.

``add_parser(subparsers)`` registers ``perf``; each leaf sets ``func`` (``args.func(args)
-> int`` exit code), the convention ``odradek.cli.main`` dispatches on.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from odradek.cli.common import add_command_config, client_config

__all__ = ["add_parser", "cmd_produce", "cmd_consume"]


def _security(args: argparse.Namespace) -> dict[str, str]:
    """--command-config as librdkafka settings (bootstrap comes from its own option)."""
    conf = client_config(args)
    conf.pop("bootstrap.servers", None)
    return conf


def add_parser(subparsers: Any) -> None:
    perf = subparsers.add_parser("perf", help="producer / consumer performance tests")
    sub = perf.add_subparsers(dest="perf_command", metavar="{produce,consume}")
    sub.required = True

    p = sub.add_parser("produce", help="like kafka-producer-perf-test")
    p.add_argument("--bootstrap-server", required=True, help="host:port[,host:port...]")
    p.add_argument("--topic", required=True)
    p.add_argument("--num-records", type=int, required=True)
    p.add_argument("--record-size", type=int, required=True, help="value size in bytes")
    p.add_argument(
        "--throughput", type=float, default=-1, help="max records/sec; -1 = no limit (default)"
    )
    p.add_argument(
        "--producer-props",
        nargs="*",
        default=[],
        metavar="K=V",
        help="librdkafka producer properties (default acks=1 linger.ms=5)",
    )
    p.add_argument("--reporting-interval", type=float, default=5.0, metavar="SECONDS")
    p.add_argument("--json", action="store_true", help="print a JSON summary last")
    add_command_config(p)
    p.set_defaults(func=cmd_produce)

    c = sub.add_parser("consume", help="like kafka-consumer-perf-test")
    c.add_argument("--bootstrap-server", required=True)
    c.add_argument("--topic", required=True)
    c.add_argument("--messages", type=int, required=True)
    c.add_argument("--consumer-props", nargs="*", default=[], metavar="K=V")
    c.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        help="give up after this many seconds without records",
    )
    c.add_argument("--json", action="store_true", help="print a JSON summary last")
    add_command_config(c)
    c.set_defaults(func=cmd_consume)


def cmd_produce(args: argparse.Namespace) -> int:
    from odradek.perf import parse_props, run_produce

    try:
        props = {**_security(args), **parse_props(args.producer_props)}
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    try:
        summary = run_produce(
            args.bootstrap_server,
            args.topic,
            args.num_records,
            args.record_size,
            throughput=args.throughput,
            producer_props=props,
            report_interval_s=args.reporting_interval,
            out=sys.stdout,
        )
    except (RuntimeError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(summary.line(), flush=True)
    if args.json:
        print(summary.to_json(), flush=True)
    return 0 if summary.errors == 0 else 1


def cmd_consume(args: argparse.Namespace) -> int:
    from odradek.perf import CONSUME_CSV_HEADER, format_consume_csv, parse_props, run_consume

    try:
        props = {**_security(args), **parse_props(args.consumer_props)}
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    try:
        summary = run_consume(
            args.bootstrap_server,
            args.topic,
            args.messages,
            consumer_props=props,
            timeout_s=args.timeout,
        )
    except (RuntimeError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(CONSUME_CSV_HEADER)
    print(format_consume_csv(summary), flush=True)
    if summary.timed_out:
        print(
            f"WARNING: Exiting before consuming the expected number of messages: timeout "
            f"({args.timeout} s) exceeded.",
            file=sys.stderr,
        )
    if args.json:
        print(summary.to_json(), flush=True)
    return 0
