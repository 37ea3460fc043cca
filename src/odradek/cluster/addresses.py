"""Loopback address blocks, so several local clusters can share one machine.

Cluster ``k`` owns ``127.0.k.0/24``: ZooKeeper node 1 on ``127.0.k.1:2181`` (ensemble
nodes j >= 2 on ``127.0.k.(200+j)``), broker i on ``127.0.k.(1+i):9092``. Every node
has its own address so fault tests can cut single links with iptables (docs/platform-notes.md).

A block is claimed by creating ``/tmp/odradek-addr/<k>.json`` under a global flock.
Since ``odradek cluster up`` exits while the cluster keeps running, a claim cannot be
tied to a lock held by a process; instead it is *stale* -- and may be taken over --
once neither the claiming process nor any process recorded in the owner's
cluster.json for that block is alive. ``127.0.0.x`` (block 0) is never used: ad-hoc
tests and platform-notes examples live there. As a last guard, a block is skipped if any of
its ports is already bound by someone who does not use this protocol.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from odradek.cluster import procs
from odradek.errors import ErrorCode, KafkaError

__all__ = [
    "CLAIM_DIR",
    "BROKER_PORT",
    "METRICS_PORT",
    "CONSOLE_PORT",
    "REGISTRY_PORT",
    "ZK_PORT",
    "MAX_BROKERS",
    "broker_address",
    "zk_address",
    "claim_block",
    "release_block",
]

CLAIM_DIR = Path(os.environ.get("ODRADEK_ADDR_DIR", "/tmp/odradek-addr"))
ZK_PORT = 2181
BROKER_PORT = 9092
METRICS_PORT = 9404  # each broker's metrics.listener, on the broker's own address
CONSOLE_PORT = 8080  # the console, on the block's first address (ZooKeeper node 1's)
REGISTRY_PORT = 8081  # the schema registry of `cluster up`, on the same address
MAX_BROKERS = 198  # 127.0.k.2 .. 127.0.k.199; .200+ are ZooKeeper ensemble members
BLOCKS = range(1, 255)


def zk_address(block: int, node_id: int = 1) -> str:
    return f"127.0.{block}.{1 if node_id == 1 else 200 + node_id}"


def broker_address(block: int, broker_id: int) -> str:
    if not 1 <= broker_id <= MAX_BROKERS:
        raise ValueError(f"broker id {broker_id} outside 1..{MAX_BROKERS}")
    return f"127.0.{block}.{1 + broker_id}"


def block_endpoints(block: int, n_brokers: int, zk_nodes: int) -> list[tuple[str, int]]:
    eps: list[tuple[str, int]] = []
    for j in range(1, zk_nodes + 1):
        eps.append((zk_address(block, j), ZK_PORT))
        if zk_nodes > 1:
            eps += [(zk_address(block, j), 2888), (zk_address(block, j), 3888)]
    eps += [(broker_address(block, i), BROKER_PORT) for i in range(1, n_brokers + 1)]
    eps += [(broker_address(block, i), METRICS_PORT) for i in range(1, n_brokers + 1)]
    eps.append((zk_address(block, 1), CONSOLE_PORT))
    eps.append((zk_address(block, 1), REGISTRY_PORT))
    return eps


def _ports_free(endpoints: Iterable[tuple[str, int]]) -> bool:
    for addr, port in endpoints:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            # REUSEADDR: TIME_WAIT leftovers of a previous cluster are fine, listeners not.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((addr, port))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EADDRNOTAVAIL):
                return False
            raise
        finally:
            s.close()
    return True


@contextmanager
def _global_lock() -> Iterator[None]:
    CLAIM_DIR.mkdir(parents=True, exist_ok=True)
    with open(CLAIM_DIR / ".lock", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _claim_path(block: int) -> Path:
    return CLAIM_DIR / f"{block}.json"


def _claim_live(block: int) -> bool:
    try:
        claim = json.loads(_claim_path(block).read_text())
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return True  # unreadable: be conservative, someone may be writing it
    if procs.alive(claim.get("pid"), claim.get("pid_start")):
        return True
    try:
        state = json.loads((Path(claim["owner"]) / "cluster.json").read_text())
    except (OSError, ValueError, KeyError):
        return False
    if state.get("block") != block:
        return False
    members = list(state.get("brokers", [])) + list(state.get("zookeeper_nodes", []))
    return any(procs.alive(m.get("pid"), m.get("start_time")) for m in members)


def claim_block(
    owner_dir: Path,
    n_brokers: int,
    zk_nodes: int = 1,
    *,
    prefer: int | None = None,
    check_ports: bool = True,
) -> int:
    """Claim a free block for the cluster in ``owner_dir``; ``prefer`` (its previous
    block) is tried first so a restarted cluster keeps its addresses. ``check_ports``
    False: the cluster runs in its own network namespaces (``odradek.cluster.netns``),
    where the block's loopback ports are irrelevant; the claim still reserves the
    block's namespace and link names."""
    owner = str(Path(owner_dir).resolve())
    order = ([prefer] if prefer in BLOCKS else []) + [b for b in BLOCKS if b != prefer]
    with _global_lock():
        for block in order:
            if _claim_live(block) and not _owned_by(block, owner):
                continue
            if check_ports and not _ports_free(block_endpoints(block, n_brokers, zk_nodes)):
                continue
            _claim_path(block).write_text(
                json.dumps(
                    {
                        "owner": owner,
                        "pid": os.getpid(),
                        "pid_start": procs.proc_start_time(os.getpid()),
                    }
                )
            )
            return block
    raise KafkaError(ErrorCode.unknown_server_error, f"no free loopback block in {CLAIM_DIR}")


def _owned_by(block: int, owner: str) -> bool:
    try:
        return json.loads(_claim_path(block).read_text()).get("owner") == owner
    except (OSError, ValueError):
        return False


def release_block(block: int, owner_dir: Path) -> None:
    """Drop the claim if ``owner_dir`` holds it (idempotent)."""
    owner = str(Path(owner_dir).resolve())
    with _global_lock():
        if _owned_by(block, owner):
            try:
                _claim_path(block).unlink()
            except FileNotFoundError:
                pass
