"""Listeners and their security settings, read the way Kafka reads them.

* ``listeners`` / ``advertised.listeners``: ``NAME://host:port,...``; each name maps to a
  security protocol through ``listener.security.protocol.map`` (PLAINTEXT, SSL,
  SASL_PLAINTEXT, SASL_SSL).
* ``inter.broker.listener.name`` names the listener brokers use between themselves; when
  unset, it is the listener named after ``security.inter.broker.protocol`` (Kafka's
  rule; setting both is an error).
* Per-listener settings: ``listener.name.<name>.<setting>`` wins over ``<setting>``
  (``ssl.keystore.location``, ``ssl.client.auth``, ``sasl.enabled.mechanisms``, ...);
  JAAS text is looked up as ``listener.name.<name>.<mechanism>.sasl.jaas.config``, then
  ``listener.name.<name>.sasl.jaas.config``, then ``sasl.jaas.config``.
* Key material is PEM only (``ssl.keystore.type=PEM`` / ``ssl.truststore.type=PEM``):
  a file (``ssl.keystore.location``: private key and certificate chain;
  ``ssl.truststore.location``: CA certificates) or the PEM text itself
  (``ssl.keystore.key`` + ``ssl.keystore.certificate.chain``,
  ``ssl.truststore.certificates``). ``ssl.key.password`` decrypts an encrypted key.

``listener_security_errors`` lists every reason a broker must not start with its
settings, so that a listener is never served with less security than configured.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from odradek.configdefs import parse_list, setting
from odradek.security.jaas import JaasEntry, parse_jaas_config
from odradek.security.private_files import private_temp_file
from odradek.security.sasl_server import SUPPORTED_MECHANISMS

if TYPE_CHECKING:
    from odradek.config import BrokerConfig

__all__ = [
    "ListenerSpec",
    "SECURITY_PROTOCOLS",
    "advertised_listeners",
    "client_ssl_context",
    "enabled_mechanisms",
    "inter_broker_listener",
    "jaas_entry",
    "listener_security_errors",
    "listener_setting",
    "listeners",
    "protocol_map",
    "server_ssl_context",
]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
_TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    name: str
    host: str
    port: int
    protocol: str

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class SecuritySettings:
    """The broker-wide security settings (names and defaults: the table); the
    per-listener TLS and SASL ones are read with ``listener_setting``."""

    listener_security_protocol_map: str = setting("listener.security.protocol.map")
    inter_broker_listener_name: str | None = setting("inter.broker.listener.name")
    security_inter_broker_protocol: str = setting("security.inter.broker.protocol")
    sasl_mechanism_inter_broker_protocol: str = setting("sasl.mechanism.inter.broker.protocol")
    authorizer_class_name: str = setting("authorizer.class.name")
    ssl_principal_mapping_rules: str = setting("ssl.principal.mapping.rules")


def protocol_map(config: BrokerConfig) -> dict[str, str]:
    out: dict[str, str] = {}
    settings = config.settings(SecuritySettings)
    for item in parse_list(settings.listener_security_protocol_map):
        name, sep, proto = item.partition(":")
        if not sep:
            raise ValueError("listener.security.protocol.map: expected NAME:PROTOCOL,...")
        out[name.strip().upper()] = proto.strip().upper()
    return out


def _specs(config: BrokerConfig, value: str, key: str) -> list[ListenerSpec]:
    from odradek.config import parse_listeners

    pmap = protocol_map(config)
    return [
        ListenerSpec(name, host, port, pmap.get(name, ""))
        for name, host, port in parse_listeners(value, key)
    ]


def listeners(config: BrokerConfig) -> list[ListenerSpec]:
    return _specs(config, config.listeners, "listeners")


def advertised_listeners(config: BrokerConfig) -> list[ListenerSpec]:
    if config.advertised_listeners:
        return _specs(config, config.advertised_listeners, "advertised.listeners")
    return listeners(config)


def inter_broker_listener(config: BrokerConfig) -> str:
    settings = config.settings(SecuritySettings)
    name = settings.inter_broker_listener_name
    if name:
        return name.strip().upper()
    return (settings.security_inter_broker_protocol or "PLAINTEXT").strip().upper()


def listener_setting(config: BrokerConfig, listener: str, key: str) -> str | None:
    """``listener.name.<listener>.<key>`` if set, else ``<key>`` (raw or default)."""
    return config.listener_value(listener, key)


def enabled_mechanisms(config: BrokerConfig, listener: str) -> tuple[str, ...]:
    return tuple(
        m.upper()
        for m in parse_list(listener_setting(config, listener, "sasl.enabled.mechanisms") or "")
    )


def jaas_entry(config: BrokerConfig, listener: str, mechanism: str) -> JaasEntry | None:
    key = "sasl.jaas.config"
    for value in (
        config.listener_override(listener, key, mechanism),
        config.listener_override(listener, key),
        config.text(key),
    ):
        if value:
            return parse_jaas_config(value)
    return None


# ---------------------------------------------------------------------- TLS contexts
def _load_keystore(ctx: ssl.SSLContext, config: BrokerConfig, listener: str) -> bool:
    """Load the listener's keystore into ``ctx``; False when none is set. Inline PEM
    (ssl.keystore.key + certificate.chain) goes through a private temporary file, removed
    once loaded, because Python's ssl loads key material from files only."""
    get = lambda k: listener_setting(config, listener, k)  # noqa: E731
    location = get("ssl.keystore.location")
    if location:
        ctx.load_cert_chain(
            location, password=get("ssl.key.password") or get("ssl.keystore.password")
        )
        return True
    key, chain = get("ssl.keystore.key"), get("ssl.keystore.certificate.chain")
    if key and chain:
        with private_temp_file(
            key.strip() + "\n" + chain.strip() + "\n", prefix="odradek-keystore-", suffix=".pem"
        ) as path:
            ctx.load_cert_chain(path, password=get("ssl.key.password"))
        return True
    return False


