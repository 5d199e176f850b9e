"""Platform, companies, sub-agents, and Host -> company resolution.

A company is bound to one or more hostnames; a request whose Host is bound to no company is served
by the platform node. Host matching is case-insensitive and ignores the port (RFC 9110 §7.2: the
host is case-insensitive).
"""

from __future__ import annotations

import ipaddress
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import asyncpg

from .company_settings import CompanyMisconfigured, check_settings, json_type
from .db import platform_scan_tx, platform_tx, tenant_tx
from .errors import BadRequest, Conflict, NotFound
from .logs import get_logger

__all__ = [
    "INSERT_COMPANY",
    "SUBAGENTS",
    "TIERS",
    "Company",
    "CompanyMisconfigured",
    "CompanyNotFound",
    "CompanyRow",
    "bindable_hostname",
    "company_row",
    "create_company",
    "get_company",
    "host_versions",
    "insert_company",
    "insert_company_args",
    "list_companies",
    "list_subagents",
    "normalize_host",
    "public_origin",
    "resolve_host",
    "resolve_host_versioned",
    "valid_host_header",
]

SUBAGENTS: tuple[str, ...] = ("sales", "ar", "ap", "commissions", "service", "compliance", "marketing", "ops")
TIERS: tuple[str, ...] = ("starter", "growth", "pro", "enterprise")  # ordered low -> high
SIGNATURE_POLICIES: tuple[str, ...] = ("required", "optional", "log", "off")  # docs/access.md; "strict" = required
_SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_HOST = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")
_HOST_PORT = re.compile(r"^[^:]*:\d*$")  # one colon, digits after it: host:port, not an IPv6 literal
_log = get_logger("ucp_gateway.tenancy")


class CompanyNotFound(NotFound):
    code = "company_not_found"


@dataclass(frozen=True, slots=True)
class Company:
    """A tenant. ``settings`` is a JSON object owned by the subsystems (verbs, commerce, httpsig): read
    its known sections through :func:`ucp_gateway.company_settings.setting`, which knows their types."""

    id: UUID
    slug: str
    display_name: str
    tier: str
    signature_policy: str
    hostnames: tuple[str, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": str(self.id),
            "slug": self.slug,
            "display_name": self.display_name,
            "tier": self.tier,
            "signature_policy": self.signature_policy,
            "hostnames": list(self.hostnames),
        }


# Host as it may appear in the URLs we publish: reg-name or IPv4 (a fully qualified name may end in
# one dot), or a bracketed IPv6 (checked below), then an optional port.
_HOST_HEADER = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?\.?|\[([0-9A-Fa-f:.]{2,45})\])(?::\d{1,5})?$"
)


def valid_host_header(host: str) -> bool:
    """True for a plain ``host[:port]`` Host header value (RFC 9110 §7.2) with a port in 1-65535:
    what may be echoed into published URLs (profiles, ``continue_url``, permalinks). A bracketed
    host must be an IPv6 address (RFC 3986 §3.2.2 IP-literal; ``[::1]``, not ``[1.2.3.4]`` or
    ``[:::::::]``), and neither an IPv4-mapped one (``[::ffff:127.0.0.1]``: use the IPv4 form) nor a
    deprecated IPv4-compatible one (``[::127.0.0.1]``; ``[::]`` and ``[::1]`` are not those); a name
    may end in one dot (``shop.example.``, the same host: RFC 1034 §3.1)."""
    m = _HOST_HEADER.match(host)
    if m is None:
        return False
    if m.group(1) is not None:
        try:
            addr = ipaddress.IPv6Address(m.group(1))
        except ValueError:
            return False
        if addr.ipv4_mapped is not None:  # never a bound hostname: a mapped address is reached by its IPv4 form
            return False
        if int(addr) >> 32 == 0 and int(addr) > 1:  # IPv4-compatible (::a.b.c.d), deprecated by RFC 4291 §2.5.5.1
            return False
    port = host.rsplit(":", 1)[1] if ":" in host and not host.endswith("]") else None
    return port is None or 0 < int(port) <= 65535


