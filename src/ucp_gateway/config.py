"""Gateway settings: one typed object, built once (environment + CLI flags) and passed in.

Environment variables use the ``UCPGW_`` prefix (``UCPGW_PORT=9000``); ``DATABASE_URL`` is also read
without the prefix because every platform sets it that way. Tests build ``Settings(...)`` directly.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings"]


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask: a container's share), at least 1."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class Settings(BaseSettings):
    """All gateway settings. Units: seconds for durations, bytes for sizes."""

    model_config = SettingsConfigDict(env_prefix="UCPGW_", extra="ignore", frozen=False)

    # --- foundation -------------------------------------------------------------------------
    database_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("UCPGW_DATABASE_URL", "DATABASE_URL"),
        description="Owner DSN (runs migrations). None: start the embedded PostgreSQL under data_dir.",
    )
    app_database_url: str | None = Field(
        default=None,
        description="DSN of the application role. None: the owner DSN with the user set to app_db_role.",
    )
    app_db_role: str = Field(default="ucp_gateway_app", pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    app_db_password: SecretStr | None = Field(
        default=None, description="Password given to the application role (external PostgreSQL)."
    )
    data_dir: Path = Path(".ucp-gateway")
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    environment: Literal["production", "development"] = "production"
    public_scheme: Literal["https", "http"] = "https"
    public_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="Port of the public origin in URLs the gateway builds from a hostname (agent-graph links, "
        "profile endpoints, webhook UCP-Agent). None: the port of the request's Host header (none without a "
        "request). `serve --demo` sets the listen port. The scheme's default port is never written.",
    )
    platform_hosts: tuple[str, ...] = Field(
        default=(),
        description="Host names that serve the platform node (its /.well-known/ucp listing the companies, and "
        "/ucp/agent-graph); a Host bound to no company and not listed here is answered 404 not_found. Empty: the "
        "host of platform_origin; neither set: no platform node. `serve --demo` sets platform.localhost.",
    )
    platform_origin: str | None = Field(
        default=None,
        description="Public origin (http(s)://host[:port]) of every URL in the platform node's documents, never "
        "the request's Host. None: public_scheme://<first platform host>[:public_port].",
    )
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["json", "console"] = "json"
    db_pool_min: int = Field(default=2, ge=1)
    db_pool_max: int | None = Field(
        default=None,
        ge=1,
        description="connections in each serving process's pool; None: two per CPU core plus two, shared out over "
        "`workers` (see db_pool_size)",
    )
    shutdown_timeout: float = Field(default=10.0, gt=0)
    http_keepalive_timeout: float = Field(
        default=75.0,
        gt=0,
        description="Seconds a client connection may sit without a complete request (idle keep-alive, or a "
        "request line and headers still arriving) before it is closed; aiohttp's own default is an hour.",
    )
    workers: int = Field(
        default=1,
        ge=1,
        le=64,
        description="serving processes of `serve` sharing its listening socket; each has its own pool of db_pool_max "
        "connections and its own in-process caches; the rate limits hold across all of them (PostgreSQL)",
    )
    event_loop: Literal["auto", "uvloop", "asyncio"] = Field(
        default="auto",
        description="event loop of `serve`: auto = uvloop when installed (less CPU per request), else asyncio's",
    )
    host_cache_ttl: float = Field(default=2.0, ge=0, description="seconds a Host -> company lookup is cached")
    block_cache_ttl: float = Field(
        default=2.0, ge=0, le=60, description="seconds a company's key/profile blocks and profile purges are reused"
    )
    client_max_size: int = Field(default=1 << 20, ge=1024, description="largest request body accepted, bytes")
    body_read_timeout: float = Field(default=10.0, gt=0, description="seconds to receive a request body (408 after)")
    demo: bool = False

    # --- TLS and mTLS (ucp_gateway.access.mtls, docs/access.md "mTLS") --------------------------
    tls_cert: Path | None = Field(default=None, description="PEM certificate (chain): serve HTTPS instead of HTTP.")
    tls_key: Path | None = Field(default=None, description="PEM private key of tls_cert (if not in that file).")
    client_ca: Path | None = Field(
        default=None, description="PEM CA certificate(s) of client certificates (requested, optional: mTLS)."
    )
    client_crl: Path | None = Field(default=None, description="PEM CRL of client_ca: revoked client certificates.")
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="Addresses or CIDR networks whose forwarded client-certificate header is honoured.",
    )
    client_cert_header: str = Field(
        default="Client-Cert", min_length=1, description="The forwarded certificate header (RFC 9440 Client-Cert)."
    )

    # --- metrics (ucp_gateway.metrics, docs/operations.md) ------------------------------------
    metrics_enabled: bool = Field(default=True, description="record Prometheus metrics of every request")
    metrics_host: str = Field(default="127.0.0.1", description="address of the metrics listener")
    metrics_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        description="port of the metrics listener (GET /metrics), apart from the company hosts' port; None: "
        "no listener. With `workers` > 1 the supervisor serves every worker's metrics there",
    )
    metrics_companies: int = Field(
        default=100, ge=0, description="distinct company slugs a process labels metrics with; the rest are _other"
    )
    metrics_interval: float = Field(
        default=10.0, gt=0, description="seconds between two reads of the database gauges and the pool"
    )

    # --- discovery / vendor namespace (see docs/architecture.md) -----------------------------
    vendor_prefix: str = Field(default="com.solidnumber", pattern=r"^[a-z][a-z0-9]*(\.[a-z][a-z0-9_]*)+$")
    vendor_base_url: str = "https://solidnumber.com/ucp"

    # --- signatures and keys (ucp_gateway.httpsig, ucp_gateway.keys) ---------------------------
    kek_ring: SecretStr | None = Field(
        default=None, description="KEK ring 'id:base64,id:base64' (32-byte AES keys); the last is current."
    )
    kek_file: Path | None = Field(default=None, description="Secret file holding the KEK ring (same format).")
    kek_current: str | None = Field(default=None, description="KEK id for new encryptions (default: last).")
    keys_dir: Path = Field(default=Path("keys"), description="Dev only: where a KEK ring is generated.")
    keys_publish_min: int = Field(default=3600, ge=0, description="Seconds a pending key is published first.")
    keys_rotating_grace: int = Field(default=7 * 86400, ge=0, description="Seconds a rotated key verifies.")
    keys_scheduler_interval: float = Field(default=60.0, gt=0, description="Seconds between scheduler runs.")
    httpsig_max_age: int = Field(default=300, ge=1, description="Max age of a signature's created (s).")
    httpsig_future_skew: int = Field(default=30, ge=0, description="Tolerated future created (s).")
    httpsig_require_created: bool = Field(
        default=False,
        description="Refuse a UCP request signature without a created parameter. UCP makes created optional "
        "(replay protection is the signed idempotency key); RFC 9421 §7.2.4 recommends it. true refuses it.",
    )
    httpsig_tag: str | None = Field(default=None, description="If set, only signatures with this tag count.")
    httpsig_allow_es384: bool = True
    # the verb manifest is public ("public, Cache-Control: public, max-age=300")
    httpsig_exempt_prefixes: tuple[str, ...] = (
        "/.well-known/",
        "/admin/",
        "/healthz",
        "/readyz",
        "/api/v1/agent/verbs",
    )
    httpsig_staff_prefixes: tuple[str, ...] = Field(
        default=("/api/v1/agent/dispatch",),
        description="Routes where unsigned staff calls with an admin API bearer token are let through to "
        "the route's own token check.",
    )
    httpsig_sign_responses: bool = Field(default=False, description="Sign every response on company hosts.")
    oauth_token_ttl: int = Field(
        default=900, ge=60, le=3600, description="Lifetime (s) of the OAuth client-credentials access tokens."
    )
    web_bot_auth_max_validity: int = Field(
        default=600,
        ge=10,
        le=86400,
        description="Longest validity window (s, expires - created) of a Web Bot Auth signature accepted.",
    )
    httpsig_profile_ttl: float = Field(default=300.0, ge=60, description="Platform profile cache TTL (s).")
    httpsig_profile_refresh_floor: float = Field(default=60.0, ge=0, description="Min s between refetches.")

    # --- discovery: hosting, platform-profile fetcher, agent graph (ucp_gateway.discovery) -------
    profile_max_age: int = Field(default=300, ge=60, description="max-age (s) on /.well-known/ucp (UCP: >= 60).")
    profile_render_ttl: float = Field(
        default=5.0, ge=0, description="Seconds a rendered profile is reused before keys/sub-agents are re-read."
    )
    profile_cache_bytes: int = Field(
        default=256 * 1024 * 1024,
        ge=0,
        description="Memory (bytes) the rendered /.well-known/ucp documents of every served version may take "
        "together per process (about 7 KiB a document: 10,000 companies at two versions take ~140 MiB); the "
        "ones renewed longest ago go first.",
    )
    agent_graph_page_size: int = Field(
        default=1000,
        ge=1,
        le=1000,
        description="Companies per /ucp/agent-graph page (the platform node's document embeds a first page of at "
        "most 100).",
    )
    profile_fetch_connect_timeout: float = Field(default=3.0, gt=0)
    profile_fetch_read_timeout: float = Field(default=5.0, gt=0)
    profile_fetch_max_bytes: int = Field(default=256 * 1024, ge=128 * 1024, description="Body cap (UCP: >= 128 KiB).")
    profile_cache_ttl_floor: float = Field(default=60.0, ge=60, description="Minimum cache TTL (s), UCP overview.")
    profile_cache_ttl_max: float = Field(default=86400.0, ge=60, description="Longest Cache-Control honoured (s).")
    profile_cache_size: int = Field(default=1024, ge=1, description="LRU capacity (profiles).")
    profile_stale_if_error: float = Field(
        default=300.0, ge=0, description="Seconds past expiry a cached profile still serves when a refresh fails."
    )
    profile_fetch_backoff_base: float = Field(default=1.0, gt=0)
    profile_fetch_backoff_max: float = Field(default=60.0, gt=0)
    partner_cache_ttl: float = Field(default=5.0, ge=0, description="Seconds a partner/trust lookup is reused.")
    dev_profile_hosts: list[str] = Field(
        default_factory=list,
        description="Loopback hosts whose profiles may be fetched over plain http (development only).",
    )

    # --- UCP shopping (ucp_gateway.commerce) --------------------------------------------------
    checkout_ttl: int = Field(default=6 * 3600, ge=60, description="Seconds a checkout lives (UCP: 6 h).")
    commerce_idempotency_ttl: int = Field(default=86400, ge=86400, description="Seconds a key is kept.")
    buyer_rate_limit: int = Field(
        default=1200,
        ge=1,
        description="Requests/minute per verified buyer agent (identified or linked) and company, across all "
        "processes and replicas on the database (access.ratelimit); anonymous callers share one budget per company.",
    )
    anonymous_rate_limit: int | None = Field(
        default=None,
        ge=1,
        description="Requests/minute of the one budget every anonymous caller of a company shares, across all "
        "replicas; None: buyer_rate_limit. A company's settings.access.rate_limits overrides both.",
    )
    checkout_session_rate_limit: int = Field(
        default=120,
        ge=1,
        description="Requests/minute on one checkout session a verified platform continues after its own budget "
        "is spent (it is never refused 429 there; past this it is shed with 503 and Retry-After).",
    )
    buyer_max_order_amount: int | None = Field(
        default=None,
        ge=0,
        description="Per-buyer-agent order amount limit (minor units); above it complete answers "
        "requires_escalation. None: no limit.",
    )
    consent_page_ttl: int = Field(
        default=600,
        ge=60,
        le=3600,
        description="Seconds a confirmation form of a people's page (the checkout's continue_url, a staff "
        "approval) stays valid; each form's token is also single use.",
    )
    verbs_approval_ttl: int = Field(
        default=3600,
        ge=300,
        le=7 * 86400,
        description="Seconds a pending approval of a human-only verb waits for a person on the staff page.",
    )
    staff_session_ttl: int = Field(
        default=3600, ge=300, le=86400, description="Seconds a staff browser session (admin pages) lives."
    )
    simulation_secret: SecretStr | None = Field(
        default=None,
        description="Enables POST /testing/simulate-shipping/{order_id} (Simulation-Secret header).",
    )
    conformance_mode: bool = Field(
        default=False,
        description="UCP conformance-suite mode: accepts unsigned requests with a dummy request-signature "
        "and plain-http loopback profile URLs. Refused unless environment=development.",
    )
    webhook_max_attempts: int = Field(default=12, ge=1, description="Delivery attempts per order webhook.")
    webhook_backoff_base: float = Field(default=2.0, gt=0, description="First retry delay (s); doubles.")
    webhook_backoff_max: float = Field(default=3600.0, gt=0, description="Longest retry delay, seconds.")
    webhook_timeout: float = Field(default=10.0, gt=0, description="Seconds per webhook delivery attempt.")
    webhook_poll_interval: float = Field(
        default=0.25, gt=0, description="Seconds between outbox scans while no delivery is in flight."
    )
    webhook_concurrency: int = Field(default=32, ge=1, description="Webhook deliveries in flight per process.")
    webhook_receiver_concurrency: int = Field(
        default=8, ge=1, description="Webhook deliveries in flight per receiver (platform) and process."
    )
    webhook_worker: bool = Field(default=True, description="Run the webhook delivery worker in this process.")
    commerce_via_verbs: bool = Field(
        default=True,
        description="Run UCP operations through the verb runtime (audit rows, receipts, buyer limits). "
        "False (benchmark baseline only, refused in production): direct, unaudited.",
    )

    @model_validator(mode="after")
    def _conformance_needs_dev(self) -> Settings:
        if self.conformance_mode and self.environment != "development":
            raise ValueError("conformance_mode is refused unless environment=development")
        if not self.commerce_via_verbs and self.environment != "development":
            raise ValueError("commerce_via_verbs=false (no audit) is refused unless environment=development")
        if self.conformance_mode and not self.dev_profile_hosts:
            self.dev_profile_hosts = ["127.0.0.1", "localhost"]  # the suite's plain-http loopback profile
        return self

    # --- verb runtime (ucp_gateway.verbs) -----------------------------------------------------
    verbs_nonce_secret: SecretStr | None = Field(
        default=None,
        description="HMAC-SHA256 key (>= 32 bytes) of consent nonces. None: a dev secret is generated "
        "under data_dir with mode 0600; production refuses to start.",
    )
    verbs_nonce_secret_previous: SecretStr | None = Field(
        default=None, description="The secret before a rotation; nonces it signed verify for their 5 minutes."
    )
    verbs_nonce_ttl: int = Field(default=300, ge=30, le=3600, description="Seconds a consent nonce lives.")
    verbs_idempotency_ttl: int = Field(
        default=86400,
        ge=86400,
        description="Seconds an idempotency key is kept: at least 24 h (solid-verbs; UCP checkout.md, also for the "
        "UCP operations, which run as verbs).",
    )
    # --- retention (ucp_gateway.retention) ------------------------------------------------------
    retention_interval: float = Field(
        default=600.0,
        ge=0,
        description="Seconds between retention sweeps, which delete expired idempotency records, spent consent "
        "nonces, expired WebMCP sessions and the usage counters of days that ended over two days ago; 0 turns "
        "the sweeper off (then delete them by other means).",
    )
    retention_margin: int = Field(
        default=3600, ge=0, description="Seconds past its expiry a row is kept before the sweeper deletes it."
    )
    retention_batch: int = Field(
        default=5000, ge=1, le=100_000, description="Rows the sweeper deletes per transaction."
    )
    verbs_daily_caps: dict[str, Annotated[int, Field(ge=0, le=2**31 - 1)] | None] = Field(
        default_factory=lambda: {"WRITE_REVERSIBLE": 100, "WRITE_FINANCIAL": 25, "IRREVERSIBLE": 10},
        description="Company-wide daily caps per risk class (UTC day); a company's settings.verbs.daily_caps "
        "overrides them; null = unlimited, 0 = class disabled.",
    )
    verbs_manifest_max_age: int = Field(default=300, ge=0, description="Cache-Control max-age of the manifest.")
    verbs_validate_output: bool | None = Field(
        default=None, description="Validate every verb result against its shape schema. None: in development only."
    )

    # --- transports (ucp_gateway.transports) --------------------------------------------------
    webmcp_session_ttl: int = Field(
        default=8 * 3600, ge=60, le=7 * 86400, description="Seconds a WebMCP browser session lives."
    )

    @field_validator("data_dir")
    @classmethod
    def _expand(cls, v: Path) -> Path:
        return v.expanduser()

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, v: list[str]) -> list[str]:
        import ipaddress

        for net in v:
            ipaddress.ip_network(net, strict=False)  # ValueError: pydantic names the field
        return v

    @property
    def db_pool_size(self) -> int:
        """Connections in each serving process's pool: ``db_pool_max`` when set, else two per CPU
        core of this machine plus two, shared out over ``workers`` (rounded up); never below
        ``db_pool_min``. The usual size for a CPU-bound PostgreSQL: more connections than that
        only queue on its cores, costing it CPU per statement (measured in bench/checkout_flow.py:
        on 2 cores a pool of 6 gave more flows/s and less PostgreSQL CPU per flow than 10)."""
        n = self.db_pool_max
        if n is None:
            n = -(-(2 * usable_cores() + 2) // self.workers)
        return max(n, self.db_pool_min)

    @property
    def dev_mode(self) -> bool:
        """True only when the operator explicitly chose ``environment=development``."""
        return self.environment == "development"
