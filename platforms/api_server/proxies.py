"""The reverse proxies whose word the API server takes about a request (``platforms.api_server.trusted_proxies``).

A request whose peer is a trusted proxy is seen as the proxy says it came: from the client address of
``X-Forwarded-For`` (or ``Forwarded: for=``), over the scheme of ``X-Forwarded-Proto`` (``proto=``), for the host of
``X-Forwarded-Host`` (``host=``). The chain of addresses is read from the right, the nearest proxy first, and a hop
is believed only while the one who wrote it is trusted: the first address that is not a trusted proxy is the
client, whatever a client wrote further left. ``X-Forwarded-*`` is read when the request has any of them, else
``Forwarded`` (so a proxy that sets only ``Forwarded`` must drop the ``X-Forwarded-*`` a client sends). A request
from any other peer, and every request when no proxy is trusted (the default), is seen as it is.

:meth:`TrustedProxies.install` makes this the application's outermost middleware, so the guards' same-origin check
and the console's cookies and login throttle see the scheme, host and client address the browser used.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec
from aiohttp import web
from aiohttp.typedefs import Handler

__all__ = ["Seen", "TrustedProxies", "address_of"]

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_HOST = re.compile(r"[A-Za-z0-9._~-]{1,253}(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]{2,45}\](:[0-9]{1,5})?")
_SCHEMES = ("http", "https")
_MAX_HOPS = 32  # a longer chain is read no further (the client is then the last hop believed)


class Seen(msgspec.Struct, frozen=True, kw_only=True):
    """How a request came, as its trusted proxies tell it: ``None`` where they said nothing believable."""

    remote: str | None = None
    scheme: str | None = None
    host: str | None = None


class _Hop(msgspec.Struct, frozen=True):
    """One proxy's record of the connection it took: from ``address``, over ``scheme``, for ``host``."""

    address: str | None
    scheme: str | None = None
    host: str | None = None


def address_of(token: str) -> str | None:
    """The IP address a forwarding header names (``203.0.113.7``, ``203.0.113.7:4711``, ``"[2001:db8::1]:80"``,
    ``2001:db8::1``), or ``None`` for anything else (``unknown``, an obfuscated ``_id``)."""
    token = token.strip().strip('"')
    if token.startswith("["):
        token = token[1:].partition("]")[0]
    elif token.count(":") == 1:
        token = token.partition(":")[0]
    try:
        return str(ipaddress.ip_address(token))
    except ValueError:
        return None


def _values(headers: Mapping[str, str], name: str) -> list[str]:
    """The comma-separated values of every ``name`` header, in order."""
    getall = getattr(headers, "getall", None)
    lines = getall(name, ()) if getall is not None else [headers[name]] if name in headers else []
    return [value.strip() for line in lines for value in line.split(",")]


def _scheme(value: str | None) -> str | None:
    value = value.strip().lower() if value else None
    return value if value in _SCHEMES else None


def _host(value: str | None) -> str | None:
    value = value.strip() if value else None
    return value if value and _HOST.fullmatch(value) else None


def _x_forwarded(headers: Mapping[str, str]) -> list[_Hop]:
    """The hops of ``X-Forwarded-For`` with the proto and host each proxy added (those lists align from the right
    when each proxy appends; a single value is the nearest proxy's)."""
    addresses = _values(headers, "X-Forwarded-For")[-_MAX_HOPS:]
    schemes, hosts = _values(headers, "X-Forwarded-Proto"), _values(headers, "X-Forwarded-Host")
    if not addresses:  # only a proto or host: the peer's own word about the connection it took
        return [_Hop(None, _scheme(schemes[-1] if schemes else None), _host(hosts[-1] if hosts else None))]

    def nth_from_right(values: list[str], place: int) -> str | None:
        return values[-place] if len(values) >= place else values[-1] if values else None

    count = len(addresses)
    return [
        _Hop(
            address,
            _scheme(nth_from_right(schemes, count - index)),
            _host(nth_from_right(hosts, count - index)),
        )
        for index, address in enumerate(addresses)
    ]


def _forwarded(elements: Sequence[Mapping[str, str]]) -> list[_Hop]:
    """The hops of RFC 7239 ``Forwarded`` elements (as aiohttp parses them)."""
    return [
        _Hop(element.get("for"), _scheme(element.get("proto")), _host(element.get("host")))
        for element in elements[-_MAX_HOPS:]
    ]


class TrustedProxies:
    """The proxies of ``networks`` (addresses or CIDR networks, as ``trusted_proxies`` lists them)."""

    def __init__(self, networks: Iterable[str]) -> None:
        self._networks: tuple[_Network, ...] = tuple(ipaddress.ip_network(n.strip(), strict=False) for n in networks)

    def trusts(self, address: str | None) -> bool:
        """Whether ``address`` (an IP address as text) is one of the trusted proxies."""
        if not address or not self._networks:
            return False
        parsed = address_of(address)
        if parsed is None:
            return False
        ip = ipaddress.ip_address(parsed)
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return any(ip in network for network in self._networks)

    def seen(self, peer: str | None, headers: Mapping[str, str], forwarded: Sequence[Mapping[str, str]]) -> Seen:
        """How a request from ``peer`` with ``headers`` (and its parsed ``Forwarded`` elements) came."""
        if not self.trusts(peer):
            return Seen()
        x_names = ("X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host")
        hops = _x_forwarded(headers) if any(name in headers for name in x_names) else _forwarded(forwarded)
        believed: _Hop | None = None
        writer: str | None = peer
        for hop in reversed(hops):
            if not self.trusts(writer):
                break
            believed, writer = hop, hop.address
        if believed is None:
            return Seen()
        remote = address_of(believed.address) if believed.address else None
        if remote is None and believed.address:
            remote = believed.address.strip()[:100] or None  # "unknown" or an obfuscated id: still one client
        return Seen(remote=remote, scheme=believed.scheme, host=believed.host)

    def install(self, app: web.Application) -> None:
        """Make the middleware ``app``'s outermost (nothing when no proxy is trusted)."""
        if self._networks:
            app.middlewares.insert(0, self.middleware)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Hand on ``request`` as its trusted proxies say it came."""
        seen = self.seen(request.remote, request.headers, request.forwarded)
        changes: dict[str, Any] = {name: value for name, value in msgspec.structs.asdict(seen).items() if value}
        return await handler(request.clone(**changes) if changes else request)
