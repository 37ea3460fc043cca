"""Hosts as network namespaces: each broker and ZooKeeper server gets its own network
stack, joined to a private bridge by a veth pair (``odradek cluster up --hosts netns``).

Cluster block ``k`` (the same block number :mod:`odradek.cluster.addresses` claims)
owns the private subnet ``10.209.k.0/24`` and every kernel object named with the
prefix ``odx<k>``::

    bridge      odx<k>br          10.209.k.254/24 (the manager's way in)
    namespace   odx<k>-<role>     role: b<i> (broker i), zk<j>, c<n> (clients)
    veth        odx<k>v<role>     bridge side;  odx<k>p<role> inside the namespace

Addresses mirror the loopback layout (broker i on ``.1+i``, ZooKeeper 1 on ``.1``,
ensemble member j >= 2 on ``.200+j``; clients on ``.180+n``), so everything else in
the cluster code is unchanged. No namespace has a default route and nothing is
attached to a real interface: traffic cannot leave the subnet. Linux limits interface
names to 15 bytes; the longest here, ``odx254vzk9``, has 10.

Teardown is *by name*: :func:`teardown` lists namespaces and links and removes every
one that carries this block's prefix, so ``cluster down`` cleans up after a crashed
``up`` as well. Deleting a namespace destroys the veth end inside it and with it the
pair.

Faults (all on objects this module made): :meth:`NetnsHosts.link_down` sets a host's
veth down (the host drops off the network, connections stall as with a pulled cable);
:meth:`NetnsHosts.cut` adds DROP rules inside the two namespaces' own iptables tables
(the host's shared tables are never touched); :meth:`NetnsHosts.shape` puts netem
delay on a host's veth where the kernel has it and an htb rate limit otherwise.

Pure parts (names, addresses, command lists) are separate from :func:`_run` so they
are unit-tested without root.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from odradek.errors import ErrorCode, KafkaError

logger = logging.getLogger(__name__)

__all__ = [
    "MANAGER",
    "SUBNET_PREFIX",
    "NetnsHosts",
    "available",
    "bridge_name",
    "cut_commands",
    "host_commands",
    "endpoint_address",
    "host_address",
    "namespace_name",
    "role_octet",
    "teardown",
    "teardown_commands",
]

SUBNET_PREFIX = "10.209"  # private (RFC 1918); one /24 per cluster block
BRIDGE_OCTET = 254
MANAGER = "host"  # the manager's own namespace, on the host side of the bridge
_ROLE = re.compile(r"(b|zk|c)([0-9]{1,3})")


def _prefix(block: int) -> str:
    if not 1 <= block <= 254:
        raise ValueError(f"block {block} outside 1..254")
    return f"odx{block}"


def role_octet(role: str) -> int:
    """Last address octet for ``b<i>``, ``zk<j>`` or ``c<n>`` (see the module doc)."""
    m = _ROLE.fullmatch(role)
    if m is None:
        raise ValueError(f"bad host role {role!r}: expected b<i>, zk<j> or c<n>")
    kind, n = m.group(1), int(m.group(2))
    if kind == "b" and 1 <= n <= 178:
        return 1 + n
    if kind == "zk" and n == 1:
        return 1
    if kind == "zk" and 2 <= n <= 9:
        return 200 + n
    if kind == "c" and 1 <= n <= 19:
        return 180 + n
    raise ValueError(f"host role {role!r} out of range")


def host_address(block: int, role: str) -> str:
    _prefix(block)
    return f"{SUBNET_PREFIX}.{block}.{role_octet(role)}"


def namespace_name(block: int, role: str) -> str:
    role_octet(role)
    return f"{_prefix(block)}-{role}"


def bridge_name(block: int) -> str:
    return f"{_prefix(block)}br"


def veth_names(block: int, role: str) -> tuple[str, str]:
    """(bridge side, namespace side)."""
    role_octet(role)
    p = _prefix(block)
    return f"{p}v{role}", f"{p}p{role}"


def endpoint_address(block: int, role: str) -> str:
    """A host's address; :data:`MANAGER` is the bridge address, where traffic from the
    manager's own namespace (the chaos scenarios' clients) comes from."""
    if role == MANAGER:
        _prefix(block)
        return f"{SUBNET_PREFIX}.{block}.{BRIDGE_OCTET}"
    return host_address(block, role)


def cut_commands(
    block: int,
    a: str,
    b: str,
    *,
    op: str,
    direction: str = "both",
    probability: float | None = None,
    comment: str | None = None,
) -> list[list[str]]:
    """The iptables commands (``op``: ``-I`` to cut, ``-D`` to heal) that drop packets
    from ``a`` to ``b`` and/or from ``b`` to ``a``.

    Each rule lives in a namespace this block made, never in the host's tables: in the
    receiver's INPUT chain, or, when the receiver is :data:`MANAGER` (the host side of
    the bridge), in the sender's OUTPUT chain. Dropping one direction of TCP also stops
    new connections the other way (the SYN-ACK is lost), as on loopback.
    """
    if op not in ("-I", "-D"):
        raise ValueError(f"op must be -I or -D, not {op!r}")
    pairs = {"both": [(a, b), (b, a)], "a->b": [(a, b)], "b->a": [(b, a)]}.get(direction)
    if pairs is None:
        raise ValueError(f"direction must be both, a->b or b->a, not {direction!r}")
    if a == b:
        raise ValueError("a cut needs two different hosts")
    cmds: list[list[str]] = []
    for src, dst in pairs:
        if dst != MANAGER:
            ns, chain, match = namespace_name(block, dst), "INPUT", "-s"
            peer = endpoint_address(block, src)
        else:
            ns, chain, match = namespace_name(block, src), "OUTPUT", "-d"
            peer = endpoint_address(block, dst)
        cmd = ["ip", "netns", "exec", ns, "iptables", "-w", "5", op, chain, match, f"{peer}/32"]
        if probability is not None:
            if not 0.0 < probability <= 1.0:
                raise ValueError(f"probability {probability} outside (0, 1]")
            if probability < 1.0:
                cmd += [
                    "-m",
                    "statistic",
                    "--mode",
                    "random",
                    "--probability",
                    f"{probability:.5f}",
                ]
        if comment is not None:
            cmd += ["-m", "comment", "--comment", comment]
        cmds.append([*cmd, "-j", "DROP"])
    return cmds


def setup_commands(block: int, roles: Sequence[str]) -> list[list[str]]:
    """The ``ip`` commands that build the bridge and one namespace per role."""
    br = bridge_name(block)
    cmds = [
        ["ip", "link", "add", br, "type", "bridge"],
        ["ip", "addr", "add", f"{SUBNET_PREFIX}.{block}.{BRIDGE_OCTET}/24", "dev", br],
        ["ip", "link", "set", br, "up"],
    ]
    for role in roles:
        cmds += host_commands(block, role)
    return cmds


def host_commands(block: int, role: str) -> list[list[str]]:
    """The ``ip`` commands that add one host (namespace + veth) to an existing bridge."""
    ns = namespace_name(block, role)
    outer, inner = veth_names(block, role)
    return [
        ["ip", "netns", "add", ns],
        ["ip", "-n", ns, "link", "set", "lo", "up"],
        ["ip", "link", "add", outer, "type", "veth", "peer", "name", inner, "netns", ns],
        ["ip", "link", "set", outer, "master", bridge_name(block)],
        ["ip", "link", "set", outer, "up"],
        ["ip", "-n", ns, "addr", "add", f"{host_address(block, role)}/24", "dev", inner],
        ["ip", "-n", ns, "link", "set", inner, "up"],
    ]


def teardown_commands(
    block: int, namespaces: Iterable[str], links: Iterable[str]
) -> list[list[str]]:
    """Delete commands for the existing objects (``ip netns list`` / ``ip link`` names)
    that carry this block's prefix, and nothing else."""
    p = _prefix(block)
    ns_re = re.compile(re.escape(p) + r"-(b|zk|c)[0-9]+")
    link_re = re.compile(re.escape(p) + r"(br|v(b|zk|c)[0-9]+)")
    cmds = [["ip", "netns", "del", ns] for ns in sorted(set(namespaces)) if ns_re.fullmatch(ns)]
    # veths first (their peers may already be gone with the namespace), bridge last.
    own = sorted({ln for ln in links if link_re.fullmatch(ln)}, key=lambda n: (n.endswith("br"), n))
    cmds += [["ip", "link", "del", ln] for ln in own]
    return cmds


