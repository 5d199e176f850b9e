"""SSRF guard for outbound profile fetches (UCP overview "Fetching"; HEAD: RFC 6890 special-use ranges).

The guard resolves the host itself, refuses the fetch when ANY address is special-use (loopback,
private, link-local, CGNAT, multicast, documentation, reserved, ...), and hands aiohttp exactly the
addresses it checked, so the connection goes to a checked address (no DNS-rebinding window).
Loopback is accepted only for hosts on the dev allowlist.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.abc import AbstractResolver, ResolveResult

__all__ = [
    "BlockedAddress",
    "GuardedResolver",
    "HostResolver",
    "address_allowed",
    "ip_literal",
    "system_resolver",
]

HostResolver = Callable[[str, int], Awaitable[list[str]]]
"""``async (host, port) -> [ip, ...]``: the name-resolution seam (tests inject their own)."""

_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class BlockedAddress(OSError):
    """A host resolved to an address the guard refuses (raised inside aiohttp's resolver call)."""


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
    IPv6 forms that embed an IPv4 address (mapped, NAT64, 6to4, Teredo) are judged by that address."""
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
    return ip.is_global and not ip.is_multicast


def ip_literal(host: str) -> bool:
    """True when ``host`` is an IP address literal (aiohttp connects to those without resolving)."""
    try:
        ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return False
    return True


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


def _result(host: str, address: str, port: int, family: socket.AddressFamily) -> Any:
    return ResolveResult(hostname=host, host=address, port=port, family=family, proto=0, flags=socket.AI_NUMERICHOST)