def _truststore(config: BrokerConfig, listener: str) -> tuple[str | None, str | None]:
    location = listener_setting(config, listener, "ssl.truststore.location")
    inline = listener_setting(config, listener, "ssl.truststore.certificates")
    return location, inline


def _apply_protocols(ctx: ssl.SSLContext, config: BrokerConfig, listener: str) -> None:
    versions = [
        v
        for v in parse_list(listener_setting(config, listener, "ssl.enabled.protocols") or "")
        if v
    ]
    known = sorted(_TLS_VERSIONS[v] for v in versions if v in _TLS_VERSIONS)
    if known:
        ctx.minimum_version, ctx.maximum_version = known[0], known[-1]
    ciphers = listener_setting(config, listener, "ssl.cipher.suites")
    if ciphers:
        ctx.set_ciphers(":".join(parse_list(ciphers)))


def server_ssl_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _apply_protocols(ctx, config, listener)
    if not _load_keystore(ctx, config, listener):
        raise ValueError(f"listener {listener}: no keystore (ssl.keystore.location)")
    auth = (listener_setting(config, listener, "ssl.client.auth") or "none").lower()
    location, inline = _truststore(config, listener)
    if location or inline:
        ctx.load_verify_locations(cafile=location or None, cadata=inline or None)
    ctx.verify_mode = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL}.get(
        auth, ssl.CERT_NONE
    )
    return ctx


