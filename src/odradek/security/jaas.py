"""Kafka's ``sasl.jaas.config`` values: ``<LoginModule> <flag> key="value" ...;``.

Kafka users configure SASL with JAAS text, for example
``org.apache.kafka.common.security.plain.PlainLoginModule required username="admin"
password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";``. Only the
options matter to Odradek: the broker's own credentials for inter-broker connections
(``username``/``password``) and, for PLAIN, the users it accepts (``user_<name>``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["JaasEntry", "parse_jaas_config"]

_TOKEN = re.compile(r'\s*(?:([A-Za-z0-9_.$-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))|(;))')


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)

    @property
    def plain_users(self) -> dict[str, str]:
        """PlainLoginModule's ``user_<name>="<password>"`` options."""
        return {k[5:]: v for k, v in self.options.items() if k.startswith("user_")}


def parse_jaas_config(text: str) -> JaasEntry:
    """Parse one JAAS login module entry (Kafka accepts exactly one per property)."""
    text = text.strip()
    parts = text.split(None, 2)
    if len(parts) < 2:
        raise ValueError("JAAS config entry must be: <LoginModule> <flag> [options];")
    module, flag = parts[0], parts[1].rstrip(";")
    if flag.lower() not in ("required", "requisite", "sufficient", "optional"):
        raise ValueError(f"Invalid JAAS control flag {flag!r}")
    rest = parts[2] if len(parts) > 2 else (";" if parts[1].endswith(";") else "")
    options: dict[str, str] = {}
    pos = 0
    ended = False
    while pos < len(rest):
        if rest[pos:].strip() == "":
            break
        m = _TOKEN.match(rest, pos)
        if not m or ended:
            raise ValueError("Invalid JAAS config: unexpected text after the options")
        if m.group(4):
            ended = True
        else:
            value = m.group(2) if m.group(2) is not None else m.group(3)
            options[m.group(1)] = re.sub(r"\\(.)", r"\1", value)
        pos = m.end()
    if not ended:
        raise ValueError("Invalid JAAS config: the entry must end with ';'")
    return JaasEntry(module, flag.lower(), options)
