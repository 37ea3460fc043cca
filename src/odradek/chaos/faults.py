"""Faults on real processes and real packets (issue 6 item 1; docs/platform-notes.md, network faults).

* Signals: SIGKILL / SIGTERM / SIGSTOP / SIGCONT of a broker or ZooKeeper node, through
  ``LocalCluster`` (which knows pids and reaps its children).
* Partitions: iptables DROP rules on loopback addresses, one or both directions; every
  node of a ``LocalCluster`` has its own 127.0.k.x address and binds it as the source of
  its outgoing connections, so ``-s``/``-d`` rules cut exactly one link. ZooKeeper (Java)
  cannot bind a source address, so for an ensemble its outgoing packets are matched by
  its cgroup (``-m cgroup --path``).
* Lossy links: the same rules with ``-m statistic --mode random --probability P``.
* Slow links: tc htb on ``lo``, one rate-limited class + u32 filter per destination
  address (netem is not in this kernel).
* On netns hosts (``cluster up --hosts netns``) partitions and slow links are made
  inside the namespaces instead (:mod:`odradek.chaos.netns_faults`); signals are the same.

Safety rules (shared machine): only 127.0.0.0/8 addresses; every rule carries a comment
``odradek-chaos-<pid>-<n>`` and is deleted by its exact spec, never by flushing; tc
objects use a handle unique to this process. Everything still active is removed by
``heal()``, by context-manager exit, at interpreter exit (atexit) and on SIGINT/SIGTERM.
Rules left by a dead process of ours (same comment prefix, pid gone) are removed by
``remove_stale_rules()``. Without root, iptables or tc: ``FaultsUnavailable``.
"""

from __future__ import annotations

import atexit
import ipaddress
import itertools
import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from odradek.cluster.local import LocalCluster

__all__ = [
    "TAG_PREFIX",
    "FaultsUnavailable",
    "IptRule",
    "HtbLink",
    "Fault",
    "IptablesFault",
    "SlowLinkFault",
    "PauseFault",
    "Faults",
    "require_available",
    "partition_rules",
    "new_tag",
    "htb_major",
    "remove_stale_rules",
    "heal_all",
    "tagged_rules",
]

TAG_PREFIX = "odradek-chaos"
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
Direction = Literal["both", "a->b", "b->a"]
Node = str | int  # "zk" / "zk2" / "b3" / 3 (broker id) / "client" (127.0.0.1)


class FaultsUnavailable(RuntimeError):
    """Fault injection needs root, iptables and tc; tests turn this into a skip."""


def require_available(*, need_tc: bool = False) -> None:
    if os.geteuid() != 0:
        raise FaultsUnavailable("fault injection needs root (iptables/tc on lo)")
    if shutil.which("iptables") is None:
        raise FaultsUnavailable("iptables is not installed (apt-get install iptables)")
    if need_tc and shutil.which("tc") is None:
        raise FaultsUnavailable("tc (iproute2) is not installed")
    r = subprocess.run(["iptables", "-w", "5", "-S", "INPUT"], capture_output=True, text=True)
    if r.returncode != 0:
        raise FaultsUnavailable(f"iptables does not work here: {r.stderr.strip()}")


def check_loopback(addr: str) -> str:
    """Only loopback addresses are ever touched (a shared machine's real links are not ours)."""
    if ipaddress.ip_address(addr) not in LOOPBACK:
        raise ValueError(f"{addr} is not a 127.0.0.0/8 address; refusing to touch it")
    return addr


_counter = itertools.count(1)


def new_tag() -> str:
    return f"{TAG_PREFIX}-{os.getpid()}-{next(_counter)}"


# ----------------------------------------------------------------- rule specs (pure)


