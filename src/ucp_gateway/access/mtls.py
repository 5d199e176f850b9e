"""mTLS: a TLS client certificate names the platform (UCP overview "Authentication Mechanisms").

Two ways a certificate reaches the gateway:

- **The gateway terminates TLS** (``serve --tls-cert --tls-key --client-ca [--client-crl]``,
  :func:`server_ssl_context`): the handshake asks for a client certificate (optional, so the other
  proofs still work) and OpenSSL verifies it against the client CA and the CRL: a certificate of
  another CA, expired or revoked by the CRL ends the handshake (TLS alert), before HTTP.
- **Behind a TLS-terminating proxy**: the proxy forwards the verified certificate in a header
  (``client_cert_header``, default RFC 9440 ``Client-Cert: :<base64 DER>:``; a URL-encoded PEM as
  nginx's ``$ssl_client_escaped_cert`` sends it, or a PEM, is read too), honoured only from a peer
  address in ``trusted_proxies``; from any other address the header is refused (401), never read.
  When a client CA is configured the forwarded certificate is checked again here: issued by it,
  within its validity, not on the CRL.

The certificate (its SHA-256 fingerprint, or its subject) must be registered for a partner of the
company (``partners credentials add --kind mtls-cert``, :mod:`.identities`), not revoked: the
proof is then ``identified`` as that partner (a ``UCP-Agent`` naming another profile is refused).
A verified certificate that is not registered is refused (401), never downgraded.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import ssl
from functools import lru_cache
from pathlib import Path
from urllib.parse import unquote

from aiohttp import web
from cryptography import x509

from ..appkeys import CLOCK, DATABASE, SETTINGS
from ..clock import SystemClock
from ..config import Settings
from ..db import tenant_tx
from ..errors import ConfigError, Unauthorized
from ..httpsig.web import AgentPrincipal
from ..levels import ProofKind
from .identities import certificate_identities
from .proofs import bind_profile

__all__ = [
    "ClientTrust",
    "certificate_of",
    "forwarded_certificate",
    "load_certificate_file",
    "mtls_proof",
    "server_ssl_context",
]


class CertificateInvalid(Unauthorized):
    code = "unauthorized"


def load_certificate_file(path: str | Path) -> x509.Certificate:
    """The first PEM (or DER) certificate in ``path``. Raises ConfigError."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read certificate {path}: {exc.strerror}") from None
    try:
        return x509.load_pem_x509_certificate(data) if b"-----BEGIN" in data else x509.load_der_x509_certificate(data)
    except ValueError:
        raise ConfigError(f"{path} is not an X.509 certificate") from None


def server_ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """The listener's TLS context when ``settings.tls_cert`` is set, else None (plain HTTP).

    TLS >= 1.2; with ``client_ca``, client certificates are requested (``CERT_OPTIONAL``) and
    verified against it, and with ``client_crl`` also against that CRL (the leaf's issuer must have
    one in it). Raises ConfigError for unreadable or mismatched files."""
    if settings.tls_cert is None:
        if settings.tls_key or settings.client_ca or settings.client_crl:
            raise ConfigError("--tls-key, --client-ca and --client-crl need --tls-cert")
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(str(settings.tls_cert), str(settings.tls_key) if settings.tls_key else None)
        if settings.client_ca is not None:
            ctx.load_verify_locations(cafile=str(settings.client_ca))
            ctx.verify_mode = ssl.CERT_OPTIONAL
            if settings.client_crl is not None:
                ctx.load_verify_locations(cafile=str(settings.client_crl))
                ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
        elif settings.client_crl is not None:
            raise ConfigError("--client-crl needs --client-ca")
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"TLS files cannot be used: {exc}") from None
    return ctx


