"""Network faults between hosts that are network namespaces (``--hosts netns``, issue 19).

On loopback, every node is an address of the one host and a fault is a rule in the
host's iptables or a class on ``lo`` (:mod:`odradek.chaos.faults`). On netns hosts
each node has its own network stack, so a fault lives where a real one would: DROP
rules in the namespaces' own iptables tables (``NetnsHosts.cut``), and a rate limit
on a host's veth (``NetnsHosts.shape``). The host's tables and ``lo`` are never
touched, and deleting a namespace at ``cluster down`` deletes whatever a crashed run
left in it.

The scenarios' own clients run in the manager's namespace and reach the brokers
through the bridge (:data:`odradek.cluster.netns.MANAGER`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from odradek.chaos.faults import Fault
from odradek.cluster.netns import NetnsHosts

__all__ = ["NetnsCutFault", "NetnsShapeFault", "rate_kbit"]

_RATE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(bit|kbit|mbit|gbit)", re.IGNORECASE)
_PER_KBIT = {"bit": 0.001, "kbit": 1.0, "mbit": 1000.0, "gbit": 1_000_000.0}


def rate_kbit(rate: str) -> int:
    """tc's rate words (``400kbit``, ``1mbit``) in kbit/s, at least 1."""
    m = _RATE.fullmatch(rate.strip())
    if m is None:
        raise ValueError(f"bad rate {rate!r}: expected e.g. 400kbit or 1mbit")
    return max(1, round(float(m.group(1)) * _PER_KBIT[m.group(2).lower()]))


class NetnsCutFault(Fault):
    """Cut links between hosts: ``links`` holds (a, b, direction) by host role."""

    def __init__(
        self,
        name: str,
        hosts: NetnsHosts,
        links: Sequence[tuple[str, str, str]],
        probability: float | None = None,
    ) -> None:
        super().__init__(name)
        self._hosts = hosts
        self._probability = probability
        self._made: list[tuple[str, str, str]] = []
        self._register()
        try:
            for a, b, direction in links:
                hosts.cut(a, b, direction=direction, probability=probability, comment=self.tag)
                self._made.append((a, b, direction))
        except BaseException:
            self.heal()
            raise

    def heal(self) -> None:
        while self._made:
            a, b, direction = self._made.pop()
            self._hosts.heal(
                a, b, direction=direction, probability=self._probability, comment=self.tag
            )
        self._unregister()


class NetnsShapeFault(Fault):
    """A slow link into one host: an htb rate limit (or netem) on its veth."""

    def __init__(self, name: str, hosts: NetnsHosts, role: str, rate: str) -> None:
        super().__init__(name)
        self._hosts = hosts
        self._role = role
        self._register()
        try:
            self.qdisc = hosts.shape(role, rate_kbit=rate_kbit(rate))
        except BaseException:
            self.heal()
            raise

    def heal(self) -> None:
        if self.active:
            self._hosts.unshape(self._role)
        self._unregister()
