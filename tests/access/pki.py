"""A test PKI made with ``cryptography``: a client CA, a server certificate for 127.0.0.1, client
certificates (one revoked in a CRL) and a certificate of another CA, written as PEM files."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Test Platform"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])  # fmt: skip


@dataclass
class Issued:
    cert: x509.Certificate
    cert_path: Path
    key_path: Path


class CA:
    def __init__(self, directory: Path, cn: str):
        self.dir, self.key = directory, ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        self.cert = (
            x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(self.key, hashes.SHA256())
        )  # fmt: skip
        self.path = directory / f"{cn.replace(' ', '_')}.pem"
        self.path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, cn: str, *, server: bool = False) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        b = (
            x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(self.cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                                  else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        )  # fmt: skip
        if server:
            b = b.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                critical=False)  # fmt: skip
        cert = b.sign(self.key, hashes.SHA256())
        stem = self.dir / f"{self.path.stem}-{cn}".replace(" ", "_")
        cert_path, key_path = stem.with_suffix(".crt"), stem.with_suffix(".key")
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))  # fmt: skip
        return Issued(cert, cert_path, key_path)

    def crl(self, revoked: list[x509.Certificate]) -> Path:
        now = dt.datetime.now(dt.UTC)
        b = x509.CertificateRevocationListBuilder().issuer_name(self.cert.subject)
        b = b.last_update(now - dt.timedelta(minutes=5)).next_update(now + dt.timedelta(days=1))
        for cert in revoked:
            b = b.add_revoked_certificate(
                x509.RevokedCertificateBuilder().serial_number(cert.serial_number).revocation_date(now).build()
            )
        path = self.dir / "client-ca.crl.pem"
        path.write_bytes(b.sign(self.key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
        return path
