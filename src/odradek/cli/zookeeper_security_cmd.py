"""``odradek zookeeper-security-migration``: Kafka's ``zookeeper-security-migration.sh``
(``kafka.admin.ZkSecurityMigrator``) for an existing cluster.

``--zookeeper.acl secure`` sets Kafka's secure ACLs on every znode of the cluster (all
rights for the authenticated identity, world read except the sensitive roots
``/config/users``, ``/config/brokers``, ``/delegation_token``); ``unsecure`` puts back
``world:anyone`` with all rights. Run it after the brokers were restarted with
``odradek.zookeeper.auth`` (same identity as here) and ``zookeeper.set.acl=true``, as
Kafka's migration guide does: znodes created before keep their old ACLs until then.

Kafka's tool takes the identity from a JAAS ``Client`` section; this one from
``--zookeeper.auth-file FILE`` (one line ``digest:<user>:<password>`` or
``sasl:<user>:<password>``, the broker's ``odradek.zookeeper.auth``) or the
``ODRADEK_ZOOKEEPER_AUTH`` environment variable, never from the command line (which
``ps`` shows to every user).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_parser"]

ENV_AUTH = "ODRADEK_ZOOKEEPER_AUTH"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "zookeeper-security-migration",
        help="set or remove Kafka's secure ACLs on every znode of a cluster",
        description="Like zookeeper-security-migration.sh (ZkSecurityMigrator).",
    )
    p.add_argument(
        "--zookeeper.acl",
        dest="acl",
        required=True,
        type=str.lower,
        choices=["secure", "unsecure"],
        help="secure: creator-all + world-read (creator only for sensitive "
        "paths); unsecure: world:anyone all",
    )
    p.add_argument(
        "--zookeeper.connect", dest="connect", required=True, help="host:port[,host:port][/chroot]"
    )
    p.add_argument(
        "--zookeeper.session.timeout",
        dest="session_timeout",
        type=int,
        default=30000,
        help="ms (default 30000)",
    )
    p.add_argument(
        "--zookeeper.connection.timeout",
        dest="connection_timeout",
        type=int,
        default=30000,
        help="ms (default 30000)",
    )
    p.add_argument(
        "--zookeeper.auth-file",
        dest="auth_file",
        type=Path,
        help=f"file with digest:<user>:<password> (or sasl:...); default ${ENV_AUTH}",
    )
    p.add_argument("--verbose", action="store_true", help="print every znode and its ACL")
    p.set_defaults(func=_run)


def _auth_value(args: argparse.Namespace) -> str | None:
    if args.auth_file is not None:
        return args.auth_file.read_text().strip() or None
    return os.environ.get(ENV_AUTH) or None


def _run(args: argparse.Namespace) -> int:
    from odradek.zk.acls import migrate_acls, parse_zk_auth  # noqa: PLC0415
    from odradek.zk.client import connect_zk  # noqa: PLC0415

    try:
        auth = parse_zk_auth(_auth_value(args))
    except (OSError, ValueError) as e:
        print(f"zookeeper-security-migration: ZooKeeper authentication: {e}", file=sys.stderr)
        return 1
    secure = args.acl == "secure"
    if secure and auth is None:
        # Kafka: "zookeeper.acl can only be secure if a JAAS configuration is provided".
        print(
            "zookeeper-security-migration: --zookeeper.acl secure needs ZooKeeper "
            f"authentication (--zookeeper.auth-file or ${ENV_AUTH})",
            file=sys.stderr,
        )
        return 1
    try:
        zk = connect_zk(
            args.connect,
            source_ip=None,
            session_timeout_s=args.session_timeout / 1000,
            timeout_s=args.connection_timeout / 1000,
            auth=auth,
            secure_acls=secure,
        )
    except Exception as e:  # noqa: BLE001  (kazoo's timeout, connection refused)
        print(
            f"zookeeper-security-migration: cannot connect to {args.connect}: {e}", file=sys.stderr
        )
        return 1
    try:

        def show(path: str, acls: list[Any]) -> None:
            if args.verbose:
                print(f"{path} {[f'{a.id.scheme}:{a.id.id}:{a.perms}' for a in acls]}")

        try:
            n = migrate_acls(zk, secure, on_path=show)
        except Exception as e:  # noqa: BLE001  (NoAuth: another identity owns a znode)
            print(f"zookeeper-security-migration: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
        print(f"Set {args.acl} ACLs on {n} znodes under {args.connect}")
        return 0
    finally:
        zk.stop()
        zk.close()
