"""Web Bot Auth test parts: a real agent host on loopback (key directory + UCP profile) and a bot
that signs requests with a real Ed25519 or P-256 key (the RFC 9421 library's signer)."""

from __future__ import annotations

import datetime as dt
import secrets
from dataclasses import dataclass

from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from http_message_signatures import HTTPMessageSigner, MappingKeyResolver, algorithms
from joserfc.jwk import ECKey, OKPKey
from multidict import CIMultiDict

from tests.commerce.conftest import Platform
from ucp_gateway.access.wba_directory import DIRECTORY_MEDIA_TYPE, DIRECTORY_PATH
from ucp_gateway.keys.rfc7638 import thumbprint
from ucp_gateway.transports.agentkey import sha256_digest


class AgentHost(Platform):
    """A platform on 127.0.0.1 serving its UCP profile (``/profile/a.json``) and its Web Bot Auth
    key directory. ``directory_status`` / ``media_type`` change the directory's answer;
    ``directory_hits`` counts its fetches."""

    def __init__(self, keys: list[dict]):
        super().__init__()
        self.keys = keys
        self.directory_status = 200
        self.media_type = DIRECTORY_MEDIA_TYPE
        self.directory_hits = 0

    def routes(self, app: web.Application) -> None:  # the profile, no webhooks
        app.router.add_get("/profile/{name}.json", self.profile)
        app.router.add_get(DIRECTORY_PATH, self.directory)
        app.router.add_get("/jwks.json", self.jwks)

    async def directory(self, request):
        self.directory_hits += 1
        if self.directory_status != 200:
            return web.Response(status=self.directory_status)
        body = web.json_response({"keys": self.keys}).body
        return web.Response(body=body, content_type=self.media_type, headers={"Cache-Control": "max-age=300"})

    async def jwks(self, request):  # a plain JWKS URL (Signature-Agent type=jwks_uri)
        self.directory_hits += 1
        return web.json_response({"keys": self.keys})


@dataclass
class _Msg:
    method: str
    url: str
    headers: CIMultiDict[str]


class Bot:
    """A signing key (``Ed25519`` or ``P-256``), its public JWK and RFC 7638 ``kid``."""

    def __init__(self, curve: str = "Ed25519"):
        if curve == "Ed25519":
            self.key = ed25519.Ed25519PrivateKey.generate()
            self.jwk = OKPKey.import_key(self.key).as_dict(private=False)
            self.algorithm = algorithms.ED25519
        else:
            self.key = ec.generate_private_key(ec.SECP256R1())
            self.jwk = ECKey.import_key(self.key).as_dict(private=False)
            self.algorithm = algorithms.ECDSA_P256_SHA256
        self.jwk.pop("kid", None)
        self.kid = thumbprint(self.jwk)

    def sign(
        self,
        method: str,
        url: str,
        agent: str | None,
        *,
        headers: dict[str, str] | None = None,
        body: bytes = b"",
        ucp: bool = True,
        label: str = "sig1",
        tag: str = "web-bot-auth",
        created: dt.datetime | None = None,
        lifetime: int = 60,
        nonce: str | None = "fresh",
        kid: str | None = None,
        cover_agent: bool = True,
        agent_header: str | None = None,
    ) -> dict[str, str]:
        """Headers for a Web Bot Auth request: ``Signature-Agent: <label>="<agent>"`` covered by its
        member (``agent_header``: that header verbatim, covered whole); ``ucp``: also the UCP
        coverage (``@method @path``, ``ucp-agent``, idempotency key,
        digest) of what ``headers`` and ``body`` hold."""
        h: CIMultiDict[str] = CIMultiDict(headers or {})
        comps = ["@authority"]
        if agent_header is not None:
            h["Signature-Agent"] = agent_header
        elif agent is not None:
            h["Signature-Agent"] = f'{label}="{agent}"'
        if ucp:
            comps = ["@method", "@authority", "@path"] + [n.lower() for n in ("UCP-Agent", "Idempotency-Key") if n in h]
            if body:
                h["Content-Digest"] = sha256_digest(body)
                h.setdefault("Content-Type", "application/json")
                comps += ["content-digest", "content-type"]
        if agent_header is not None:
            comps.append("signature-agent")
        elif agent is not None and cover_agent:
            comps.append(f'"signature-agent";key="{label}"')
        created = created or dt.datetime.now(dt.UTC)
        signer = HTTPMessageSigner(
            signature_algorithm=self.algorithm,
            key_resolver=MappingKeyResolver(public_keys={}, private_keys={kid or self.kid: self.key}),
        )
        signer.sign(
            _Msg(method, url, h), key_id=kid or self.kid, created=created,
            expires=created + dt.timedelta(seconds=lifetime), label=label, tag=tag, include_alg=False,
            nonce=secrets.token_urlsafe(16) if nonce == "fresh" else nonce, covered_component_ids=comps,
            use_existing_digest="content-digest" in h,
        )  # fmt: skip
        return dict(h.items())