def normalize_host(host: str | None) -> str:
    """Lower-case host without port or trailing dot: ``"Shop.Example:8443"`` -> ``"shop.example"``.

    Handles bracketed IPv6 (``"[::1]:8080"`` -> ``"::1"``); an IPv6 literal comes back in its
    compressed form (RFC 5952, ``ipaddress``), so every spelling of one address is one host
    (``"[0:0:0:0:0:0:0:1]"`` -> ``"::1"``); one that does not parse comes back lower-cased as it is.
    Returns ``""`` for a missing host.
    """
    if not host:
        return ""
    h = host.strip().lower()
    if h.startswith("["):
        end = h.find("]")
        h = h[1:end] if end > 0 else ""
    elif h.count(":") == 1:
        h = h.split(":", 1)[0]
    if ":" in h:
        try:
            return ipaddress.IPv6Address(h).compressed
        except ValueError:
            return h
    return h.rstrip(".")


def public_origin(scheme: str, host: str, port: int | None = None) -> str:
    """``scheme://host[:port]``, the origin written into URLs the gateway publishes.

    Args:
        scheme: ``https`` or ``http`` (``settings.public_scheme``).
        host: a Host header value (``shop.example:8443``, ``[::1]:8080``) or a stored hostname
            (``shop.example``, ``::1``; an IPv6 literal is bracketed). A name's trailing dot is
            dropped (``shop.example.`` is published as ``shop.example``, the name it is stored as)
            and an IPv6 address is written compressed (``[0:0:0:0:0:0:0:1]`` as ``[::1]``).
        port: the configured public port (``settings.public_port``); None keeps the port ``host``
            carries, if any.
    Returns: the origin without a trailing slash; the scheme's default port (80/443) is left out
        (RFC 3986 §6.2.3), any other port is kept, so a gateway on :8182 never links to :80.
    """
    own = ""
    if host.startswith("["):
        end = host.find("]")
        name, rest = host[: end + 1], host[end + 1 :]
        own = rest[1:] if rest.startswith(":") else ""
        try:  # one spelling per address in what we publish, as stored (RFC 5952)
            name = f"[{ipaddress.IPv6Address(name[1:-1]).compressed}]"
        except ValueError:
            pass
    elif host.count(":") == 1:
        name, own = host.split(":", 1)
    elif ":" in host:
        name = f"[{host}]"
    else:
        name = host
    name = name.rstrip(".") or name  # "shop.example." is shop.example: publish the name it is stored as
    if port is None and own.isdigit():
        port = int(own)
    if port is None or port == (443 if scheme == "https" else 80):
        return f"{scheme}://{name}"
    return f"{scheme}://{name}:{port}"


# (company id, JSON type) -> when a directory listing last logged it (time.monotonic()): a listing
# (the public agent graph, every scheduler round) reads every row, so one bad row would log a line
# per anonymous request; it is logged once per _LISTED_LOG_EVERY seconds instead
_listed_logged: dict[tuple[UUID, str], float] = {}
_LISTED_LOG_EVERY = 600.0


def _row_to_company(r: asyncpg.Record, hosts: list[str], *, serving: bool = True) -> Company:
    settings = r["settings"]
    if type(settings) is not dict:  # an operator's SQL (a row older than migration 0057's CHECK)
        kind = json_type(settings)
        key, now = (r["id"], kind), time.monotonic()
        if serving or now - _listed_logged.get(key, -_LISTED_LOG_EVERY) >= _LISTED_LOG_EVERY:
            if not serving:
                if len(_listed_logged) >= 1024:  # bounded: a clear only costs a line per bad row
                    _listed_logged.clear()
                _listed_logged[key] = now
            _log.error("company_settings_invalid", company_id=str(r["id"]), slug=r["slug"], json_type=kind)
        if serving:  # fail closed: nothing is served with settings the gateway cannot read
            raise CompanyMisconfigured(f"company {r['slug']!r} is misconfigured: its settings are a JSON {kind}")
        settings = {}  # a directory listing: no reader of it uses settings
    return Company(
        id=r["id"],
        slug=r["slug"],
        display_name=r["display_name"],
        tier=r["tier"],
        signature_policy=r["signature_policy"],
        hostnames=tuple(sorted(hosts)),
        settings=dict(settings),
    )


_SELECT = (
    "SELECT c.id, c.slug, c.display_name, c.tier, c.signature_policy, c.settings, "
    " coalesce(array_agg(h.hostname) FILTER (WHERE h.hostname IS NOT NULL), '{}') AS hosts "
    "FROM companies c LEFT JOIN company_hosts h ON h.company_id = c.id "
)


