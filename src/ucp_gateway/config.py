"""Gateway settings: one typed object, built once (environment + CLI flags) and passed in.

Environment variables use the ``UCPGW_`` prefix (``UCPGW_PORT=9000``); ``DATABASE_URL`` is also read
without the prefix because every platform sets it that way. Tests build ``Settings(...)`` directly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings"]


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
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["json", "console"] = "json"
    db_pool_min: int = Field(default=2, ge=1)
    db_pool_max: int = Field(default=10, ge=1)
    shutdown_timeout: float = Field(default=10.0, gt=0)
    host_cache_ttl: float = Field(default=2.0, ge=0, description="seconds a Host -> company lookup is cached")
    client_max_size: int = Field(default=1 << 20, ge=1024, description="largest request body accepted, bytes")
    demo: bool = False

    # --- discovery / vendor namespace (see docs/architecture.md) -----------------------------
    vendor_prefix: str = Field(default="com.solidnumber", pattern=r"^[a-z][a-z0-9]*(\.[a-z][a-z0-9_]*)+$")
    vendor_base_url: str = "https://solidnumber.com/ucp"

    # --- verb runtime (issue 5, ucp_gateway.verbs) --------------------------------------------
    verbs_nonce_secret: SecretStr | None = Field(
        default=None,
        description="HMAC-SHA256 key (>= 32 bytes) of consent nonces. None: a dev secret is generated "
        "under data_dir with mode 0600; production refuses to start.",
    )
    verbs_nonce_secret_previous: SecretStr | None = Field(
        default=None, description="The secret before a rotation; nonces it signed verify for their 5 minutes."
    )
    verbs_nonce_ttl: int = Field(default=300, ge=30, le=3600, description="Seconds a consent nonce lives.")
    verbs_idempotency_ttl: int = Field(default=86400, ge=3600, description="Seconds an idempotency key is kept.")
    verbs_daily_caps: dict[str, int | None] = Field(
        default_factory=lambda: {"WRITE_REVERSIBLE": 100, "WRITE_FINANCIAL": 25, "IRREVERSIBLE": 10},
        description="Company-wide daily caps per risk class (UTC day); a company's settings.verbs.daily_caps "
        "overrides them; null = unlimited, 0 = class disabled.",
    )
    verbs_manifest_max_age: int = Field(default=300, ge=0, description="Cache-Control max-age of the manifest.")

    # --- transports (issue 7, ucp_gateway.transports) -----------------------------------------
    webmcp_session_ttl: int = Field(
        default=8 * 3600, ge=60, le=7 * 86400, description="Seconds a WebMCP browser session lives."
    )

    @field_validator("data_dir")
    @classmethod
    def _expand(cls, v: Path) -> Path:
        return v.expanduser()

    @property
    def dev_mode(self) -> bool:
        """True only when the operator explicitly chose ``environment=development``."""
        return self.environment == "development"