@dataclass(frozen=True)
class IptRule:
    chain: str  # INPUT for address rules (loopback packets traverse OUTPUT then INPUT)
    tag: str
    src: str | None = None
    dst: str | None = None
    probability: float | None = None  # lossy link
    cgroup: str | None = None  # OUTPUT -m cgroup --path (a process that cannot bind)
    target: str = "DROP"

    def __post_init__(self) -> None:
        for a in (self.src, self.dst):
            if a is not None:
                check_loopback(a)
        if self.src is None and self.dst is None:
            raise ValueError("a rule needs a source or a destination address")
        if self.cgroup is not None and self.chain != "OUTPUT":
            raise ValueError("-m cgroup only sees local sockets on OUTPUT")
        if self.probability is not None and not 0.0 < self.probability <= 1.0:
            raise ValueError("probability must be in (0, 1]")

    def spec(self) -> list[str]:
        s: list[str] = []
        if self.src:
            s += ["-s", f"{self.src}/32"]
        if self.dst:
            s += ["-d", f"{self.dst}/32"]
        if self.cgroup:
            s += ["-m", "cgroup", "--path", self.cgroup]
        if self.probability is not None and self.probability < 1.0:
            s += ["-m", "statistic", "--mode", "random", "--probability", f"{self.probability:.5f}"]
        s += ["-m", "comment", "--comment", self.tag, "-j", self.target]
        return s

    def add_cmd(self) -> list[str]:
        # -I: ahead of anything else in the chain, so an ACCEPT of someone else's
        # cannot bypass the fault.
        return ["iptables", "-w", "5", "-I", self.chain, *self.spec()]

    def delete_cmd(self) -> list[str]:
        return ["iptables", "-w", "5", "-D", self.chain, *self.spec()]


def partition_rules(
    a: str,
    b: str,
    tag: str,
    *,
    direction: Direction = "both",
    probability: float | None = None,
    a_cgroup: str | None = None,
    b_cgroup: str | None = None,
) -> list[IptRule]:
    """DROP rules cutting packets a->b and/or b->a (platform-notes: dropping one direction of TCP
    also breaks new connections the other way, since the SYN-ACK is lost)."""
    if a == b:
        raise ValueError("a partition needs two different addresses")
    rules: list[IptRule] = []
    pairs = {
        "both": [(a, b, a_cgroup), (b, a, b_cgroup)],
        "a->b": [(a, b, a_cgroup)],
        "b->a": [(b, a, b_cgroup)],
    }[direction]
    for src, dst, cg in pairs:
        rules.append(IptRule("INPUT", tag, src=src, dst=dst, probability=probability))
        if cg is not None:
            rules.append(IptRule("OUTPUT", tag, dst=dst, cgroup=cg, probability=probability))
    return rules


def htb_major(pid: int | None = None) -> int:
    """A qdisc major handle unique to this process (16 bits, never 0 or ffff)."""
    return 0xD000 + ((pid if pid is not None else os.getpid()) % 0xFFF)


@dataclass(frozen=True)
class HtbLink:
    """One rate-limited class on ``dev`` and the u32 filter steering ``dst`` into it;
    the filter has its own ``prio`` so it is deleted exactly (u32 handles are opaque)."""

    major: int
    minor: int
    dst: str
    rate: str = "1mbit"
    src: str | None = None
    dev: str = "lo"

    def __post_init__(self) -> None:
        check_loopback(self.dst)
        if self.src is not None:
            check_loopback(self.src)
        if not 1 <= self.minor <= 0xFFFF:
            raise ValueError("minor out of range")

    @property
    def classid(self) -> str:
        return f"{self.major:x}:{self.minor:x}"

    @property
    def prio(self) -> int:
        return self.minor

    def class_add_cmd(self) -> list[str]:
        # burst/quantum >= lo's 64 KiB MTU, else htb cannot schedule a single packet well.
        return [
            "tc",
            "class",
            "add",
            "dev",
            self.dev,
            "parent",
            f"{self.major:x}:",
            "classid",
            self.classid,
            "htb",
            "rate",
            self.rate,
            "ceil",
            self.rate,
            "burst",
            "70k",
            "cburst",
            "70k",
            "quantum",
            "65536",
        ]

    def filter_add_cmd(self) -> list[str]:
        match = ["match", "ip", "dst", f"{self.dst}/32"]
        if self.src:
            match += ["match", "ip", "src", f"{self.src}/32"]
        return [
            "tc",
            "filter",
            "add",
            "dev",
            self.dev,
            "parent",
            f"{self.major:x}:",
            "protocol",
            "ip",
            "prio",
            str(self.prio),
            "u32",
            *match,
            "flowid",
            self.classid,
        ]

    def filter_del_cmd(self) -> list[str]:
        return [
            "tc",
            "filter",
            "del",
            "dev",
            self.dev,
            "parent",
            f"{self.major:x}:",
            "protocol",
            "ip",
            "prio",
            str(self.prio),
        ]

    def class_del_cmd(self) -> list[str]:
        return ["tc", "class", "del", "dev", self.dev, "classid", self.classid]


