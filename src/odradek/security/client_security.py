"""How a client connects: security protocol, TLS context and SASL credentials.

Built from a Kafka-style client properties file (``client.properties``,
``--command-config``) with either librdkafka's names (``security.protocol``,
``sasl.mechanism``, ``sasl.username``, ``sasl.password``, ``ssl.ca.location``,
``ssl.certificate.location``, ``ssl.key.location``, ``ssl.key.password``,
``ssl.endpoint.identification.algorithm``) or the Java client's
(``sasl.mechanism``, ``sasl.jaas.config``, ``ssl.truststore.location`` with
``ssl.truststore.type=PEM``, ``ssl.keystore.location``). The broker builds one for its
inter-broker listener (``for_inter_broker``). ``odradek.client``, the replica fetcher and
the command-line tools all use it; ``librdkafka_config`` translates it for
confluent-kafka.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from odradek.security.jaas import parse_jaas_config

if TYPE_CHECKING:
    from odradek.config import BrokerConfig

__all__ = ["ClientSecurity", "PLAINTEXT"]


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None
    key_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True
    _context: list = field(default_factory=list, repr=False, compare=False)

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context (built once), or None for PLAINTEXT / SASL_PLAINTEXT."""
        if not self.tls:
            return None
        if self._context:
            return self._context[0]
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if self.ca_location:
            ctx.load_verify_locations(cafile=self.ca_location)
        else:
            ctx.load_default_certs()
        if self.certificate_location:
            ctx.load_cert_chain(
                self.certificate_location, self.key_location, password=self.key_password
            )
        ctx.check_hostname = self.check_hostname
        self._context.append(ctx)
        return ctx

    # ------------------------------------------------------------------ builders
    @staticmethod
    def from_properties(props: dict[str, str]) -> ClientSecurity:
        protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
        if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ValueError(
                f"security.protocol={protocol} is not one of PLAINTEXT, SSL, "
                "SASL_PLAINTEXT, SASL_SSL"
            )
        mech = (props.get("sasl.mechanism") or props.get("sasl.mechanisms") or "").strip()
        user, password = props.get("sasl.username"), props.get("sasl.password")
        if props.get("sasl.jaas.config") and user is None:
            opts = parse_jaas_config(props["sasl.jaas.config"]).options
            user, password = opts.get("username"), opts.get("password")
        if protocol.startswith("SASL_"):
            if not mech:
                mech = "GSSAPI"  # Kafka's default, which Odradek's tools do not speak
            if user is None or password is None:
                raise ValueError(
                    f"security.protocol={protocol} needs sasl.username and "
                    "sasl.password (or sasl.jaas.config)"
                )
        ca = props.get("ssl.ca.location") or props.get("ssl.truststore.location")
        cert = props.get("ssl.certificate.location") or props.get("ssl.keystore.location")
        key = props.get("ssl.key.location") or (
            cert if props.get("ssl.keystore.location") else None
        )
        algo = props.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
        return ClientSecurity(
            protocol,
            mech.upper() or None,
            user,
            password,
            ca,
            cert,
            key,
            props.get("ssl.key.password"),
            check_hostname=algo != "none" and algo != "",
        )

    @staticmethod
    def for_inter_broker(config: BrokerConfig) -> ClientSecurity:
        """The broker as a client of its inter-broker listener on other brokers."""
        from odradek.security import listener_config as lc

        name = lc.inter_broker_listener(config)
        spec = next((s for s in lc.listeners(config) if s.name == name), None)
        protocol = spec.protocol if spec is not None else "PLAINTEXT"
        mech = user = password = None
        if protocol.startswith("SASL_"):
            settings = config.settings(lc.SecuritySettings)
            mech = (settings.sasl_mechanism_inter_broker_protocol or "").upper()
            jaas = lc.jaas_entry(config, name, mech)
            opts = jaas.options if jaas is not None else {}
            user, password = opts.get("username"), opts.get("password")
        sec = ClientSecurity(protocol, mech, user, password)
        if protocol in ("SSL", "SASL_SSL"):
            sec._context.append(lc.client_ssl_context(config, name))
        return sec

    def librdkafka_config(self) -> dict[str, str]:
        """confluent-kafka settings for the same connection."""
        out = {"security.protocol": self.protocol.lower()}
        if self.sasl:
            out.update(
                {
                    "sasl.mechanism": self.sasl_mechanism or "",
                    "sasl.username": self.sasl_username or "",
                    "sasl.password": self.sasl_password or "",
                }
            )
        if self.tls:
            if self.ca_location:
                out["ssl.ca.location"] = self.ca_location
            if self.certificate_location:
                out["ssl.certificate.location"] = self.certificate_location
            if self.key_location:
                out["ssl.key.location"] = self.key_location
            if self.key_password:
                out["ssl.key.password"] = self.key_password
            out["ssl.endpoint.identification.algorithm"] = (
                "https" if self.check_hostname else "none"
            )
        return out


PLAINTEXT = ClientSecurity()
