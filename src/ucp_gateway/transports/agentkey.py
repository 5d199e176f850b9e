"""An agent's signing key for the remote transports (stdio bridge, remote CLI): RFC 9421 requests.

The key is a private JWK, EC P-256 (ES256) or OKP Ed25519 (UCP 2026-08-25), named by an environment
variable or a file (never a flag, so it stays out of shell history and process lists):

- ``UCPGW_AGENT_KEY``: the JWK JSON itself, or ``UCPGW_AGENT_KEY_FILE``: a path to it;
- ``UCPGW_AGENT_PROFILE``: the agent's profile URL (it publishes the public key under the same
  ``kid``; UCP signatures.md), sent as ``UCP-Agent: profile="..."``.

Signed requests cover what the gateway's verifier demands (UCP signatures.md "Request covered
components"): ``@method @authority @path`` (+ ``@query``), ``ucp-agent``, ``idempotency-key`` on
mutating methods, ``content-digest content-type`` with a body (RFC 9530 sha-256 over the exact
bytes sent). ``alg`` is not written (the algorithm comes from the key).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from http_message_signatures import HTTPMessageSigner, MappingKeyResolver, algorithms
from joserfc.jwk import ECKey, OKPKey
from multidict import CIMultiDict

from ..errors import ConfigError

__all__ = [
    "ENV_KEY",
    "ENV_KEY_FILE",
    "ENV_PROFILE",
    "AgentKey",
    "agent_key_from_jwk",
    "generate_agent_jwk",
    "load_agent_key",
    "sha256_digest",
]

ENV_KEY = "UCPGW_AGENT_KEY"
ENV_KEY_FILE = "UCPGW_AGENT_KEY_FILE"
ENV_PROFILE = "UCPGW_AGENT_PROFILE"
_MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def sha256_digest(body: bytes) -> str:
    """RFC 9530 ``Content-Digest`` value: ``sha-256=:<base64>:``."""
    return "sha-256=:" + base64.b64encode(hashlib.sha256(body).digest()).decode("ascii") + ":"


@dataclass
class _Msg:
    method: str
    url: str
    headers: CIMultiDict[str]


@dataclass(frozen=True)
class AgentKey:
    """A private signing key, its ``kid`` and the agent's profile URL."""

    kid: str
    private_key: ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey
    profile_url: str

    @property
    def algorithm(self) -> Any:
        """The RFC 9421 algorithm the key fixes: ``ecdsa-p256-sha256`` or ``ed25519``."""
        if isinstance(self.private_key, ed25519.Ed25519PrivateKey):
            return algorithms.ED25519
        return algorithms.ECDSA_P256_SHA256

    def sign(self, method: str, url: str, headers: dict[str, str], body: bytes, *, now: dt.datetime) -> dict[str, str]:
        """Headers to send with the request (input headers + UCP-Agent, Content-Digest, Signature-Input,
        Signature). ``headers`` must already hold Idempotency-Key for mutating methods."""
        h: CIMultiDict[str] = CIMultiDict(headers)
        h["UCP-Agent"] = f'profile="{self.profile_url}"'
        comps = ["@method", "@authority", "@path"]
        if urlsplit(url).query:
            comps.append("@query")
        comps.append("ucp-agent")
        if method.upper() in _MUTATING:
            if "Idempotency-Key" not in h:
                raise ValueError("mutating requests need an Idempotency-Key header to sign")
            comps.append("idempotency-key")
        if body:
            h["Content-Digest"] = sha256_digest(body)
            h.setdefault("Content-Type", "application/json")
            comps += ["content-digest", "content-type"]
        signer = HTTPMessageSigner(
            signature_algorithm=self.algorithm,
            key_resolver=MappingKeyResolver(public_keys={}, private_keys={self.kid: self.private_key}),
        )
        msg = _Msg(method.upper(), url, h)
        # the Content-Digest set above is reused; a request without a body covers none (a GET)
        signer.sign(msg, key_id=self.kid, created=now, label="sig1", include_alg=False, covered_component_ids=comps,
                    use_existing_digest=bool(body))  # fmt: skip
        return dict(h.items())

    def public_jwk(self) -> dict[str, Any]:
        """The public JWK (with ``kid``, ``use: sig`` and ``alg``) the agent's profile publishes."""
        if isinstance(self.private_key, ed25519.Ed25519PrivateKey):
            jwk, alg = OKPKey.import_key(self.private_key).as_dict(private=False), "EdDSA"
        else:
            jwk, alg = ECKey.import_key(self.private_key).as_dict(private=False), "ES256"
        return {**jwk, "kid": self.kid, "use": "sig", "alg": alg}


def generate_agent_jwk(kind: str = "ES256", kid: str | None = None) -> dict[str, Any]:
    """A new private JWK for an agent: ``ES256`` (EC P-256) or ``EdDSA`` (OKP Ed25519). ``kid``
    defaults to the RFC 7638 thumbprint (UCP 2026-08-25 thumbprint keyids). Raises ValueError."""
    if kind == "ES256":
        key: Any = ECKey.generate_key("P-256", private=True)
        alg = "ES256"
    elif kind == "EdDSA":
        key, alg = OKPKey.generate_key("Ed25519", private=True), "EdDSA"
    else:
        raise ValueError("the key kind must be ES256 or EdDSA")
    return {**key.as_dict(private=True), "kid": kid or key.thumbprint(), "use": "sig", "alg": alg}


def agent_key_from_jwk(data: Any, profile_url: str) -> AgentKey:
    """An :class:`AgentKey` from a private JWK dict (EC P-256 or OKP Ed25519; ``kid`` defaults to
    the RFC 7638 thumbprint). Raises ConfigError for anything else."""
    if not isinstance(data, dict) or "d" not in data:
        raise ConfigError("the agent key must be a private JWK (EC P-256 or OKP Ed25519)")
    try:
        if data.get("kty") == "EC" and data.get("crv") == "P-256":
            key: Any = ECKey.import_key(data)
        elif data.get("kty") == "OKP" and data.get("crv") == "Ed25519":
            key = OKPKey.import_key(data)
        else:
            raise ConfigError("the agent key must be a private EC P-256 or OKP Ed25519 JWK")
    except ConfigError:
        raise
    except Exception:
        raise ConfigError("the agent key is not a valid JWK") from None
    kid = data.get("kid") or key.thumbprint()
    return AgentKey(str(kid), key.private_key, profile_url)


def load_agent_key(env: dict[str, str] | None = None) -> AgentKey | None:
    """The agent key from the environment (see module docstring), or None when none is configured.

    Raises ConfigError for an unreadable key, one that is neither P-256 nor Ed25519, or a key
    without a profile URL.
    """
    env = dict(os.environ if env is None else env)
    text = env.get(ENV_KEY)
    if not text and env.get(ENV_KEY_FILE):
        try:
            text = Path(env[ENV_KEY_FILE]).expanduser().read_text("utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read {ENV_KEY_FILE}: {exc.strerror}") from None
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        raise ConfigError("the agent key is not a JWK") from None
    profile = env.get(ENV_PROFILE)
    key = agent_key_from_jwk(data, profile or "")
    if not profile:
        raise ConfigError(f"{ENV_PROFILE} (the agent's profile URL) is required with an agent key")
    return key