def htb_root_add_cmd(major: int, dev: str = "lo") -> list[str]:
    # No "default": unclassified traffic bypasses htb at full speed (direct queue).
    return ["tc", "qdisc", "add", "dev", dev, "root", "handle", f"{major:x}:", "htb"]


def htb_root_del_cmd(major: int, dev: str = "lo") -> list[str]:
    return ["tc", "qdisc", "del", "dev", dev, "root", "handle", f"{major:x}:", "htb"]


# ----------------------------------------------------------------- running commands


def _run(cmd: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(list(cmd), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise FaultsUnavailable(
            f"`{shlex.join(cmd)}` failed: {r.stderr.strip() or r.stdout.strip()}"
        )
    return r


def tagged_rules(tag_prefix: str = TAG_PREFIX) -> list[str]:
    """``iptables -S`` lines (filter table) whose comment starts with ``tag_prefix``."""
    out = _run(["iptables", "-w", "5", "-S"], check=False).stdout
    return [
        ln
        for ln in out.splitlines()
        if f"--comment {tag_prefix}" in ln or f'--comment "{tag_prefix}' in ln
    ]


def remove_stale_rules() -> int:
    """Delete rules our tool left behind in a process that no longer exists (a SIGKILLed
    test run); rules of live processes, and everyone else's rules, are left alone."""
    n = 0
    for line in tagged_rules():
        words = shlex.split(line)
        tag = words[words.index("--comment") + 1]
        try:
            pid = int(tag[len(TAG_PREFIX) + 1 :].split("-")[0])
        except ValueError:
            continue
        if pid == os.getpid() or os.path.exists(f"/proc/{pid}"):
            continue
        if words[0] == "-A":
            _run(["iptables", "-w", "5", "-D", *words[1:]], check=False)
            n += 1
    return n


# ----------------------------------------------------------------- active faults

_lock = threading.RLock()
_active: dict[str, Fault] = {}
_handlers_installed = False


def heal_all() -> None:
    """Remove every fault this process still has active (idempotent)."""
    with _lock:
        faults = list(_active.values())
    for f in reversed(faults):
        try:
            f.heal()
        except Exception:  # keep healing the rest; a leftover rule is worse than a log line
            pass


def _on_signal(signum: int, frame: FrameType | None) -> None:
    heal_all()
    prev = _previous.get(signum)
    if callable(prev):
        prev(signum, frame)
    elif prev == signal.SIG_DFL or prev is None:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


_previous: dict[int, Any] = {}


def _install_handlers() -> None:
    global _handlers_installed
    if _handlers_installed:
        return
    atexit.register(heal_all)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            _previous[sig] = signal.getsignal(sig)
            signal.signal(sig, _on_signal)
    _handlers_installed = True


class Fault:
    """An active fault: ``heal()`` (idempotent) or use as a context manager."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.tag = new_tag()
        self.active = False
        self.started = time.time()

    def _register(self) -> None:
        _install_handlers()
        with _lock:
            _active[self.tag] = self
        self.active = True

    def _unregister(self) -> None:
        with _lock:
            _active.pop(self.tag, None)
        self.active = False

    def heal(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Fault:
        return self

    def __exit__(self, *exc: object) -> None:
        self.heal()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {'active' if self.active else 'healed'}>"


class IptablesFault(Fault):
    def __init__(self, name: str, build: Callable[[str], list[IptRule]]) -> None:
        super().__init__(name)
        self.rules = build(self.tag)
        self._added: list[IptRule] = []
        self._register()
        try:
            for r in self.rules:
                _run(r.add_cmd())
                self._added.append(r)
        except BaseException:
            self.heal()
            raise

    def heal(self) -> None:
        with _lock:
            while self._added:
                r = self._added.pop()
                _run(r.delete_cmd(), check=False)
            self._unregister()


class _HtbRoot:
    """The process's one htb root qdisc on lo, shared by its slow links (refcounted)."""

    users = 0
    lock = threading.Lock()

    @classmethod
    def acquire(cls, major: int) -> None:
        with cls.lock:
            if cls.users == 0:
                shown = _run(["tc", "qdisc", "show", "dev", "lo", "root"]).stdout
                mine = f"htb {major:x}: "
                if mine not in shown:
                    first = shown.split()
                    # The default root (noqueue/pfifo with handle 0:) may be replaced;
                    # anyone else's qdisc is not ours to touch.
                    if first and len(first) > 2 and first[2] != "0:":
                        raise FaultsUnavailable(
                            f"lo already has a root qdisc: {shown.strip()} (if it is a "
                            "leftover of a killed chaos run, handle dXXX:, remove it with "
                            "`tc qdisc del dev lo root`)"
                        )
                    _run(htb_root_add_cmd(major))
            cls.users += 1

    @classmethod
    def release(cls, major: int) -> None:
        with cls.lock:
            cls.users = max(0, cls.users - 1)
            if cls.users == 0:
                _run(htb_root_del_cmd(major), check=False)


_minors = itertools.count(0x10)


class SlowLinkFault(Fault):
    def __init__(self, name: str, dst: str, rate: str, src: str | None = None) -> None:
        super().__init__(name)
        self.link = HtbLink(htb_major(), next(_minors), dst, rate, src)
        self._stage = 0
        self._register()
        try:
            _HtbRoot.acquire(self.link.major)
            self._stage = 1
            _run(self.link.class_add_cmd())
            self._stage = 2
            _run(self.link.filter_add_cmd())
            self._stage = 3
        except BaseException:
            self.heal()
            raise

    def heal(self) -> None:
        with _lock:
            if self._stage >= 3:
                _run(self.link.filter_del_cmd(), check=False)
            if self._stage >= 2:
                _run(self.link.class_del_cmd(), check=False)
            if self._stage >= 1:
                _HtbRoot.release(self.link.major)
            self._stage = 0
            self._unregister()


class PauseFault(Fault):
    """SIGSTOP until healed (SIGCONT): a hung process keeps its sockets open."""

    def __init__(self, name: str, stop: Callable[[], None], cont: Callable[[], None]) -> None:
        super().__init__(name)
        self._cont = cont
        self._register()
        try:
            stop()
        except BaseException:
            self.heal()
            raise

    def heal(self) -> None:
        with _lock:
            if self.active:
                self._cont()
            self._unregister()


# ----------------------------------------------------------------- the cluster-bound API


class Faults:
    """Faults on one ``LocalCluster``. ``on_event(kind, detail)`` records each fault and
    heal in the workload history (issue 6 item 2)."""

    def __init__(
        self,
        cluster: LocalCluster,
        on_event: Callable[[str, str], None] | None = None,
        *,
        need_tc: bool = False,
    ) -> None:
        require_available(need_tc=need_tc)
        remove_stale_rules()
        self.cluster = cluster
        self.on_event = on_event or (lambda kind, detail: None)
        self.faults: list[Fault] = []
        # Hosts as namespaces (issue 19): links are cut inside the namespaces, not on lo.
        self.hosts = cluster.netns_hosts() if cluster.hosts == "netns" else None

    # -- naming
    def _parse(self, node: Node) -> tuple[str, int]:
        if isinstance(node, int):
            return "broker", node
        n = node.strip().lower()
        if n == "client":
            return "client", 0
        if n.startswith("zk"):
            return "zk", int(n[2:] or 1)
        if n.startswith("b"):
            return "broker", int(n[1:])
        return "broker", int(n)

    def role(self, node: Node) -> str:
        """The netns host role of ``node`` (``b3``, ``zk1``; the clients: the manager)."""
        from odradek.cluster.netns import MANAGER

        kind, i = self._parse(node)
        if kind == "broker":
            return self.cluster.broker_role(i)
        return MANAGER if kind == "client" else f"zk{i}"

    def address(self, node: Node) -> str:
        kind, i = self._parse(node)
        if kind == "client":
            if self.hosts is not None:
                from odradek.cluster.netns import MANAGER, endpoint_address

                return endpoint_address(self.hosts.block, MANAGER)
            return "127.0.0.1"  # where the scenario's own clients connect from
        if kind == "zk":
            return self.cluster.zookeeper(i).address
        return self.cluster.broker(i).host

    def _cgroup(self, node: Node) -> str | None:
        kind, i = self._parse(node)
        # Only an ensemble member opens connections itself (quorum links); answers to
        # clients already leave from its own address.
        if kind == "zk" and len(self.cluster.zookeeper_nodes) > 1:
            return self.cluster.zookeeper(i).cgroup
        return None

    def nodes(self) -> list[str]:
        return [f"zk{z.id}" if z.id != 1 else "zk" for z in self.cluster.zookeeper_nodes] + [
            f"b{b.id}" for b in self.cluster.brokers
        ]

    def _add(self, f: Fault) -> Fault:
        self.faults.append(f)
        self.on_event("fault", f.name)
        return f

    # -- network
    def partition(
        self, a: Node, b: Node, *, direction: Direction = "both", probability: float | None = None
    ) -> Fault:
        aa, ba = self.address(a), self.address(b)
        if aa == "127.0.0.1" and ba == "127.0.0.1":
            raise ValueError("refusing to cut 127.0.0.1 from itself")
        what = "lossy" if probability is not None else "partition"
        arrow = {"both": "<->", "a->b": "->", "b->a": "<-"}[direction]
        name = f"{what} {a} {arrow} {b}"
        if probability is not None:
            name += f" p={probability}"
        if self.hosts is not None:
            return self._add(self._netns_cut(name, [(a, b, direction)], probability))
        return self._add(
            IptablesFault(
                name,
                lambda tag: partition_rules(
                    aa,
                    ba,
                    tag,
                    direction=direction,
                    probability=probability,
                    a_cgroup=self._cgroup(a),
                    b_cgroup=self._cgroup(b),
                ),
            )
        )

    def lossy(
        self, a: Node, b: Node, probability: float, *, direction: Direction = "both"
    ) -> Fault:
        return self.partition(a, b, direction=direction, probability=probability)

    def isolate(self, node: Node, from_: Iterable[Node] | None = None) -> Fault:
        """Cut ``node`` from every other node of the cluster (or from ``from_``), both ways."""
        me = self.address(node)
        others = (
            list(from_) if from_ is not None else [n for n in self.nodes() if self.address(n) != me]
        )
        name = f"isolate {node} from {','.join(map(str, others))}"
        if self.hosts is not None:
            return self._add(self._netns_cut(name, [(node, o, "both") for o in others]))
        addrs = [(self.address(o), self._cgroup(o)) for o in others]
        mycg = self._cgroup(node)

        def build(tag: str) -> list[IptRule]:
            rules: list[IptRule] = []
            for oa, ocg in addrs:
                rules += partition_rules(me, oa, tag, a_cgroup=mycg, b_cgroup=ocg)
            return rules

        return self._add(IptablesFault(name, build))

    def _netns_cut(
        self, name: str, links: Sequence[tuple[Node, Node, str]], probability: float | None = None
    ) -> Fault:
        from odradek.chaos.netns_faults import NetnsCutFault

        assert self.hosts is not None
        return NetnsCutFault(
            name, self.hosts, [(self.role(a), self.role(b), d) for a, b, d in links], probability
        )

    def slow(self, dst: Node, *, rate: str = "1mbit", src: Node | None = None) -> Fault:
        name = f"slow link to {dst}" + (f" from {src}" if src is not None else "") + f" {rate}"
        if self.hosts is not None:
            from odradek.chaos.netns_faults import NetnsShapeFault

            if src is not None:
                # A veth's qdisc shapes everything into its host; one link alone would
                # need per-source filters there, which nothing here asks for yet.
                raise FaultsUnavailable(
                    "netns hosts: a slow link shapes all traffic into "
                    "a host; a single source is not supported"
                )
            return self._add(NetnsShapeFault(name, self.hosts, self.role(dst), rate))
        return self._add(
            SlowLinkFault(
                name, self.address(dst), rate, self.address(src) if src is not None else None
            )
        )

    # -- processes
    def kill(self, node: Node, sig: int = signal.SIGKILL) -> None:
        kind, i = self._parse(node)
        self.on_event("fault", f"{signal.Signals(sig).name} {node}")
        if kind == "zk":
            self.cluster.stop_zookeeper(i, sig)
        else:
            self.cluster.stop_broker(i, sig)

    def kill_all(self, nodes: Sequence[Node], sig: int = signal.SIGKILL) -> None:
        """Signal every node first, then wait for each: a simultaneous crash (REQ-R22)."""
        from odradek.cluster import procs

        self.on_event("fault", f"{signal.Signals(sig).name} {','.join(map(str, nodes))}")
        for n in nodes:
            kind, i = self._parse(n)
            info = self.cluster.zookeeper(i) if kind == "zk" else self.cluster.broker(i)
            if procs.alive(info.pid, info.start_time):
                procs._send(info.pid or 0, sig)
        for n in nodes:
            kind, i = self._parse(n)
            if kind == "zk":
                self.cluster.stop_zookeeper(i, sig)
            else:
                self.cluster.stop_broker(i, sig)

    def pause(self, node: Node) -> Fault:
        kind, i = self._parse(node)
        if kind == "zk":
            return self._add(
                PauseFault(
                    f"SIGSTOP {node}",
                    lambda: self.cluster.stop_zookeeper(i, signal.SIGSTOP),
                    lambda: self.cluster.start_zookeeper(i),
                )
            )
        return self._add(
            PauseFault(
                f"SIGSTOP {node}",
                lambda: self.cluster.stop_broker(i, signal.SIGSTOP),
                lambda: self.cluster.start_broker(i, wait=False),
            )
        )

    def restart(self, node: Node, *, wait: bool = True, timeout: float = 30.0) -> None:
        """Bring a killed (or paused) node back."""
        kind, i = self._parse(node)
        self.on_event("heal", f"start {node}")
        if kind == "zk":
            self.cluster.start_zookeeper(i, timeout)
        else:
            self.cluster.start_broker(i, timeout, wait=wait)

    def heal(self, fault: Fault) -> None:
        if fault.active:
            fault.heal()
            self.on_event("heal", fault.name)

    def heal_all(self) -> None:
        for f in reversed(self.faults):
            self.heal(f)
        self.faults.clear()

    def __enter__(self) -> Faults:
        return self

    def __exit__(self, *exc: object) -> None:
        self.heal_all()
