"""Pages for people: one Jinja2 environment, one stylesheet, the headers every page answers with.

Every subsystem that serves HTML (the shop's buyer pages, the buyer's confirmation page, the staff
admin pages) renders a template of ``ucp_gateway/templates`` through :func:`page`:

- Jinja2 with autoescape on for every template (``select_autoescape(default=True)``); an absent
  optional field of a wire body renders as empty;
- one stylesheet, ``GET /assets/site.css`` (:data:`STYLESHEET_PATH`), so the policy can forbid
  inline styles and every script: pages work without JavaScript;
- the headers of :data:`PAGE_HEADERS` on every page: ``Cache-Control: no-store`` (a capability URL
  or a staff page never sits in a shared cache), ``Referrer-Policy: no-referrer`` (the capability in
  the URL does not leak through Referer), a restrictive ``Content-Security-Policy`` (nothing but
  the stylesheet and https images; forms post only to the page's own origin; never framed).

Forms post back to the same origin: :func:`same_origin` refuses a POST whose ``Origin`` (or, without
one, ``Sec-Fetch-Site``) names another site, and each form also carries a CSRF token checked by
the handler (:func:`new_token`, :func:`token_hash`, :func:`tokens_equal`). Cookies are set by
:func:`set_cookie`: HttpOnly, Secure, SameSite=Strict.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from jinja2 import Environment, PackageLoader, select_autoescape

from .appkeys import human_page

__all__ = [
    "CSP",
    "PAGE_HEADERS",
    "STYLESHEET_PATH",
    "clear_cookie",
    "format_money",
    "new_token",
    "page",
    "render",
    "same_origin",
    "set_cookie",
    "setup_assets",
    "token_hash",
    "tokens_equal",
]

STYLESHEET_PATH = "/assets/site.css"
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self' https:; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
PAGE_HEADERS: Mapping[str, str] = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}

# ISO 4217 minor-unit exponents other than 2 (money is integer minor units everywhere else)
_EXPONENT = {
    **dict.fromkeys(("BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "VND"), 0),
    **dict.fromkeys(("VUV", "XAF", "XOF", "XPF"), 0),
    **dict.fromkeys(("BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"), 3),
}


def format_money(amount: int, currency: str) -> str:
    """``amount`` (integer minor units) as text, e.g. ``(1850, "USD") -> "USD 18.50"``,
    ``(-150, "USD") -> "-USD 1.50"``, ``(500, "JPY") -> "JPY 500"`` (ISO 4217 exponents)."""
    exp = _EXPONENT.get(currency.upper(), 2)
    sign, value = ("-" if amount < 0 else ""), abs(int(amount))
    if exp == 0:
        return f"{sign}{currency} {value}"
    return f"{sign}{currency} {value // 10**exp}.{value % 10**exp:0{exp}d}"


_ENV = Environment(
    loader=PackageLoader("ucp_gateway", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENV.filters["money"] = format_money
_ENV.globals["stylesheet"] = STYLESHEET_PATH


def render(template: str, **context: Any) -> str:
    """The HTML of ``template`` (a file of ``ucp_gateway/templates``) with ``context``, escaped."""
    return _ENV.get_template(template).render(**context)


def page(template: str, *, status: int = 200, **context: Any) -> web.Response:
    """A page response: the rendered template, ``text/html; charset=utf-8``, :data:`PAGE_HEADERS`."""
    return web.Response(
        status=status,
        text=render(template, **context),
        content_type="text/html",
        charset="utf-8",
        headers=dict(PAGE_HEADERS),
    )


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe text) for CSRF fields, sessions, confirmations."""
    return secrets.token_urlsafe(32)


def token_hash(token: str) -> bytes:
    """SHA-256 of a token: what is stored (a token of 256 random bits needs no slow hash)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def tokens_equal(a: str | None, b: str | None) -> bool:
    """Constant-time equality of two token texts; False when either is missing or empty."""
    if not a or not b:
        return False
    return hmac.compare_digest(a.encode("utf-8", "surrogatepass"), b.encode("utf-8", "surrogatepass"))


def same_origin(request: web.Request) -> bool:
    """True when a state-changing request comes from this origin's own pages.

    ``Sec-Fetch-Site`` (Fetch Metadata), when sent, must be ``same-origin`` (or ``none``: typed by
    the user). Otherwise ``Origin`` must name the request's own host; browsers send ``Origin:
    null`` for a form posted from a ``no-referrer`` page, which is then refused without Fetch
    Metadata. A request with neither header (no browser) passes here: the form's CSRF token is
    still required.
    """
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None:
        return site in ("same-origin", "none")
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    return origin != "null" and urlsplit(origin).netloc.lower() == request.host.lower()


def set_cookie(resp: web.StreamResponse, name: str, value: str, *, path: str = "/", max_age: int | None = None) -> None:
    """Set a cookie the page's scripts cannot read and other sites' requests do not carry
    (HttpOnly, Secure, SameSite=Strict). Browsers keep Secure cookies of http://localhost and
    http://127.0.0.1 too (loopback is a secure context), so the demo works on plain http."""
    resp.set_cookie(name, value, path=path, max_age=max_age, httponly=True, secure=True, samesite="Strict")


def clear_cookie(resp: web.StreamResponse, name: str, *, path: str = "/") -> None:
    """Expire a cookie set by :func:`set_cookie`."""
    resp.del_cookie(name, path=path, secure=True, httponly=True, samesite="Strict")


_CSS = resources.files("ucp_gateway").joinpath("templates/site.css").read_bytes()


@human_page
async def stylesheet(request: web.Request) -> web.Response:
    """``GET /assets/site.css``: the one stylesheet (public, cacheable: it holds nothing private)."""
    headers = {**PAGE_HEADERS, "Cache-Control": "public, max-age=3600"}
    return web.Response(body=_CSS, content_type="text/css", charset="utf-8", headers=headers)


def setup_assets(app: web.Application) -> None:
    """Add the stylesheet route once (every subsystem with pages calls this)."""
    if not any(getattr(r, "canonical", None) == STYLESHEET_PATH for r in app.router.resources()):
        app.router.add_get(STYLESHEET_PATH, stylesheet)
