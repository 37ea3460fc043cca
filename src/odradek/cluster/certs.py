"""Key material for secured local clusters, made with the ``cryptography`` package.

``make_ca`` writes a self-signed CA (``ca.pem``, its key ``ca-key.pem``); ``issue``
writes a PEM keystore for one host -- the private key followed by the certificate chain,
what Kafka's ``ssl.keystore.type=PEM`` reads from ``ssl.keystore.location`` -- with the
host's IP address (or name) as subject alternative name, so clients that verify host
names (librdkafka's default ``ssl.endpoint.identification.algorithm=https``) accept it.
Keys are EC P-256 and written with mode 0600.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from odradek.security.private_files import write_private

__all__ = ["CertificateAuthority", "load_ca", "make_ca"]

_VALID_DAYS = 825


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@dataclass
class CertificateAuthority:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    cert_path: Path

    def issue(
        self,
        path: Path,
        common_name: str,
        hosts: list[str],
        *,
        organization: str = "Odradek",
        client: bool = True,
    ) -> Path:
        """A keystore PEM (key + certificate + CA certificate) for ``hosts``."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        sans: list[x509.GeneralName] = []
        for h in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(h)))
            except ValueError:
                sans.append(x509.DNSName(h))
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] + (
            [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        )
        builder = (
            x509.CertificateBuilder()
            # Most general first, as certificates are usually built: the subject
            # then reads CN=<name>,O=<organization> in RFC 2253 (Kafka's principal)
            .subject_name(
                x509.Name(
                    [
                        x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
                        x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                    ]
                )
            )
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=_VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), True)
            .add_extension(x509.ExtendedKeyUsage(usages), False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), False)
        cert = builder.sign(self.key, hashes.SHA256())
        write_private(
            path,
            _key_pem(key)
            + cert.public_bytes(serialization.Encoding.PEM)
            + self.cert.public_bytes(serialization.Encoding.PEM),
        )
        return path


def make_ca(directory: Path, name: str = "Odradek local cluster CA") -> CertificateAuthority:
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=_VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            True,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path = directory / "ca.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    write_private(directory / "ca-key.pem", _key_pem(key))
    return CertificateAuthority(key, cert, cert_path)


def load_ca(directory: Path) -> CertificateAuthority:
    """The CA ``make_ca`` wrote in ``directory`` (to issue more certificates)."""
    cert_path = directory / "ca.pem"
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    key = serialization.load_pem_private_key((directory / "ca-key.pem").read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return CertificateAuthority(key, cert, cert_path)
