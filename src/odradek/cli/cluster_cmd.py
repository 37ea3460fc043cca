"""``odradek cluster {up,down,status,stop-broker,start-broker,roll}`` -- the local cluster manager.

``up`` prints bootstrap.servers as its last stdout line so scripts can capture it::

    BOOTSTRAP=$(odradek cluster up --brokers 3 --dir /tmp/c1 | tail -n1)

``stop-broker --signal STOP`` freezes a broker (a hung process: its ZooKeeper session
expires, its connections stall); ``start-broker`` resumes a frozen broker with SIGCONT
and relaunches a dead one on its old address, config and log dir.

Registered by ``odradek.cli.main`` through ``add_parser``; each subcommand sets
``func(args) -> int`` (exit status). Also runnable alone:
``python -m odradek.cli.cluster_cmd up ...``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from odradek.cluster.local import LocalCluster
from odradek.errors import KafkaError

__all__ = ["add_parser", "main"]

SIGNALS = {
    "TERM": signal.SIGTERM,
    "KILL": signal.SIGKILL,
    "STOP": signal.SIGSTOP,
    "INT": signal.SIGINT,
}


def _kv(s: str) -> tuple[str, str]:
    k, eq, v = s.partition("=")
    if not eq or not k:
        raise argparse.ArgumentTypeError(f"expected key=value, got {s!r}")
    return k.strip(), v.strip()


def _existing(args: argparse.Namespace) -> LocalCluster:
    c = LocalCluster(Path(args.dir))
    if not c.state_path.exists():
        raise SystemExit(f"error: no cluster in {args.dir} ({c.state_path} missing)")
    return c


def cmd_up(args: argparse.Namespace) -> int:
    cmd = shlex.split(args.broker_command) if args.broker_command else None
    c = LocalCluster(Path(args.dir), broker_command=cmd)
    c.metrics = not args.no_metrics
    # The schema registry needs real brokers (its _schemas topic) on addresses it can
    # reach: not with a stand-in --broker-command, nor with brokers in namespaces.
    registry = not args.no_schema_registry and cmd is None and args.hosts == "loopback"
    bootstrap = c.up(
        args.brokers,
        dict(args.broker_config or []),
        args.zk_session_timeout_ms,
        zk_nodes=args.zookeepers,
        partitions_default=args.partitions_default,
        timeout=args.timeout,
        security=args.security,
        hosts=args.hosts,
        first_broker_id=args.first_broker_id,
        schema_registry=registry,
    )
    c.close_zk_client()
    print(f"ZooKeeper: {c.zk_connect}", file=sys.stderr)
    for b in c.brokers:
        metrics = f" metrics {b.metrics_url}" if b.metrics_url else ""
        print(f"broker {b.id}: {b.address} pid {b.pid} log {b.log}{metrics}", file=sys.stderr)
    if c.client_properties:
        # Kafka's tools take it as --command-config; confluent-kafka, kcat -F and Spark's
        # kafka.* options take the same settings.
        print(
            f"client properties (admin user, {args.security.upper()}): {c.client_properties}",
            file=sys.stderr,
        )
    if c.schema_registry:
        print(
            f"schema registry: {c.schema_registry['url']} (log {c.schema_registry['log']}; "
            f"the brokers' confluent.schema.registry.url)",
            file=sys.stderr,
        )
    elif not args.no_schema_registry:
        print(
            "schema registry: not started (it needs the default brokers on loopback addresses)",
            file=sys.stderr,
        )
    if not args.no_console:
        try:
            url = c.start_console([Path(r) for r in args.reports] or [c.dir.parent])
            print(f"console: {url} (log {c.dir / 'console.log'})", file=sys.stderr)
            if c.client_properties:  # a secured cluster's console asks for a login
                print(
                    "console login: a SASL user of the cluster (e.g. admin, password in "
                    f"{c.client_properties})",
                    file=sys.stderr,
                )
        except KafkaError as e:  # the cluster is up; the console is an extra
            print(f"console did not start: {e}", file=sys.stderr)
    print(bootstrap, flush=True)
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    c = LocalCluster(Path(args.dir))
    if c.state_path.exists():
        c.down(timeout=args.timeout)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from odradek.cluster.partitions import collect, format_table  # noqa: PLC0415

    c = _existing(args)
    parts = []
    try:
        st = c.status()
        if st["controller"] is not None:
            try:
                parts = collect(
                    c.zk_client(),
                    {b.id: b.log_dir for b in c.brokers},
                    c.bootstrap_servers,
                    c.client_config(),
                )
            except Exception as e:  # noqa: BLE001 - status must still print the rest
                print(f"partitions unavailable: {e}")
        st["partitions"] = [vars(p) for p in parts]
    finally:
        c.close_zk_client()
    if args.json:
        print(json.dumps(st, indent=2))
        return 0
    print(f"cluster {st['dir']}  bootstrap.servers={st['bootstrap_servers']}")
    if c.client_properties:
        print(f"security {c.security}  client properties {c.client_properties}")
    for z in st["zookeeper"]:
        mode = z["mode"] or "-"
        print(
            f"zookeeper {z['id']}  {z['address']}:{z['port']}  pid {z['pid']}  {z['state']}  mode={mode}"
        )
    for b in st["brokers"]:
        reg = {True: "registered", False: "not-registered", None: "registered=?"}[b["registered"]]
        print(f"broker {b['id']}  {b['address']}  pid {b['pid']}  {b['state']}  {reg}")
    ctrl = st["controller"]
    print(f"controller {ctrl if ctrl is not None else 'none'}")
    if c.console:
        print(f"console {c.console['url']}  pid {c.console['pid']}")
    if c.schema_registry:
        print(f"schema registry {c.schema_registry['url']}  pid {c.schema_registry['pid']}")
    for line in format_table(parts):
        print(line)
    return 0


def cmd_health(args: argparse.Namespace) -> int:
    """rpk-style health; exit 0 only when healthy. ``--wait S`` polls until healthy
    (or S seconds passed), so scripts can wait on a cluster."""
    import time  # noqa: PLC0415

    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    from odradek.cluster.health import assess, fetch_view, format_report  # noqa: PLC0415

    bootstrap, known, c = args.bootstrap_server, [], None
    if args.dir:
        c = _existing(args)
        bootstrap = bootstrap or c.bootstrap_servers
        known = [b.id for b in c.brokers]
    if not bootstrap:
        raise SystemExit("error: give --bootstrap-server or --dir")
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, "logger": _quiet_logger()})
    deadline = time.monotonic() + max(args.wait, 0.0)
    while True:
        try:
            view = fetch_view(admin, args.timeout, known)
            if c is not None:  # a dead or frozen process is down, registered or not
                view.known_down = {b.id for b in c.brokers if c.broker_state(b.id) != "running"}
            report = assess(view)
            lines = format_report(report)
            healthy = report.healthy
        except Exception as e:  # noqa: BLE001 - an unreachable cluster is unhealthy
            lines, healthy = [f"cluster unreachable at {bootstrap}: {e}"], False
        if healthy or time.monotonic() >= deadline:
            break
        time.sleep(1.0)
    print("\n".join(lines))
    return 0 if healthy else 1


def _quiet_logger() -> object:
    """librdkafka logs (broker down: connection refused) would drown the report."""
    import logging  # noqa: PLC0415

    lg = logging.getLogger("odradek.cli.health.librdkafka")
    lg.addHandler(logging.NullHandler())
    lg.propagate = False
    return lg


def cmd_stop_broker(args: argparse.Namespace) -> int:
    c = _existing(args)
    c.stop_broker(args.broker_id, SIGNALS[args.signal], timeout=args.timeout)
    print(f"broker {args.broker_id}: {c.broker_state(args.broker_id)}")
    return 0


def cmd_start_broker(args: argparse.Namespace) -> int:
    c = _existing(args)
    try:
        c.start_broker(args.broker_id, timeout=args.timeout, wait=not args.no_wait)
    finally:
        c.close_zk_client()
    b = c.broker(args.broker_id)
    print(f"broker {b.id}: {c.broker_state(b.id)} pid {b.pid} {b.address}")
    return 0


def cmd_roll(args: argparse.Namespace) -> int:
    from odradek.cluster import roll  # noqa: PLC0415

    if args.print_steps:
        if args.dir:
            c = _existing(args)
            hosts = [(b.id, b.host) for b in c.brokers]
            bootstrap = c.bootstrap_servers
        else:
            hosts = [(i, h) for i, h in enumerate(args.hosts.split(","), start=1)]
            bootstrap = ",".join(f"{h}:9092" for _, h in hosts)
        print(roll.procedure_text(hosts, bootstrap))
        return 0
    if not args.dir:
        raise SystemExit("error: --dir is required unless --print-steps")
    c = _existing(args)
    try:
        roll.roll(c, isr_timeout=args.timeout, say=lambda m: print(m, flush=True))
    finally:
        c.close_zk_client()
    return 0


def cmd_add_broker(args: argparse.Namespace) -> int:
    c = _existing(args)
    try:
        b = c.add_broker(dict(args.broker_config or []), timeout=args.timeout)
    finally:
        c.close_zk_client()
    print(f"broker {b.id}: {c.broker_state(b.id)} pid {b.pid} {b.address}")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("cluster", help="run a local ZooKeeper + N brokers cluster")
    sub = p.add_subparsers(dest="cluster_command", required=True)

    up = sub.add_parser("up", help="start ZooKeeper and N brokers; prints bootstrap.servers")
    up.add_argument("--brokers", type=int, required=True, help="number of brokers (ids 1..N)")
    up.add_argument(
        "--first-broker-id",
        type=int,
        default=1,
        help="id of the first broker (default 1; 0 as Kafka's tests assume)",
    )
    up.add_argument(
        "--dir", required=True, help="cluster directory (configs, logs, data, cluster.json)"
    )
    up.add_argument(
        "--partitions-default", type=int, default=None, help="num.partitions for the brokers"
    )
    up.add_argument(
        "--zk-session-timeout-ms", type=int, default=6000, help="zookeeper.session.timeout.ms"
    )
    up.add_argument("--zookeepers", type=int, default=1, help="ZooKeeper ensemble size (default 1)")
    up.add_argument(
        "--security",
        choices=("plaintext", "sasl_ssl"),
        default="plaintext",
        help="sasl_ssl: TLS + SCRAM listeners, ACLs, an admin super user and "
        "DIR/client.properties (default plaintext)",
    )
    up.add_argument(
        "--broker-config",
        type=_kv,
        action="append",
        metavar="K=V",
        help="extra server.properties entry (repeatable)",
    )
    up.add_argument(
        "--broker-command",
        default=None,
        help="command that runs a broker, config path appended (default: python -m odradek broker --config)",
    )
    up.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the cluster")
    up.add_argument(
        "--no-metrics",
        action="store_true",
        help="no metrics.listener on the brokers (default: one per broker)",
    )
    up.add_argument("--no-console", action="store_true", help="do not start the web console")
    up.add_argument(
        "--no-schema-registry",
        action="store_true",
        help="do not start the schema registry (default: one, on the block's first "
        "address, port 8081, and the brokers' confluent.schema.registry.url)",
    )
    up.add_argument(
        "--reports",
        action="append",
        default=[],
        metavar="DIR",
        help="chaos report directories for the console (default: DIR's parent)",
    )
    up.add_argument(
        "--hosts",
        choices=("loopback", "netns"),
        default="loopback",
        help="loopback: every node on its own 127.0.k.x address (default); netns (root): "
        "every node in its own network namespace on a private bridge, 10.209.k.0/24",
    )
    up.set_defaults(func=_guarded(cmd_up))

    down = sub.add_parser("down", help="stop every broker (TERM, then KILL) and ZooKeeper")
    down.add_argument("--dir", required=True)
    down.add_argument("--timeout", type=float, default=15.0, help="seconds before SIGKILL")
    down.set_defaults(func=_guarded(cmd_down))

    st = sub.add_parser("status", help="brokers: address, pid, alive, registered; controller")
    st.add_argument("--dir", required=True)
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=_guarded(cmd_status))

    he = sub.add_parser(
        "health",
        help="rpk-style health: controller, nodes down, leaderless, "
        "under-replicated and under-min-ISR partitions; exit 0 only if healthy",
    )
    he.add_argument("--bootstrap-server", default=None, help="any broker(s) of the cluster")
    he.add_argument(
        "--dir", default=None, help="a local cluster's directory (its brokers count as known nodes)"
    )
    he.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="S",
        help="poll until healthy, at most S seconds (default: check once)",
    )
    he.add_argument("--timeout", type=float, default=10.0, help="seconds per request")
    he.set_defaults(func=_guarded(cmd_health))

    sb = sub.add_parser(
        "stop-broker", help="TERM (graceful), KILL (crash) or STOP (freeze) a broker"
    )
    sb.add_argument("--dir", required=True)
    sb.add_argument("--broker-id", type=int, required=True)
    sb.add_argument("--signal", choices=sorted(SIGNALS), default="TERM")
    sb.add_argument("--timeout", type=float, default=30.0, help="TERM: seconds before SIGKILL")
    sb.set_defaults(func=_guarded(cmd_stop_broker))

    ab = sub.add_parser("add-broker", help="start one more broker (next id and address)")
    ab.add_argument("--dir", required=True)
    ab.add_argument(
        "--broker-config",
        action="append",
        type=_kv,
        metavar="K=V",
        help="server.properties override for the new broker",
    )
    ab.add_argument("--timeout", type=float, default=30.0)
    ab.set_defaults(func=_guarded(cmd_add_broker))

    rb = sub.add_parser(
        "start-broker", help="resume (SIGCONT) a frozen broker or relaunch a dead one"
    )
    rb.add_argument("--dir", required=True)
    rb.add_argument("--broker-id", type=int, required=True)
    rb.add_argument("--timeout", type=float, default=30.0)
    rb.add_argument(
        "--no-wait", action="store_true", help="do not wait for TCP + ZooKeeper registration"
    )
    rb.set_defaults(func=_guarded(cmd_start_broker))

    ro = sub.add_parser(
        "roll",
        help="rolling restart: full ISR, controlled shutdown, restart, full ISR, next broker",
    )
    ro.add_argument("--dir", default=None, help="the local cluster to roll")
    ro.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for a full ISR")
    ro.add_argument(
        "--print-steps",
        action="store_true",
        help="print the procedure for brokers run by systemd on real hosts instead",
    )
    ro.add_argument(
        "--hosts",
        default="host1,host2,host3",
        help="with --print-steps and no --dir: broker hosts in broker-id order",
    )
    ro.set_defaults(func=_guarded(cmd_roll))


def _guarded(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Operator-facing errors (KafkaError, e.g. a broker that failed to start) become a
    message and exit status 1 instead of a traceback."""

    def wrapper(args: argparse.Namespace) -> int:
        try:
            return int(fn(args))
        except KafkaError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1

    return wrapper


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="odradek")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
