"""Where the platform node is served and the origin its URLs are built from (pure).

The platform node (the platform's ``/.well-known/ucp`` and its leaves, listing the companies, and
the ``/ucp/agent-graph`` pages) is served only on the configured platform hosts
(``settings.platform_hosts``); a Host bound to no company and not among them is answered 404
``not_found``. Every URL in those documents is built from the configured public origin
(``settings.platform_origin``), never from the request's ``Host`` (or ``X-Forwarded-Host``, which
the gateway never reads), so a client cannot make the platform publish links to a host of its
choosing. With neither setting there is no platform node (production's default: fail closed).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from ..config import Settings
from ..errors import BadRequest, ConfigError, NotFound
from ..tenancy import bindable_hostname, normalize_host, public_origin

__all__ = ["NotThePlatform", "PlatformNode", "platform_node"]


class NotThePlatform(NotFound):
    """A Host bound to no company and not one of the platform hosts (404 ``not_found``)."""

    def __init__(self, message: str = "this host serves no company and is not one of the platform's hosts"):
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class PlatformNode:
    """The platform node's hosts and origin.

    Attributes:
        hosts: normalised host names (``tenancy.normalize_host``) that serve the platform node;
            empty: none does.
        origin: ``scheme://host[:port]`` of every URL in its documents (None with no hosts).
        link_port: the port of the company links in the agent graph: ``public_port``, else the
            origin's own port (the companies are served by the same gateway), else None (the
            scheme's default).
    """

    hosts: frozenset[str]
    origin: str | None
    link_port: int | None

    def serves(self, host: str | None) -> bool:
        """Whether a request's Host value (``Platform.Example:8443``) names a platform host."""
        return bool(self.hosts) and normalize_host(host) in self.hosts

    def check(self, host: str | None) -> None:
        """Raise :class:`NotThePlatform` unless ``host`` names a platform host."""
        if not self.serves(host):
            raise NotThePlatform


def platform_node(settings: Settings) -> PlatformNode:
    """The :class:`PlatformNode` of ``settings`` (``platform_hosts``, ``platform_origin``,
    ``public_scheme``, ``public_port``).

    ``platform_origin`` must be ``http(s)://host[:port]`` with no user, path, query or fragment; its
    host is served when ``platform_hosts`` is empty. Without ``platform_origin`` the origin is
    ``public_origin(public_scheme, platform_hosts[0], public_port)``.
    Raises: ConfigError for a host name or origin that is not one.
    """
    try:
        hosts = [bindable_hostname(h) for h in settings.platform_hosts]
    except BadRequest as exc:
        raise ConfigError(f"platform_hosts: {exc}") from None
    origin, port = None, None
    if settings.platform_origin:
        raw = settings.platform_origin.strip()
        parts = urlsplit(raw)
        try:
            port = parts.port
            host = bindable_hostname(parts.hostname or "")
        except (ValueError, BadRequest):
            host = ""
        if (
            parts.scheme not in ("http", "https")
            or not host
            or parts.username is not None
            or parts.path not in ("", "/")
            or parts.query
            or parts.fragment
            or raw.endswith(("?", "#"))
        ):
            raise ConfigError(f"platform_origin must be http(s)://host[:port], not {raw!r}")
        origin = public_origin(parts.scheme, host, port)
        if not hosts:
            hosts = [host]
    elif hosts:
        origin = public_origin(settings.public_scheme, hosts[0], settings.public_port)
        port = settings.public_port
    link_port = settings.public_port if settings.public_port is not None else port
    return PlatformNode(frozenset(hosts), origin, link_port)