# one directory page: the page's companies by the slug index first (LIMIT before anything else),
# then each one's hostnames, so a page reads its own rows only, wherever the cursor is
_PAGE = (
    "SELECT c.id, c.slug, c.display_name, c.tier, c.signature_policy, c.settings,"
    " ARRAY(SELECT h.hostname FROM company_hosts h WHERE h.company_id = c.id) AS hosts"
    " FROM (SELECT * FROM companies WHERE ($1::text IS NULL OR slug > $1) ORDER BY slug LIMIT $2) c ORDER BY c.slug"
)


async def resolve_host(pool: asyncpg.Pool, host: str | None) -> Company | None:
    """The company bound to ``host`` (Host header value), or None for the platform node.
    Raises: CompanyMisconfigured (the company's row cannot be served), database errors."""
    company, _ = await resolve_host_versioned(pool, host)
    return company


async def resolve_host_versioned(pool: asyncpg.Pool, host: str | None) -> tuple[Company | None, UUID | None]:
    """:func:`resolve_host` and the company's profile version (migration 0092; None for the
    platform node), read in one statement under the scan scope ``host_directory`` (which opens the
    version stamps only). Raises as :func:`resolve_host`."""
    name = normalize_host(host)
    if not name:
        return None, None
    async with platform_scan_tx(pool, "host_directory") as conn:
        r = await conn.fetchrow(_RESOLVE, name)
    return (_row_to_company(r, list(r["hosts"])), r["version"]) if r else (None, None)


# one host's company with its hostnames and its profile version
_RESOLVE = (
    "SELECT c.id, c.slug, c.display_name, c.tier, c.signature_policy, c.settings,"
    " ARRAY(SELECT h.hostname FROM company_hosts h WHERE h.company_id = c.id) AS hosts,"
    " (SELECT v.version FROM profile_versions v WHERE v.company_id = c.id) AS version"
    " FROM companies c WHERE c.id = (SELECT company_id FROM company_hosts WHERE hostname = $1)"
)
# many hosts' companies and versions at once (the host cache's revalidation): hostname -> both
_HOST_VERSIONS = (
    "SELECT q.hostname, h.company_id, v.version FROM unnest($1::text[]) AS q (hostname)"
    " LEFT JOIN company_hosts h ON h.hostname = q.hostname LEFT JOIN profile_versions v ON v.company_id = h.company_id"
)


async def host_versions(pool: asyncpg.Pool, names: list[str]) -> dict[str, tuple[UUID | None, UUID | None]]:
    """``{hostname: (company id, profile version)}`` of normalised ``names`` in one read ((None,
    None): the platform node)."""
    async with platform_scan_tx(pool, "host_directory") as conn:
        rows = await conn.fetch(_HOST_VERSIONS, names)
    return {r["hostname"]: (r["company_id"], r["version"]) for r in rows}


async def get_company(pool: asyncpg.Pool, slug_or_id: str) -> Company:
    """Look a company up by slug or UUID. Raises CompanyNotFound, CompanyMisconfigured."""
    try:
        cid: UUID | None = UUID(slug_or_id)
    except ValueError:
        cid = None
    async with platform_tx(pool) as conn:
        if cid is not None:
            r = await conn.fetchrow(_SELECT + "WHERE c.id = $1 GROUP BY c.id", cid)
        else:
            r = await conn.fetchrow(_SELECT + "WHERE c.slug = $1 GROUP BY c.id", slug_or_id.lower())
    if r is None:
        raise CompanyNotFound(f"unknown company {slug_or_id!r}")
    return _row_to_company(r, list(r["hosts"]))


async def list_companies(pool: asyncpg.Pool, *, after_slug: str | None = None, limit: int = 100) -> list[Company]:
    """Companies ordered by slug, keyset-paginated: those with slug > ``after_slug``, at most ``limit``.

    The directory (agent graph, key rotation, KEK rewrap, ``companies list``) goes on past a company
    whose settings are not a JSON object: it is listed with empty ``settings`` (and logged), while
    :func:`resolve_host` and :func:`get_company`, which serve it, raise CompanyMisconfigured."""
    async with platform_tx(pool) as conn:
        rows = await conn.fetch(_PAGE, after_slug, limit)
    return [_row_to_company(r, list(r["hosts"]), serving=False) for r in rows]