def _run(cmd: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise KafkaError(
            ErrorCode.unknown_server_error, f"{' '.join(cmd)}: {r.stderr.strip() or r.returncode}"
        )
    return r


def available() -> str | None:
    """None if namespaces can be made here, else why not (the command and its error)."""
    if os.geteuid() != 0:
        return "not root: network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN"
    probe = f"odxprobe{os.getpid() % 100000}"
    r = _run(["ip", "netns", "add", probe], check=False)
    if r.returncode != 0:
        return f"ip netns add {probe}: {r.stderr.strip()}"
    _run(["ip", "netns", "del", probe], check=False)
    return None


def _existing_namespaces() -> list[str]:
    out = _run(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _existing_links() -> list[str]:
    out = _run(["ip", "-o", "link", "show"], check=False).stdout
    names = []
    for line in out.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@", 1)[0])
    return names


def teardown(block: int) -> list[str]:
    """Remove every namespace, veth and bridge of ``block`` by name (idempotent).
    Returns what it removed."""
    done = []
    for cmd in teardown_commands(block, _existing_namespaces(), _existing_links()):
        r = _run(cmd, check=False)
        if r.returncode == 0:
            done.append(cmd[-1])
        elif "Cannot find" not in r.stderr and "No such" not in r.stderr:
            logger.warning("%s: %s", " ".join(cmd), r.stderr.strip())
    return done


@dataclass
class NetnsHosts:
    """The namespaces of one cluster block."""

    block: int
    roles: list[str] = field(default_factory=list)

    def up(self) -> None:
        teardown(self.block)  # leftovers of a crashed run with the same block
        try:
            for cmd in setup_commands(self.block, self.roles):
                _run(cmd)
        except BaseException:
            teardown(self.block)
            raise

    def down(self) -> list[str]:
        return teardown(self.block)

    def add_host(self, role: str) -> None:
        """One more host on the running bridge (e.g. a broker added for a reassignment).
        Half-made, it is removed again; ``down`` removes it by name like the others."""
        ns = namespace_name(self.block, role)
        try:
            for cmd in host_commands(self.block, role):
                _run(cmd)
        except BaseException:
            _run(["ip", "netns", "del", ns], check=False)
            _run(["ip", "link", "del", veth_names(self.block, role)[0]], check=False)
            raise
        self.roles.append(role)

    def address(self, role: str) -> str:
        return host_address(self.block, role)

    def exec_prefix(self, role: str) -> list[str]:
        """Prefix for a command that must run on host ``role``. ``ip netns exec``
        execs the command, so the pid we record is the process itself."""
        return ["ip", "netns", "exec", namespace_name(self.block, role)]

    # ----------------------------------------------------------------- faults

    def link_down(self, role: str) -> None:
        _run(["ip", "link", "set", veth_names(self.block, role)[0], "down"])

    def link_up(self, role: str) -> None:
        _run(["ip", "link", "set", veth_names(self.block, role)[0], "up"])

    def cut(
        self,
        a: str,
        b: str,
        *,
        direction: str = "both",
        probability: float | None = None,
        comment: str | None = None,
    ) -> None:
        """Partition hosts ``a`` and ``b`` (roles, or :data:`MANAGER`) from each other:
        both directions, or one (``a->b``, ``b->a``); ``probability`` drops only that
        share of the packets (a lossy link)."""
        done: list[list[str]] = []
        try:
            for cmd in cut_commands(
                self.block,
                a,
                b,
                op="-I",
                direction=direction,
                probability=probability,
                comment=comment,
            ):
                _run(cmd)
                done.append(cmd)
        except BaseException:
            # All or nothing, and only what this call added: an identical rule of another
            # cut (no comment) stays.
            for cmd in done:
                _run([("-D" if x == "-I" else x) for x in cmd], check=False)
            raise

    def heal(
        self,
        a: str,
        b: str,
        *,
        direction: str = "both",
        probability: float | None = None,
        comment: str | None = None,
    ) -> None:
        """Remove what :meth:`cut` with the same arguments added (missing rules are
        ignored: healing twice is harmless)."""
        for cmd in cut_commands(
            self.block, a, b, op="-D", direction=direction, probability=probability, comment=comment
        ):
            _run(cmd, check=False)

    def shape(self, role: str, *, delay_ms: int | None = None, rate_kbit: int | None = None) -> str:
        """Slow traffic *to* host ``role`` (egress of its bridge-side veth). Uses netem
        when the kernel has it; otherwise htb (rate only). Returns the qdisc used."""
        dev = veth_names(self.block, role)[0]
        self.unshape(role)
        if delay_ms is not None:
            args = ["delay", f"{delay_ms}ms"]
            if rate_kbit is not None:
                args += ["rate", f"{rate_kbit}kbit"]
            r = _run(["tc", "qdisc", "add", "dev", dev, "root", "netem", *args], check=False)
            if r.returncode == 0:
                return "netem"
            if rate_kbit is None:
                raise KafkaError(
                    ErrorCode.unknown_server_error,
                    f"netem unavailable ({r.stderr.strip()}); only rate limits (htb) work here",
                )
        if rate_kbit is None:
            raise ValueError("shape needs delay_ms or rate_kbit")
        _run(["tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10"])
        _run(
            [
                "tc",
                "class",
                "add",
                "dev",
                dev,
                "parent",
                "1:",
                "classid",
                "1:10",
                "htb",
                "rate",
                f"{rate_kbit}kbit",
                "ceil",
                f"{rate_kbit}kbit",
            ]
        )
        return "htb"

    def unshape(self, role: str) -> None:
        _run(["tc", "qdisc", "del", "dev", veth_names(self.block, role)[0], "root"], check=False)
