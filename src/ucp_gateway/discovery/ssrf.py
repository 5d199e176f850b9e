"""SSRF guard for the gateway's outbound requests: platform-profile fetches (UCP overview "Fetching")
and order webhooks (UCP order.md "Events"); HEAD: RFC 6890 special-use ranges.

One policy, in two halves:
- before a request, :func:`check_target` judges the URL: absolute ``https`` with a host and no
  credentials (plain ``http`` only for a host on the dev allowlist), and a host that aiohttp would
  connect to without resolving (an IP literal) must pass :func:`address_allowed`. The host judged is
  the one aiohttp connects to (yarl's parse, which folds Unicode digits and dots: ``①②⑦.0.0.1`` is
  ``127.0.0.1``), and the standard library's parse must agree with it on the allowlist;
- at connect time, :class:`GuardedResolver` resolves the host itself, refuses the connection when ANY
  address is special-use (loopback, private, link-local, CGNAT, multicast, documentation,
  reserved, ...), and hands aiohttp exactly the addresses it checked, so the connection goes to a
  checked address (no DNS-rebinding window). :func:`guarded_session` is the client session built on
  it (no DNS cache, no proxy from the environment).
Loopback is accepted only for hosts on the dev allowlist (:func:`dev_allowlist`: empty outside
development).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

if TYPE_CHECKING:
    from ..config import Settings

__all__ = [
    "MAX_URL",
    "BlockedAddress",
    "GuardedResolver",
    "HostResolver",
    "RefusedUrl",
    "address_allowed",
    "check_target",
    "check_url",
    "dev_allowlist",
    "fetch_timeout",
    "guarded_session",
    "ip_literal",
    "system_resolver",
]

MAX_URL = 2048  # characters; longer URLs are refused before any request

HostResolver = Callable[[str, int], Awaitable[list[str]]]
"""``async (host, port) -> [ip, ...]``: the name-resolution seam (tests inject their own)."""

_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class BlockedAddress(OSError):
    """A host resolved to an address the guard refuses (raised inside aiohttp's resolver call)."""


class RefusedUrl(ValueError):
    """A URL the outbound policy refuses. ``str(exc)`` says why without repeating the URL (a webhook
    URL may carry a token, any URL credentials), so it may be logged and stored."""


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    return None


def address_allowed(address: str, *, allow_loopback: bool = False) -> bool:
    """True when ``address`` is a globally routable unicast address (Python's ``is_global``, which
    follows the IANA special-purpose registries, RFC 6890), or loopback when ``allow_loopback``.
    IPv6 forms that embed an IPv4 address (mapped, NAT64, 6to4, Teredo) are judged by that address;
    other reserved IPv6 addresses are refused."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        v4 = _embedded_v4(ip)
        if v4 is not None:
            ip = v4
    if ip.is_loopback:
        return allow_loopback
    # reserved: the rest of ::/8, which embeds IPv4 in ways a network may translate (IPv4-compatible
    # ::a.b.c.d, SIIT ::ffff:0:a.b.c.d, local NAT64 64:ff9b:1::/48) and which is_global lets through
    return ip.is_global and not ip.is_multicast and not ip.is_reserved


def ip_literal(host: str) -> bool:
    """True when ``host`` is an IP address literal (aiohttp connects to those without resolving)."""
    try:
        ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return False
    return True


def dev_allowlist(settings: Settings) -> frozenset[str]:
    """The lower-case dev allowlist (``settings.dev_profile_hosts``) in development, else empty."""
    return frozenset(h.lower() for h in settings.dev_profile_hosts) if settings.dev_mode else frozenset()


def check_url(url: str, *, dev_hosts: frozenset[str] = frozenset(), what: str = "target") -> str:
    """The URL half of the policy without the address rule; returns ``url`` unchanged.

    Args:
        url: the candidate URL.
        dev_hosts: lower-case host names for which plain ``http`` is accepted (the dev allowlist).
        what: the noun of the messages (``"profile"`` -> "profile URL must use https").
    Raises:
        RefusedUrl: not a string, empty or longer than :data:`MAX_URL`; unparseable (by the standard
            library or by yarl, aiohttp's parser; a port out of range); no host; credentials
            (userinfo); a scheme other than https, or http for a host off ``dev_hosts`` (by both
            parsers' reading of the host).
    """
    if not isinstance(url, str) or not url or len(url) > MAX_URL:
        raise RefusedUrl(f"{what} URL is empty or too long")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        _ = parts.port  # raises ValueError on a bad port
        wire = URL(url)  # what aiohttp will parse and connect to
        wire_host = wire.raw_host
        _ = wire.port
    except (ValueError, TypeError):
        raise RefusedUrl(f"{what} URL cannot be parsed") from None
    if not host or not wire_host:
        raise RefusedUrl(f"{what} URL has no host")
    if parts.username is not None or parts.password is not None or wire.user is not None or wire.password is not None:
        raise RefusedUrl(f"{what} URL must not carry credentials")
    scheme = parts.scheme.lower()
    if scheme == "https":
        return url
    if scheme == "http" and host.lower() in dev_hosts and wire_host.lower() in dev_hosts:
        return url
    raise RefusedUrl(f"{what} URL must use https")


def _unresolved(host: str) -> bool:
    """True when aiohttp connects to ``host`` without calling the resolver: an IP literal, or what
    its heuristic takes for one (a colon, or only digits and dots: ``helpers.is_ip_address``)."""
    return ip_literal(host) or ":" in host or host.replace(".", "").isdigit()


def check_target(url: str, *, dev_hosts: frozenset[str] = frozenset(), what: str = "target") -> str:
    """The whole URL policy of an outbound request (profile fetch, webhook POST); returns ``url``.

    :func:`check_url`, and then the address rule for a host aiohttp connects to without resolving
    (the resolver guard never sees it): it must pass :func:`address_allowed`, loopback only for a
    host on ``dev_hosts``. Named hosts are judged at connect time by :class:`GuardedResolver`.
    Raises: RefusedUrl (the reasons of :func:`check_url`; "<what> host is a special-use address").
    """
    check_url(url, dev_hosts=dev_hosts, what=what)
    for host in {urlsplit(url).hostname or "", URL(url).raw_host or ""}:
        if _unresolved(host) and not address_allowed(host, allow_loopback=host.lower() in dev_hosts):
            raise RefusedUrl(f"{what} host is a special-use address")
    return url


async def system_resolver(host: str, port: int) -> list[str]:
    """Resolve with the OS resolver (``getaddrinfo``), TCP only."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class GuardedResolver(AbstractResolver):
    """aiohttp resolver that applies :func:`address_allowed` to every address of a host.

    Args:
        base: the name-resolution function (default :func:`system_resolver`).
        loopback_hosts: lower-case host names allowed to resolve to loopback (dev allowlist).
    Raises (from ``resolve``): BlockedAddress (an OSError, so aiohttp wraps it in
        ``ClientConnectorDNSError``) when any address is refused or none is found.
    """

    def __init__(self, base: HostResolver | None = None, *, loopback_hosts: frozenset[str] = frozenset()):
        self._base = base or system_resolver
        self._loopback_hosts = loopback_hosts

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        try:
            addresses = await self._base(host, port)
        except OSError as exc:
            raise socket.gaierror(f"cannot resolve {host}: {exc}") from None
        if not addresses:
            raise socket.gaierror(f"cannot resolve {host}")
        loopback_ok = host.lower() in self._loopback_hosts
        refused = [a for a in addresses if not address_allowed(a, allow_loopback=loopback_ok)]
        if refused:
            raise BlockedAddress(f"{host} resolves to a special-use address")
        out: list[ResolveResult] = []
        for a in addresses:
            fam = socket.AF_INET6 if ":" in a else socket.AF_INET
            out.append(_result(host, a, port, fam))
        return out

    async def close(self) -> None:
        return None


def fetch_timeout(settings: Settings) -> aiohttp.ClientTimeout:
    """The timeout of one outbound fetch (a profile, a key directory): connect within
    ``profile_fetch_connect_timeout``, each read within ``profile_fetch_read_timeout`` seconds,
    the whole exchange within their sum."""
    return aiohttp.ClientTimeout(
        total=settings.profile_fetch_connect_timeout + settings.profile_fetch_read_timeout,
        sock_connect=settings.profile_fetch_connect_timeout,
        sock_read=settings.profile_fetch_read_timeout,
    )


def guarded_session(
    *,
    dev_hosts: frozenset[str] = frozenset(),
    resolver: HostResolver | None = None,
    auto_decompress: bool = True,
    limit: int = 100,
) -> aiohttp.ClientSession:
    """A client session for outbound requests under the guard: every named host is resolved by
    :class:`GuardedResolver` (``dev_hosts`` may resolve to loopback) with no DNS cache, so each
    connection goes to an address checked for it; no proxy or netrc from the environment
    (``trust_env=False``: a proxy would connect for us, unchecked). Callers still check each URL with
    :func:`check_target` (IP literals never reach the resolver) and pass ``allow_redirects=False``.
    Create it inside the running event loop; close it when done.
    """
    connector = aiohttp.TCPConnector(
        resolver=GuardedResolver(resolver, loopback_hosts=dev_hosts), use_dns_cache=False, limit=limit
    )
    return aiohttp.ClientSession(connector=connector, trust_env=False, auto_decompress=auto_decompress)


def _result(host: str, address: str, port: int, family: socket.AddressFamily) -> Any:
    return ResolveResult(hostname=host, host=address, port=port, family=family, proto=0, flags=socket.AI_NUMERICHOST)