def _validate(slug: str, display_name: str, tier: str, signature_policy: str, hostnames: list[str]) -> list[str]:
    if not _SLUG.match(slug):
        raise BadRequest("slug must be 1-63 lower-case letters, digits or '-', starting with a letter or digit")
    if not display_name.strip() or len(display_name) > 200:
        raise BadRequest("display name must be 1-200 characters")
    if tier not in TIERS:
        raise BadRequest(f"tier must be one of {', '.join(TIERS)}")
    if signature_policy not in SIGNATURE_POLICIES:
        raise BadRequest(f"signature policy must be one of {', '.join(SIGNATURE_POLICIES)}")
    return sorted({_hostname(h) for h in hostnames})


_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def _dns_name_or_ipv4(h: str) -> bool:
    """``h`` (lower-case, no trailing dot) is a DNS name of LDH labels (RFC 1123 §2.1: 1-63 characters,
    no leading or trailing hyphen, no empty label) whose last label is not all digits, or an IPv4
    address in dotted-quad form (``ipaddress``: four decimal parts, no leading zeros), so that one
    address has one spelling (``127.000.000.001``, ``2130706433`` and ``0x7f.0.0.1`` are refused)."""
    labels = h.split(".")
    if labels[-1].isdigit():
        try:
            ipaddress.IPv4Address(h)
        except ValueError:
            return False
        return True
    return all(_LABEL.match(label) for label in labels)


def _hostname(raw: str) -> str:
    """A hostname to bind as stored: a lower-case host name or IPv4 address without a trailing dot,
    or an IPv6 literal (bracketed or not) in its compressed form, unbracketed. Raises BadRequest for
    anything else: a port, a zone id, an IPv4-mapped address, a malformed name or address."""
    h = raw.strip().lower()
    bracketed = h.startswith("[") and h.endswith("]")
    if bracketed:
        h = h[1:-1]
    if ":" not in h and not bracketed:
        h = h.rstrip(".")
        if _HOST.match(h) and _dns_name_or_ipv4(h):
            return h
        if not h.isascii():  # an internationalised name: stored, and sent in Host, as its IDNA form
            try:
                ascii_form = h.encode("idna").decode("ascii")
            except UnicodeError:
                ascii_form = None
            if ascii_form and _HOST.match(ascii_form) and _dns_name_or_ipv4(ascii_form):
                raise BadRequest(f"invalid hostname {raw!r}: give its ASCII (IDNA) form, {ascii_form}")
        raise BadRequest(f"invalid hostname {raw!r}")
    if not bracketed and (_HOST_PORT.match(h) or (h.startswith("[") and "]:" in h)):
        raise BadRequest(f"invalid hostname {raw!r}: give the host without a port")
    try:
        ip = ipaddress.IPv6Address(h)
    except ValueError:
        raise BadRequest(f"invalid hostname {raw!r}: neither a host name nor an IPv6 address") from None
    if ip.scope_id is not None or ip.ipv4_mapped is not None or ip.is_unspecified:
        # a zone is local to one machine; an IPv4-mapped address is the IPv4 host (bind that)
        raise BadRequest(f"invalid hostname {raw!r}: an IPv6 address without a zone, not IPv4-mapped nor ::")
    return ip.compressed


def bindable_hostname(raw: str) -> str:
    """``raw`` as a company (or platform) host name is stored: lower-case, no trailing dot, an IPv6
    literal compressed and unbracketed. Raises BadRequest as :func:`create_company` does for a
    port, a zone id, an IPv4-mapped address or a malformed name or address."""
    return _hostname(raw)


