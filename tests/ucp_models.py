"""The official models of each served UCP version, for tests.

- 2026-08-25: ``ucp-sdk`` 0.5.0, the runtime's own dependency (``import ucp_sdk``).
- 2026-04-08: ``ucp-sdk`` 0.4.6, installed on first use by ``pip install --no-deps --target`` into
  ``<repo>/.ucp-sdk-0.4.6`` (git-ignored; reused by later runs, made under a file lock so parallel
  workers install once) and loaded under the package name ``ucp_sdk_0_4_6``: its modules import
  each other relatively, so both releases live in one process without clashing.

``validate(kind, doc)`` checks a served document or response against the models of the version its
``ucp.version`` names and returns that version; it raises pydantic's ValidationError (or
AssertionError for what the 0.4.6 SDK has no model of) otherwise.
"""

from __future__ import annotations

import fcntl
import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

OLD_SDK = "0.4.6"
_ALIAS = "ucp_sdk_0_4_6"
_DIR = Path(__file__).resolve().parent.parent / f".ucp-sdk-{OLD_SDK}"
_PACKAGES = {"2026-08-25": "ucp_sdk", "2026-04-08": _ALIAS}


def _install() -> Path:
    pkg, done = _DIR / "ucp_sdk", _DIR / f"ucp_sdk-{OLD_SDK}.dist-info"  # the wheel's package has no __init__
    if done.is_dir():
        return pkg
    _DIR.parent.mkdir(parents=True, exist_ok=True)
    with open(str(_DIR) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.is_dir():
            tmp = Path(f"{_DIR}.tmp-{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    "--no-deps",
                    "--target",
                    str(tmp),
                    f"ucp-sdk=={OLD_SDK}",
                ],
                check=True,
            )
            shutil.rmtree(_DIR, ignore_errors=True)
            tmp.rename(_DIR)
    return pkg


def _old_sdk() -> ModuleType:
    mod = sys.modules.get(_ALIAS)
    if mod is not None:
        return mod
    mod = ModuleType(_ALIAS)  # a namespace package, as the wheel installs it, under another name
    mod.__path__ = [str(_install())]
    sys.modules[_ALIAS] = mod
    return mod


def models(version: str, module: str) -> ModuleType:
    """``models("2026-04-08", "shopping.checkout")``: that version's ``models.schemas.<module>``."""
    package = _PACKAGES[version]
    if package == _ALIAS:
        _old_sdk()
    return importlib.import_module(f"{package}.models.schemas.{module}")


_KINDS = {
    # kind -> model paths every body of the kind must satisfy (the base resource and the extensions
    # the gateway serves on it)
    "checkout": (
        "shopping.checkout:Checkout",
        "shopping.buyer_consent:Checkout",
        "shopping.discount:Checkout",
        "shopping.fulfillment:Checkout",
    ),
    "order": ("shopping.order:Order",),
}


def _profile(kind: str, doc: dict[str, Any], version: str) -> None:
    cls = "BusinessSchema" if kind == "business_profile" else "PlatformSchema"
    if version == "2026-08-25":
        getattr(models(version, "profile"), cls).model_validate(doc)  # the wrapper, keys[] included
        return
    getattr(models(version, "ucp"), cls).model_validate(doc["ucp"])
    # 0.4.6 has no model of the wrapper: the profile schema's signing_key rules (kid, kty required)
    for jwk in doc.get("signing_keys") or []:
        assert isinstance(jwk.get("kid"), str) and isinstance(jwk.get("kty"), str), jwk
    assert "supported_versions" not in doc["ucp"], "a leaf MUST NOT carry supported_versions"
    assert "map_order" not in doc["ucp"], "map_order is not defined at 2026-04-08"


def validate(kind: str, doc: dict[str, Any]) -> str:
    """Validate ``doc`` (``business_profile``, ``platform_profile``, ``checkout`` or ``order``)
    against the models of ``doc["ucp"]["version"]``. Returns that version."""
    version = doc["ucp"]["version"]
    if kind.endswith("_profile"):
        _profile(kind, doc, version)
        return version
    for path in _KINDS[kind]:
        module, cls = path.split(":")
        getattr(models(version, module), cls).model_validate(doc)
    return version
