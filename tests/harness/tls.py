"""Certificates for secured test brokers, made per test run with ``cryptography``: :class:`TestCA`.

Everything is PEM: Kafka reads PEM key stores and trust stores (``ssl.keystore.type=PEM``: an unencrypted
PKCS#8 key followed by the certificate chain), librdkafka reads ``ssl.ca.location``,
``ssl.certificate.location`` and ``ssl.key.location``. Keys are EC P-256 (fast to make, accepted by both).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


class TestCA:
    """A certificate authority living in ``directory``: ``ca.pem`` and the certificates it issues."""

    __test__ = False  # not a pytest test class

    def __init__(self, directory: Path, name: str = "mcs-test-ca") -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.name = name
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        self.ca_path = directory / f"{name}.pem"
        self.ca_path.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, common_name: str, *, server: bool) -> tuple[bytes, bytes]:
        """A new key and certificate (PEM bytes) for ``common_name``: for a broker on loopback (``server``,
        with ``localhost`` and ``127.0.0.1`` as names) or for a client."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            names: list[x509.GeneralName] = [
                x509.DNSName("localhost"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            ]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return _key_pem(key), cert.public_bytes(serialization.Encoding.PEM)

    def broker_keystore(self, common_name: str) -> Path:
        """A Kafka PEM key store for a broker: its key, then its certificate and this CA's."""
        key, cert = self.issue(common_name, server=True)
        path = self.directory / f"{common_name}-keystore.pem"
        path.write_bytes(key + cert + self.ca_path.read_bytes())
        return path

    def write_client(self, common_name: str, cert_path: Path, key_path: Path) -> None:
        """Issue a client certificate and (over)write it and its key at the given paths, each file replaced
        whole (written aside, then renamed over the old one) as certificate rotation tools do: a client
        created meanwhile reads the old file or the new one, never half of one."""
        key, cert = self.issue(common_name, server=False)
        for path, data in ((key_path, key), (cert_path, cert)):
            aside = path.with_name(path.name + ".new")
            aside.write_bytes(data)
            os.replace(aside, path)
