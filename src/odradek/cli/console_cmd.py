"""``odradek console --bootstrap-server B [--listen 127.0.0.1:8080]``: the web console.

Brokers, topics and partitions (live), consumer groups and lag, a message browser and
the chaos reports; consumer lag for Prometheus at ``/metrics``. ``--cluster-dir``
(a local cluster from ``odradek cluster up``) adds each broker's metrics (LEO, byte
rates) and process liveness. Logs (librdkafka's included) go to ``--log-file``.
With a SASL ``--command-config`` (a secured cluster) every page asks for a login with a
user of the cluster, and shows and reads what that user may (``console.auth``).
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
    p = sub.add_parser(
        "console", help="web console: brokers, topics, groups, messages, chaos reports (live)"
    )
    p.add_argument(
        "--bootstrap-server", default=None, help="any broker(s) (default: from --cluster-dir)"
    )
    p.add_argument("--listen", default="127.0.0.1:8080", help="HOST:PORT to serve on")
    p.add_argument(
        "--cluster-dir",
        default=None,
        help="a local cluster's directory: broker metrics and liveness",
    )
    p.add_argument(
        "--reports",
        action="append",
        default=[],
        metavar="DIR",
        help="where to look for chaos reports (repeatable; default: .)",
    )
    # Defaults: console.collector.Cadence (docs/console.md says what each one costs).
    p.add_argument(
        "--refresh",
        type=float,
        default=None,
        help="seconds between updates of the pages open in a browser: "
        "Metadata, the open topic's offsets, the open group (default 2)",
    )
    p.add_argument(
        "--lists-refresh",
        type=float,
        default=None,
        help="seconds between reads of every partition's offsets and every "
        "group while a topics or groups list is open (default 5)",
    )
    p.add_argument(
        "--background",
        type=float,
        default=None,
        help="seconds between rounds with no page open (everything, for "
        "/health and the lag in /metrics), and between scrapes of the "
        "brokers' /metrics (default 15)",
    )
    p.add_argument(
        "--log-file",
        default=None,
        help="log file (default: CLUSTER_DIR/console.log or ./odradek-console.log)",
    )
    p.add_argument("--verbose", action="store_true", help="also log to the terminal")
    add_command_config(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from odradek.console.collector import Cadence  # noqa: PLC0415
    from odradek.console.server import parse_listen, serve  # noqa: PLC0415

    cluster_dir = Path(args.cluster_dir).resolve() if args.cluster_dir else None
    bootstrap = args.bootstrap_server
    if bootstrap is None and cluster_dir is not None:
        import json  # noqa: PLC0415

        bootstrap = json.loads((cluster_dir / "cluster.json").read_text())["bootstrap_servers"]
    if not bootstrap:
        print("error: give --bootstrap-server or --cluster-dir", file=sys.stderr)
        return 2
    try:
        host, port = parse_listen(args.listen)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    log_file = (
        Path(args.log_file)
        if args.log_file
        else (cluster_dir / "console.log" if cluster_dir else Path("odradek-console.log"))
    )
    handlers: list[logging.Handler] = [logging.FileHandler(log_file)]
    if args.verbose:
        handlers.append(logging.StreamHandler(sys.stderr))
    logging.basicConfig(
        level=logging.INFO,
        handlers=handlers,
        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s",
    )
    reports = [Path(r) for r in args.reports] or [Path(".")]
    print(f"console: http://{host}:{port}/  (cluster {bootstrap}; logs {log_file})", flush=True)
    try:
        asyncio.run(
            serve(
                bootstrap,
                host,
                port,
                cluster_dir=cluster_dir,
                reports=reports,
                cadence=Cadence(
                    **{
                        k: v
                        for k, v in (
                            ("refresh_s", args.refresh),
                            ("lists_s", args.lists_refresh),
                            ("background_s", args.background),
                        )
                        if v is not None
                    }
                ),
                client_props=command_properties(args),
            )
        )
    except OSError as e:
        print(f"error: cannot serve on {args.listen}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0
