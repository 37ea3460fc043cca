"""Broker properties (Kafka 3.9 KafkaConfig, ZooKeeper mode) of security (issue 14):
TLS, SASL, authorization and ZooKeeper authentication.

Part of ``odradek.configdefs`` (see there), which assembles ``BROKER_CONFIGS`` from the
broker_* modules, in the order of ``odradek.config_tables``, and applies the Support
column.
"""

from __future__ import annotations

from odradek.config_tables.definitions import (
    ConfigDef,
    Range,
    T,
    ValidString,
)
from odradek.config_tables.definitions import broker as _b

__all__ = ["SECURITY_CONFIGS"]


SECURITY_CONFIGS: list[ConfigDef] = [
    # --- TLS (issue 14): PEM key material; listener.name.<l>.<setting> overrides ---
    _b(
        "ssl.keystore.type",
        T.STRING,
        "JKS",
        "Keystore format; Odradek reads PEM only (set PEM: a file with the private key and "
        "the certificate chain, or ssl.keystore.key + ssl.keystore.certificate.chain).",
    ),
    _b(
        "ssl.keystore.location",
        T.STRING,
        None,
        "PEM file with the listener's private key and certificate chain.",
    ),
    _b(
        "ssl.keystore.password",
        T.PASSWORD,
        None,
        "Password of the key in ssl.keystore.location when ssl.key.password is unset.",
    ),
    _b("ssl.key.password", T.PASSWORD, None, "Password of an encrypted private key."),
    _b("ssl.keystore.key", T.PASSWORD, None, "The private key itself, as PEM text."),
    _b(
        "ssl.keystore.certificate.chain",
        T.PASSWORD,
        None,
        "The certificate chain itself, as PEM text.",
    ),
    _b(
        "ssl.truststore.type",
        T.STRING,
        "JKS",
        "Truststore format; Odradek reads PEM only (set PEM).",
    ),
    _b(
        "ssl.truststore.location",
        T.STRING,
        None,
        "PEM file of the CA certificates trusted for client certificates and for "
        "inter-broker connections.",
    ),
    _b("ssl.truststore.password", T.PASSWORD, None, "Unused for PEM truststores."),
    _b(
        "ssl.truststore.certificates",
        T.PASSWORD,
        None,
        "The trusted CA certificates themselves, as PEM text.",
    ),
    _b(
        "ssl.client.auth",
        T.STRING,
        "none",
        "Client certificates: required, requested or none. A verified client certificate "
        "makes the principal User:<subject DN> on SSL listeners.",
        ValidString(("required", "requested", "none")),
    ),
    _b("ssl.enabled.protocols", T.LIST, "TLSv1.2,TLSv1.3", "TLS versions accepted."),
    _b("ssl.protocol", T.STRING, "TLSv1.3", "Highest TLS version (informational)."),
    _b(
        "ssl.cipher.suites",
        T.LIST,
        "",
        "TLS 1.2 cipher suites in OpenSSL's names (empty: Python's secure default).",
    ),
    _b(
        "ssl.endpoint.identification.algorithm",
        T.STRING,
        "https",
        "Host name verification of the broker a broker connects to (empty: off).",
    ),
    _b(
        "ssl.principal.mapping.rules",
        T.STRING,
        "DEFAULT",
        "Certificate subject to principal; only DEFAULT (the full RFC 2253 DN).",
    ),
    # --- SASL (issue 14) ---
    _b(
        "sasl.enabled.mechanisms",
        T.LIST,
        "GSSAPI",
        "SASL mechanisms of SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 "
        "(Kafka's default GSSAPI is not supported and must be replaced).",
    ),
    _b(
        "sasl.mechanism.inter.broker.protocol",
        T.STRING,
        "GSSAPI",
        "Mechanism brokers use on a SASL inter-broker listener.",
    ),
    _b(
        "sasl.jaas.config",
        T.PASSWORD,
        None,
        "JAAS login entry; usually set per listener and mechanism as "
        "listener.name.<listener>.<mechanism>.sasl.jaas.config.",
    ),
    # Kafka's Kerberos (GSSAPI) settings: accepted, dynamic as in Kafka (librdkafka's
    # 0081_admin alters one on a broker), and ignored: GSSAPI is not offered.
    _b("sasl.kerberos.service.name", T.STRING, None, "Kerberos principal name that Kafka runs as."),
    _b("sasl.kerberos.kinit.cmd", T.STRING, "/usr/bin/kinit", "Kerberos kinit command path."),
    _b(
        "sasl.kerberos.min.time.before.relogin",
        T.LONG,
        "60000",
        "Login thread sleep time between refresh attempts.",
    ),
    _b(
        "sasl.kerberos.ticket.renew.window.factor",
        T.DOUBLE,
        "0.8",
        "Share of the ticket's lifetime after which the login thread renews it.",
    ),
    _b(
        "sasl.kerberos.ticket.renew.jitter",
        T.DOUBLE,
        "0.05",
        "Random jitter added to the renewal time.",
    ),
    _b(
        "sasl.kerberos.principal.to.local.rules",
        T.LIST,
        "DEFAULT",
        "Rules mapping Kerberos principal names to short names.",
    ),
    _b(
        "sasl.server.max.receive.size",
        T.INT,
        "524288",
        "Largest frame accepted before a SASL client is authenticated.",
        Range(1),
    ),
    _b(
        "odradek.authentication.timeout.ms",
        T.INT,
        "10000",
        "Odradek's own: a TLS handshake, and then a SASL authentication, must each complete "
        "within this long after the connection is accepted, or it is closed (Kafka bounds "
        "both by connections.max.idle.ms only).",
        Range(1),
    ),
    _b(
        "connection.failed.authentication.delay.ms",
        T.INT,
        "100",
        "After a failed authentication the answer is sent and the connection closed this "
        "much later (slows down password guessing).",
        Range(0),
    ),
    _b(
        "connections.max.reauth.ms",
        T.LONG,
        "0",
        "KIP-368: session lifetime of SASL connections; the client must re-authenticate "
        "before it ends (0: sessions never expire).",
        Range(0),
    ),
    # --- authorization (issue 14) ---
    _b(
        "authorizer.class.name",
        T.STRING,
        "",
        "kafka.security.authorizer.AclAuthorizer enables ACLs kept in ZooKeeper "
        "(/kafka-acl); empty: no authorizer (every client may do everything).",
    ),
    _b(
        "super.users",
        T.STRING,
        "",
        "Principals allowed everything, separated by ';' (User:admin;User:broker).",
    ),
    _b(
        "allow.everyone.if.no.acl.found",
        T.BOOLEAN,
        "false",
        "Allow an operation on a resource that has no ACL at all.",
    ),
    # --- ZooKeeper security (issue 14) ---
    _b(
        "zookeeper.set.acl",
        T.BOOLEAN,
        "false",
        "Create every znode with Kafka's secure ACLs: all rights for the creating "
        "(authenticated) identity, world read except for /config/users, /config/brokers "
        "and /delegation_token (creator only). Needs odradek.zookeeper.auth. Existing "
        "znodes keep their ACLs: see odradek zookeeper-security-migration.",
    ),
    _b(
        "odradek.zookeeper.auth",
        T.PASSWORD,
        None,
        "Beyond Kafka's properties (Kafka takes it from a JAAS Client section): how the "
        "broker authenticates to ZooKeeper, digest:<user>:<password> (ZooKeeper's digest "
        "scheme) or sasl:<user>:<password> (SASL DIGEST-MD5 against the server's JAAS "
        "Server section). Every broker must use the same identity.",
    ),
]
