"""The ``odradek`` command line: one sub-command per area, each in its own module."""

from __future__ import annotations

import argparse
import importlib
import sys

from odradek import __version__

# Each module exposes add_parser(subparsers) and sets args.func.
_SUBCOMMAND_MODULES = (
    "odradek.cli.broker_cmd",
    "odradek.cli.cluster_cmd",
    "odradek.cli.topics_cmd",
    "odradek.cli.perf_cmd",
    "odradek.cli.demo_cmd",
    "odradek.cli.leader_election_cmd",
    "odradek.cli.consumer_groups_cmd",
    "odradek.cli.configs_cmd",
    "odradek.cli.acls_cmd",
    "odradek.cli.chaos_cmd",
    "odradek.cli.lost_records_cmd",
    "odradek.cli.console_cmd",
    "odradek.cli.transactions_cmd",
    "odradek.cli.reassign_partitions_cmd",
    "odradek.cli.zookeeper_security_cmd",
    "odradek.cli.sim_cmd",
    "odradek.cli.schema_registry_cmd",
    "odradek.cli.schemas_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="odradek",
        description="Odradek: a replicated streaming log that speaks the Kafka protocol.",
    )
    parser.add_argument("--version", action="version", version=f"odradek {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError as e:  # a sub-command whose optional dependency is missing
            print(f"odradek: {name} unavailable: {e}", file=sys.stderr)
            continue
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    return int(func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