async def create_company(
    pool: asyncpg.Pool,
    *,
    slug: str,
    display_name: str,
    hostnames: list[str] | tuple[str, ...] = (),
    tier: str = "starter",
    signature_policy: str = "required",
    subagents: dict[str, bool] | None = None,
    settings: dict[str, Any] | None = None,
) -> Company:
    """Create a company, its hostnames and its sub-agent rows in one transaction.

    Args:
        subagents: name -> enabled; names missing from the map are created enabled.
        settings: a JSON object; its known sections must have their types
            (:func:`ucp_gateway.company_settings.check_settings`), other keys are free-form.
    Returns: the new :class:`Company`.
    Raises: BadRequest (invalid fields, settings of the wrong type, or a row the database's checks
        refuse), Conflict (slug or hostname taken). Nothing is written then.
    """
    row = company_row(
        slug=slug,
        display_name=display_name,
        hostnames=hostnames,
        tier=tier,
        signature_policy=signature_policy,
        subagents=subagents,
        settings=settings,
    )
    try:
        async with tenant_tx(pool, row.id) as conn:
            await insert_company(conn, row)
    except asyncpg.UniqueViolationError as exc:
        what = "hostname" if "company_hosts" in (exc.table_name or "") else "slug"
        raise Conflict(f"{what} already taken", code=f"{what}_taken") from None
    except asyncpg.IntegrityConstraintViolationError as exc:  # a CHECK _validate did not foresee
        raise BadRequest(f"the database refused the company ({exc.constraint_name or exc.sqlstate})") from None
    return row.company


@dataclass(frozen=True, slots=True)
class CompanyRow:
    """A validated company to insert (:func:`company_row`): the :class:`Company` (new random id)
    and its sub-agents' ``{name: enabled}``."""

    company: Company
    subagents: dict[str, bool]

    @property
    def id(self) -> UUID:
        return self.company.id


def company_row(
    *,
    slug: str,
    display_name: str,
    hostnames: list[str] | tuple[str, ...] = (),
    tier: str = "starter",
    signature_policy: str = "required",
    subagents: dict[str, bool] | None = None,
    settings: dict[str, Any] | None = None,
) -> CompanyRow:
    """The company :func:`create_company` would write, validated, with a new id (pure). Raises
    BadRequest as :func:`create_company` does for invalid fields."""
    signature_policy = "required" if signature_policy == "strict" else signature_policy
    hosts = _validate(slug, display_name, tier, signature_policy, list(hostnames))
    settings = check_settings(settings)
    enabled = {name: True for name in SUBAGENTS} | {k: bool(v) for k, v in (subagents or {}).items()}
    unknown = set(enabled) - set(SUBAGENTS)
    if unknown:
        raise BadRequest(f"unknown sub-agent(s): {', '.join(sorted(unknown))}")
    company = Company(uuid.uuid4(), slug, display_name.strip(), tier, signature_policy, tuple(hosts), settings)
    return CompanyRow(company, enabled)


#: One new company in one statement (migration 0091): its row, hostnames, sub-agents and, when
#: given, its first key (active) with the key's event, in the company's own tenant context.
INSERT_COMPANY = "SELECT company_insert($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"


def insert_company_args(row: CompanyRow, first_key: Any = None, at: Any = None) -> tuple[Any, ...]:
    """The parameters of :data:`INSERT_COMPANY` for ``row`` (pure). ``first_key``: an object with
    ``kid``, ``public_jwk``, ``private_enc`` and ``kek_id`` (``keys.NewKey``), written active as of
    ``at`` (aware UTC datetime); None: no key."""
    c, k = row.company, first_key
    return (
        str(c.id),
        c.slug,
        c.display_name,
        c.tier,
        c.signature_policy,
        c.settings,
        list(c.hostnames),
        list(row.subagents),
        list(row.subagents.values()),
        *((k.kid, k.public_jwk, k.private_enc, k.kek_id, at) if k is not None else (None,) * 5),
    )


async def insert_company(conn: asyncpg.Connection, row: CompanyRow, first_key: Any = None, at: Any = None) -> None:
    """Write ``row``'s company, hostnames and sub-agents (and ``first_key``, see
    :func:`insert_company_args`) on ``conn``, inside a transaction; the statement sets the tenant
    context to ``row.id`` for the rest of it. Raises asyncpg's UniqueViolationError (slug or
    hostname taken) and integrity errors."""
    await conn.execute(INSERT_COMPANY, *insert_company_args(row, first_key, at))


async def list_subagents(pool: asyncpg.Pool, company_id: UUID) -> dict[str, bool]:
    """Sub-agent name -> enabled, for one company (read in its tenant context)."""
    async with tenant_tx(pool, company_id) as conn:
        rows = await conn.fetch("SELECT name, enabled FROM subagents ORDER BY name")
    return {r["name"]: r["enabled"] for r in rows}
