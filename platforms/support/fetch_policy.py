"""Where an adapter may fetch a URL that a message names: the platform's own hosts, never this host's network.

A payload (a Teams activity, a QQ event, Twilio's webhook, an API answer about a file) can name any URL, and the
adapter that downloads it acts for whoever wrote the payload: a Web Chat user can name ``http://127.0.0.1/metrics``
or a cloud metadata service. A :class:`FetchPolicy` allows a URL when its host is one of the platform's file hosts
(or listed in the section's ``fetch.hosts``) and when the address connected to is public: never loopback, private,
link-local, shared (CGNAT), multicast, reserved or unspecified (an IPv4-mapped, NAT64 or 6to4 IPv6 address is
judged by the IPv4 address inside it), unless the section's ``fetch.allow_private`` lists the host or a network
holding the address.

A session of :func:`platforms.support.http_client.open_session` guarded by a policy enforces it on every
connection, redirects included: the policy's :meth:`~FetchPolicy.middleware` checks each request's URL before it is
sent (the host against the allowed names, and an IP-literal host, which aiohttp never resolves, against the address
rule), and its :meth:`~FetchPolicy.resolver` keeps only the addresses the rule allows (a name left with none is
refused), so the address connected to is the address checked, however the name resolves from one lookup to the
next. A refusal is :class:`FetchRefused`, which
:func:`platforms.support.downloads.fetch` turns into a refused attachment saying why.

URLs an adapter builds from its own configured base URL (Telegram's ``api_base_url``, a Mattermost, Matrix or
BlueBubbles server, signal-cli, Feishu's and WeCom's APIs, WeChat's CDN) are not named by a payload: they are
trusted as configured, private addresses included, and do not go through a policy.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import re
import socket
from collections.abc import Callable, Sequence

import aiohttp
import msgspec
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from hermes_actors.errors import ConfigError
from platforms.support.http_client import shown

__all__ = ["FetchPolicy", "FetchRefused", "FetchSettings", "base_resolver", "is_public"]

_log = logging.getLogger(__name__)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_HOST = re.compile(r"(\*\.)?[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?)*")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
# The special-purpose blocks of RFC 6890 and its updates, so the answer does not hang on the Python version's
# ipaddress tables (3.11's calls 192.0.0.8 global); ipaddress's is_global is asked as well.
_NOT_PUBLIC: tuple[Network, ...] = tuple(
    ipaddress.ip_network(block)
    for block in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.88.99.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/3",  # multicast, reserved and broadcast
        "::/96",  # unspecified, loopback and the deprecated IPv4-compatible form
        "64:ff9b:1::/48",  # local-use NAT64
        "100::/64",
        "2001::/23",  # IETF protocol assignments, Teredo among them
        "2001:db8::/32",
        "3fff::/20",
        "5f00::/16",
        "fc00::/7",
        "fe80::/10",
        "fec0::/10",  # site-local: deprecated, still routed inside some networks
        "ff00::/8",
    )
)

base_resolver: Callable[[], AbstractResolver] = aiohttp.DefaultResolver
"""Makes the resolver whose answers the policy filters; tests replace it with a fixed hosts mapping."""


class FetchRefused(aiohttp.ClientConnectionError):
    """A URL the policy does not let the adapter fetch; nothing was sent to it.

    ``problem`` completes "I could not read X: " for people (it never names a resolved address); ``str()`` is
    for logs and names the host, the addresses and the setting that would allow it.
    """

    def __init__(self, problem: str, detail: str) -> None:
        super().__init__(detail)
        self.problem = problem


class FetchSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``fetch`` part of a platform section: what its payload-named downloads may reach besides the defaults.

    ``hosts`` adds host names to the platform's file hosts (``files.example.com``, or ``*.example.com`` for its
    subdomains). ``allow_private`` lets a host (a name, ``*.name``) or a network (``10.0.0.0/8``, ``127.0.0.1``)
    be reached at a loopback or private address: for a deployment whose platform really lives inside its network.
    """

    hosts: list[str] = msgspec.field(default_factory=list)
    allow_private: list[str] = msgspec.field(default_factory=list)

    def check(self, path: str) -> None:
        """Raise :class:`ConfigError` naming the first entry that is neither a host name nor (for
        ``allow_private``) a network; ``path`` is the section's ``fetch`` (``platforms.teams.fetch``)."""
        for index, entry in enumerate(self.hosts):
            if _host_pattern(entry) is None:
                raise ConfigError(
                    f"{path}.hosts[{index}]",
                    f"{entry[:80]!r} is not a host name; write one such as files.example.com or *.example.com "
                    "(no scheme, port or path)",
                )
        for index, entry in enumerate(self.allow_private):
            try:
                _private_entry(entry)
            except ValueError as exc:
                raise ConfigError(f"{path}.allow_private[{index}]", str(exc)) from None


