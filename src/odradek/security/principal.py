"""Kafka principals: ``User:alice``, ``User:CN=broker1,O=Odradek``, ``User:ANONYMOUS``.

Kafka's ``DefaultKafkaPrincipalBuilder`` gives a SASL client ``User:<authorization id>``,
a TLS client with a certificate ``User:<subject DN in RFC 2253 form>`` (with the default
``ssl.principal.mapping.rules=DEFAULT``) and every other client ``User:ANONYMOUS``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ANONYMOUS",
    "KafkaPrincipal",
    "WILDCARD_PRINCIPAL",
    "parse_principal",
    "principal_from_certificate",
]


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"


ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")
WILDCARD_PRINCIPAL = KafkaPrincipal("User", "*")


def parse_principal(text: str) -> KafkaPrincipal:
    """``"User:alice"`` -> KafkaPrincipal (Kafka's SecurityUtils.parseKafkaPrincipal)."""
    ptype, sep, name = text.partition(":")
    if not sep or not ptype or not name:
        raise ValueError(f"expected a string in format principalType:principalName but got {text}")
    return KafkaPrincipal(ptype, name)


def principal_from_certificate(der: bytes | None) -> KafkaPrincipal:
    """The principal of a TLS peer: its certificate's subject as RFC 2253 (Java's
    ``X500Principal.getName()``: most specific RDN first), or ANONYMOUS without one."""
    if not der:
        return ANONYMOUS
    from cryptography import x509  # imported lazily: only TLS listeners with client auth

    cert = x509.load_der_x509_certificate(der)
    return KafkaPrincipal("User", cert.subject.rfc4514_string())