class ClientTrust:
    """The client CA certificates and CRL of ``settings``, read once (for forwarded certificates)."""

    def __init__(self, settings: Settings):
        self.cas: list[x509.Certificate] = []
        self.crl: x509.CertificateRevocationList | None = None
        try:
            if settings.client_ca is not None:
                self.cas = x509.load_pem_x509_certificates(Path(settings.client_ca).read_bytes())
            if settings.client_crl is not None:
                self.crl = x509.load_pem_x509_crl(Path(settings.client_crl).read_bytes())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"client CA or CRL cannot be read: {exc}") from None

    def check(self, cert: x509.Certificate, now: dt.datetime) -> None:
        """Issued by a client CA (signature checked), within its validity, not on the CRL.
        Nothing to check without a client CA. Raises CertificateInvalid."""
        if not self.cas:
            return
        if not (cert.not_valid_before_utc <= now <= cert.not_valid_after_utc):
            raise CertificateInvalid("the client certificate is expired or not yet valid")
        for ca in self.cas:
            try:
                cert.verify_directly_issued_by(ca)
            except (ValueError, TypeError, Exception):  # noqa: S112 - InvalidSignature and friends: the next CA
                continue
            if self.crl is not None and self.crl.get_revoked_certificate_by_serial_number(cert.serial_number):
                raise CertificateInvalid("the client certificate is revoked")
            return
        raise CertificateInvalid("the client certificate is not issued by a trusted client CA")


def forwarded_certificate(value: str) -> x509.Certificate:
    """The certificate in a forwarded header: RFC 9440 ``:<base64 DER>:``, a URL-encoded PEM or a
    PEM. Raises CertificateInvalid."""
    v = value.strip()
    try:
        if v.startswith(":") and v.endswith(":") and len(v) > 2:
            return x509.load_der_x509_certificate(base64.b64decode(v[1:-1], validate=True))
        pem = unquote(v) if "%" in v else v
        return x509.load_pem_x509_certificate(pem.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        raise CertificateInvalid("the forwarded client certificate cannot be read") from None


@lru_cache(maxsize=16)
def _networks(proxies: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(p, strict=False) for p in proxies)


def _trusted_peer(request: web.Request, settings: Settings) -> bool:
    try:
        peer = ipaddress.ip_address((request.remote or "").split("%", 1)[0])
    except ValueError:
        return False
    return any(peer in net for net in _networks(tuple(settings.trusted_proxies)))


def certificate_of(request: web.Request, settings: Settings, trust: ClientTrust | None) -> x509.Certificate | None:
    """The request's client certificate: the TLS connection's (verified in the handshake) or a
    trusted proxy's forwarded header (checked by ``trust``). None when there is neither. Raises
    CertificateInvalid for a forwarded header from an untrusted peer or one that does not check out."""
    header = request.headers.get(settings.client_cert_header)
    if header is not None:
        if not _trusted_peer(request, settings):
            raise CertificateInvalid(f"{settings.client_cert_header} is accepted from the trusted proxies only")
        cert = forwarded_certificate(header)
        if trust is not None:
            trust.check(cert, (request.app.get(CLOCK) or SystemClock()).now())
        return cert
    if settings.client_ca is None:  # the listener asks for no client certificate: none was verified
        return None
    transport = request.transport
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    return x509.load_der_x509_certificate(der) if der else None


CLIENT_TRUST = web.AppKey("ucpgw.access.client_trust", ClientTrust)


async def mtls_proof(request: web.Request, company) -> AgentPrincipal | None:
    """``httpsig.web.PROOF_VERIFIERS`` entry: None without a client certificate; the registered
    partner's principal (``identified``, ``kid`` = the credential id); 401 otherwise."""
    settings = request.app[SETTINGS]
    cert = certificate_of(request, settings, request.app.get(CLIENT_TRUST))
    if cert is None:
        return None
    async with tenant_tx(request.app[DATABASE].pool, company.id) as conn:
        row = await conn.fetchrow(
            "SELECT id, profile_url FROM platform_credentials WHERE kind = 'mtls_cert' AND identity = ANY($1)"
            " AND revoked_at IS NULL ORDER BY created_at LIMIT 1",
            list(certificate_identities(cert)),
        )
    if row is None:
        raise CertificateInvalid("the client certificate is not registered for this company (or revoked)")
    bind_profile(request, row["profile_url"])
    return AgentPrincipal(company.id, row["profile_url"], row["id"], "buyer", True, "agent", ProofKind.MTLS)