def is_public(address: Address) -> bool:
    """Whether ``address`` is on the public Internet: not loopback, private, link-local, shared, multicast,
    reserved, unspecified or site-local; an IPv6 address carrying an IPv4 one (mapped, NAT64, 6to4) by that one."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = address.ipv4_mapped or address.sixtofour
        if inner is None and address in _NAT64:
            inner = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if inner is not None:
            return is_public(inner)
    if not address.is_global or address.is_multicast or address.is_reserved or address.is_unspecified:
        return False
    return not any(address in network for network in _NOT_PUBLIC if network.version == address.version)


def _host_pattern(entry: str) -> str | None:
    """``entry`` as a host pattern (lower case, an IP literal in its short form), or ``None`` when it is not one."""
    text = entry.strip().lower().rstrip(".")
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(text.strip("[]")).compressed
    return text if len(text) <= 253 and _HOST.fullmatch(text) else None


def _private_entry(entry: str) -> Network | str:
    """``entry`` of ``allow_private`` as a network or a host pattern; :class:`ValueError` saying why it is neither."""
    text = entry.strip()
    try:
        return ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        if "/" in text:
            raise ValueError(
                f"{text[:80]!r} is not a network ({exc}); write one such as 10.0.0.0/8 or fd00::/8"
            ) from None
    pattern = _host_pattern(text)
    if pattern is None:
        raise ValueError(f"{text[:80]!r} is neither a host name nor a network such as 10.0.0.0/8 or 127.0.0.1")
    return pattern


def _matches(host: str, pattern: str) -> bool:
    return host.endswith(pattern[1:]) if pattern.startswith("*.") else host == pattern


def _address(text: str) -> Address | None:
    with contextlib.suppress(ValueError):
        return ipaddress.ip_address(text.split("%", 1)[0])  # a link-local address may carry its scope
    return None


class FetchPolicy:
    """What one platform's adapter may fetch of the URLs its payloads name.

    ``hosts`` are the platform's file hosts (``None``: any public host, for a platform that names none);
    ``settings`` the section's ``fetch``, already checked; ``platform`` names the platform in refusals
    (``"Teams"``), ``setting`` the section's ``fetch`` path in log lines (``"platforms.teams.fetch"``).
    """

    def __init__(self, settings: FetchSettings, *, platform: str, hosts: Sequence[str] | None, setting: str) -> None:
        self.platform = platform
        self.setting = setting
        given = [pattern for entry in settings.hosts if (pattern := _host_pattern(entry)) is not None]
        self.hosts: tuple[str, ...] | None = None if hosts is None else (*hosts, *given)
        entries = [_private_entry(entry) for entry in settings.allow_private]
        self._networks = tuple(entry for entry in entries if not isinstance(entry, str))
        self._private_hosts = tuple(entry for entry in entries if isinstance(entry, str))

    def allows_host(self, host: str) -> bool:
        """Whether ``host`` (a name or an IP literal) is one of the hosts this platform's files may come from."""
        normal = _host_pattern(host)
        if normal is None:
            return False
        return self.hosts is None or any(_matches(normal, pattern) for pattern in self.hosts)

    def allows_address(self, host: str, address: Address) -> bool:
        """Whether a connection to ``host`` may go to ``address``: a public one, or one ``allow_private`` lists
        (by its network, or by ``host``)."""
        if is_public(address) or any(address in network for network in self._networks):
            return True
        normal = _host_pattern(host)
        return normal is not None and any(_matches(normal, pattern) for pattern in self._private_hosts)

    def check_url(self, url: URL) -> None:
        """Raise :class:`FetchRefused` unless ``url`` is http(s) on an allowed host (and, for an IP literal, an
        allowed address); a name's addresses are checked when it is resolved."""
        host = (url.host or "").lower()
        if url.scheme not in ("http", "https") or not host:
            raise FetchRefused("its address is not an http(s) URL", f"{shown(str(url))}: not an http(s) URL")
        address = _address(host)
        if address is not None and not self.allows_address(host, address):
            raise self.private(f"{shown(str(url))}: {host}", [])
        if not self.allows_host(host):
            known = ", ".join(self.hosts or ())
            raise FetchRefused(
                f"it is offered from {host[:100]}, which is not a {self.platform} file host",
                f"{shown(str(url))}: {host} is not a {self.platform} file host ({known}); add it to "
                f"{self.setting}.hosts if {self.platform} serves files from it",
            )

    def private(self, host: str, addresses: Sequence[str]) -> FetchRefused:
        """The refusal of ``host``, which is (or resolves only to) an address that may not be connected to."""
        where = f"{host} is at {', '.join(addresses)}," if addresses else f"{host} is"
        return FetchRefused(
            "its address points into the bot's own network, which the bot does not fetch from",
            f"{where} not a public address (loopback, private, link-local, shared, multicast and reserved "
            f"addresses are not fetched for a message); list the host or its network in {self.setting}.allow_private "
            "if this deployment must fetch from it",
        )

    async def middleware(
        self, request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        """The guarded session's client middleware: :meth:`check_url` on each request, redirects included."""
        self.check_url(request.url)
        return await handler(request)

    def resolver(self) -> AbstractResolver:
        """The guarded session's resolver: :data:`base_resolver`'s answers, only the addresses this policy allows."""
        return _GuardedResolver(self, base_resolver())


class _GuardedResolver(AbstractResolver):
    """Resolves with ``base`` and keeps only the addresses ``policy`` allows; a name left with none is refused."""

    def __init__(self, policy: FetchPolicy, base: AbstractResolver) -> None:
        self._policy = policy
        self._base = base

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self._base.resolve(host, port, family)
        kept: list[ResolveResult] = []
        refused: list[str] = []
        for result in found:
            address = _address(result["host"])
            if address is not None and self._policy.allows_address(host, address):
                kept.append(result)
            else:
                refused.append(result["host"])
        if not kept:
            raise self._policy.private(host, refused or ["no address"])
        if refused:
            _log.warning("%s: %s also resolves to %s, which are not connected to", self._policy.setting, host, refused)
        return kept

    async def close(self) -> None:
        await self._base.close()