def client_ssl_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The broker as a TLS client of another broker's listener (inter-broker): trusts the
    listener's truststore, presents its keystore (for ssl.client.auth=required), checks
    host names unless ssl.endpoint.identification.algorithm is empty (Kafka's rule)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _apply_protocols(ctx, config, listener)
    location, inline = _truststore(config, listener)
    if location or inline:
        ctx.load_verify_locations(cafile=location or None, cadata=inline or None)
    else:
        ctx.load_default_certs()
    _load_keystore(ctx, config, listener)
    algo = listener_setting(config, listener, "ssl.endpoint.identification.algorithm")
    ctx.check_hostname = bool(algo)
    return ctx


# ---------------------------------------------------------------------- validation
def listener_security_errors(config: BrokerConfig) -> list[str]:
    """Why this broker must not start with its listener settings, or [] if it may."""
    try:
        pmap = protocol_map(config)
    except ValueError as e:
        return [str(e)]
    errors: list[str] = []
    specs = listeners(config)
    for spec in specs:
        where = f"listener {spec}"
        if spec.name not in pmap:
            errors.append(
                f"{where}: no security protocol defined for listener {spec.name} in "
                "listener.security.protocol.map"
            )
            continue
        if spec.protocol not in SECURITY_PROTOCOLS:
            errors.append(f"{where}: unknown security protocol {spec.protocol}")
            continue
        if spec.tls:
            errors.extend(_tls_errors(config, spec))
        if spec.sasl:
            errors.extend(_sasl_errors(config, spec))
    names = {s.name for s in specs}
    try:
        adv = advertised_listeners(config)
    except Exception as e:  # noqa: BLE001 - a parse error is reported, not raised
        errors.append(str(e))
        adv = []
    for a in adv:
        if a.name not in names:
            errors.append(f"advertised.listeners: listener {a.name} is not in listeners")
    settings = config.settings(SecuritySettings)
    if config.is_set("inter.broker.listener.name") and config.is_set(
        "security.inter.broker.protocol"
    ):
        errors.append(
            "Only one of inter.broker.listener.name and "
            "security.inter.broker.protocol should be set."
        )
    inter = inter_broker_listener(config)
    inter_spec = next((s for s in specs if s.name == inter), None)
    if inter_spec is None:
        errors.append(
            f"inter.broker.listener.name must be a listener name defined in "
            f"advertised.listeners. The valid options based on currently configured "
            f"listeners are {','.join(sorted(names))} (the inter-broker listener is "
            f"{inter})"
        )
    elif inter_spec.sasl:
        mech = (settings.sasl_mechanism_inter_broker_protocol or "").upper()
        if mech not in enabled_mechanisms(config, inter):
            errors.append(
                f"sasl.mechanism.inter.broker.protocol={mech} must be one of the "
                f"mechanisms enabled on the inter-broker listener {inter}"
            )
        else:
            jaas = jaas_entry(config, inter, mech)
            if jaas is None or not jaas.options.get("username") or "password" not in jaas.options:
                errors.append(
                    f"listener {inter}: the inter-broker mechanism {mech} needs the "
                    f"broker's own username and password in "
                    f"listener.name.{inter.lower()}.{mech.lower()}.sasl.jaas.config"
                )
    authorizer = settings.authorizer_class_name or ""
    if authorizer and authorizer != ACL_AUTHORIZER:
        errors.append(
            f"authorizer.class.name={authorizer}: Odradek provides "
            f"{ACL_AUTHORIZER} (ZooKeeper-based ACLs) only"
        )
    rules = settings.ssl_principal_mapping_rules or "DEFAULT"
    if rules.strip() != "DEFAULT":
        errors.append(
            "ssl.principal.mapping.rules: only DEFAULT (the full subject DN) is supported"
        )
    return errors


def _tls_errors(config: BrokerConfig, spec: ListenerSpec) -> list[str]:
    where = f"listener {spec} ({spec.protocol})"
    get = lambda k: listener_setting(config, spec.name, k)  # noqa: E731
    errors: list[str] = []
    for kind in ("keystore", "truststore"):
        stype = (get(f"ssl.{kind}.type") or "").upper()
        used = get(f"ssl.{kind}.location") or (
            get("ssl.keystore.key") if kind == "keystore" else get("ssl.truststore.certificates")
        )
        if used and stype != "PEM":
            errors.append(
                f"{where}: ssl.{kind}.type={stype or 'JKS'} is not supported; "
                f"Odradek reads PEM files (ssl.{kind}.type=PEM)"
            )
    location = get("ssl.keystore.location")
    if location:
        if not Path(location).is_file():
            errors.append(
                f"{where}: its key material is missing: ssl.keystore.location "
                f"{location} does not exist"
            )
    elif not (get("ssl.keystore.key") and get("ssl.keystore.certificate.chain")):
        errors.append(f"{where}: its key material is missing: ssl.keystore.location is not set")
    trust = get("ssl.truststore.location")
    if trust and not Path(trust).is_file():
        errors.append(f"{where}: ssl.truststore.location {trust} does not exist")
    auth = (get("ssl.client.auth") or "none").lower()
    if auth not in ("required", "requested", "none"):
        errors.append(
            f"{where}: Invalid value {auth} for configuration ssl.client.auth: "
            "String must be one of: required, requested, none"
        )
    elif auth != "none" and not (trust or get("ssl.truststore.certificates")):
        errors.append(
            f"{where}: ssl.client.auth={auth} needs a truststore "
            "(ssl.truststore.location) to verify client certificates"
        )
    if not errors:
        try:
            server_ssl_context(config, spec.name)
        except (OSError, ssl.SSLError, ValueError) as e:
            errors.append(f"{where}: cannot load its key material: {e}")
    return errors


def _sasl_errors(config: BrokerConfig, spec: ListenerSpec) -> list[str]:
    where = f"listener {spec} ({spec.protocol})"
    mechs = enabled_mechanisms(config, spec.name)
    errors: list[str] = []
    if not mechs:
        errors.append(f"{where}: sasl.enabled.mechanisms is empty")
    for m in mechs:
        if m not in SUPPORTED_MECHANISMS:
            errors.append(
                f"{where}: SASL mechanism {m} is not supported (Odradek supports "
                f"{', '.join(SUPPORTED_MECHANISMS)}); set sasl.enabled.mechanisms"
            )
    if "PLAIN" in mechs:
        try:
            jaas = jaas_entry(config, spec.name, "PLAIN")
        except ValueError as e:
            errors.append(f"{where}: {e}")
            jaas = None
        if jaas is None or not jaas.plain_users:
            errors.append(
                f"{where}: PLAIN needs its users in "
                f"listener.name.{spec.name.lower()}.plain.sasl.jaas.config "
                '(PlainLoginModule required user_<name>="<password>" ...;)'
            )
    return errors
