"""The server secret behind consent nonces (settings, or a generated dev file under the data dir)."""

from __future__ import annotations

import os
import secrets as _secrets
from pathlib import Path

from ..config import Settings
from .consent import key_id
from .errors import NonceSecretError

__all__ = ["DEV_SECRET_FILE", "load_nonce_secrets"]

DEV_SECRET_FILE = "verbs-nonce.secret"  # noqa: S105 - a file name, not a secret


def load_nonce_secrets(settings: Settings) -> tuple[str, dict[str, bytes]]:
    """Return ``(current_kid, {kid: secret})`` (current plus the optional previous secret).

    ``Settings.verbs_nonce_secret`` wins; otherwise, in development only, a 32-byte secret is
    generated once at ``<data_dir>/verbs-nonce.secret`` with mode 0600 (development or demo).
    Production without a secret
    fails closed. The secret is never logged.
    Raises: NonceSecretError.
    """
    if settings.verbs_nonce_secret is not None:
        current = settings.verbs_nonce_secret.get_secret_value().encode()
    elif settings.dev_mode or settings.demo:
        current = _dev_secret(Path(settings.data_dir) / DEV_SECRET_FILE)
    else:
        raise NonceSecretError("UCPGW_VERBS_NONCE_SECRET is required outside development")
    if len(current) < 32:
        raise NonceSecretError("the verbs nonce secret must be at least 32 bytes")
    keys = {key_id(current): current}
    if settings.verbs_nonce_secret_previous is not None:
        prev = settings.verbs_nonce_secret_previous.get_secret_value().encode()
        keys.setdefault(key_id(prev), prev)
    return key_id(current), keys


def _dev_secret(path: Path) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        data = path.read_bytes().strip()
        if len(data) < 32:
            raise NonceSecretError(f"{path} is shorter than 32 bytes; delete it to regenerate") from None
        return data
    with os.fdopen(fd, "wb") as f:
        f.write(_secrets.token_hex(32).encode())
    return path.read_bytes().strip()
