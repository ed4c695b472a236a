"""One listener for every HTTP adapter (``daemon.http_port``), for a reverse proxy that forwards one port.

Each adapter keeps its own aiohttp application (its routes, middlewares such as the API server's key check,
startup and shutdown hooks) and its own paths: the API at ``/v1/...`` and ``/health``, ``/webhooks/<route>``,
``/slack/events/<app>``, ``/feishu/events/<app>``, ``/whatsapp/webhook``, ``/telegram/<bot>``. The application is
mounted as it is: its routes, grouped by their first path segment, become sub-applications at that prefix
(aiohttp's ``add_subapp``) that carry the adapter's middlewares, so a middleware never sees another adapter's
requests, and whatever routes an adapter adds later come along. Two adapters claiming one prefix is an error.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aiohttp import web

from hermes_actors.config import HttpLimits
from hermes_actors.errors import PlatformError
from platforms.support.http_host import HttpAdapter, HttpHost, probe_listen

if TYPE_CHECKING:
    from hermes_actors.ports import Adapter

__all__ = ["SharedListener", "mount"]

_log = logging.getLogger(__name__)


def mount(root: web.Application, app: web.Application, owner: str, taken: dict[str, str]) -> list[str]:
    """Mount ``app``'s routes on ``root`` under their first path segments; return those prefixes.

    ``taken`` maps each prefix mounted so far to its owner; a prefix another owner holds is a
    :class:`PlatformError`. The first sub-application also runs ``app``'s startup and shutdown hooks.
    """
    groups: dict[str, list[tuple[str, str, web.AbstractRoute]]] = {}
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("path") or info.get("formatter")
        if not isinstance(path, str) or not path.startswith("/"):
            raise PlatformError(f"{owner}: a route of {info} cannot be mounted on the shared port")
        prefix = "/" + path.split("/", 2)[1]
        groups.setdefault(prefix, []).append((route.method, path.removeprefix(prefix), route))
    for prefix in groups:
        if prefix in taken:
            raise PlatformError(f"{owner} and {taken[prefix]} both serve {prefix}; they cannot share one port")
    for index, (prefix, routes) in enumerate(groups.items()):
        sub = web.Application(middlewares=list(app.middlewares))
        for method, path, route in routes:  # add_get's HEAD route is among them, and is copied as it is
            sub.router.add_route(method, path, route.handler)
        if index == 0:
            sub.on_startup.extend(app.on_startup)
            sub.on_shutdown.extend(app.on_shutdown)
            sub.on_cleanup.extend(app.on_cleanup)
        root.add_subapp(prefix, sub)
        taken[prefix] = owner
    return list(groups)


class SharedListener:
    """One HTTP server on ``host:port`` for every adapter :meth:`attach` accepts, holding clients to ``limits``.

    Attach the adapters, start them (each mounts its application instead of binding its own port), then
    :meth:`start` binds; :meth:`stop` closes the port for all of them.
    """

    def __init__(self, *, host: str, port: int, limits: HttpLimits | None = None) -> None:
        self._address = (host, port)
        self._connection_limits = limits if limits is not None else HttpLimits()
        self._limits: list[int] = []
        self._host: HttpHost | None = None
        self._taken: dict[str, str] = {}
        self._served: dict[str, list[str]] = {}

    @property
    def host(self) -> HttpHost:
        """The server (made when the first attached adapter mounts; it binds in :meth:`start`)."""
        if self._host is None:
            # The port reads bodies up to the largest limit; each adapter checks its own (http_host.read_decoded).
            root = web.Application(client_max_size=max(self._limits, default=1024 * 1024))
            host, port = self._address
            self._host = HttpHost(root, host=host, port=port, name="http", limits=self._connection_limits)
        return self._host

    def attach(self, name: str, adapter: Adapter) -> bool:
        """Have ``adapter`` serve on this listener when it starts; ``False`` for an adapter that is not HTTP."""
        if not isinstance(adapter, HttpAdapter):
            return False
        adapter.share(self)
        self._limits.append(adapter.config.max_body_bytes)
        self._served[name] = []
        return True

    def add(self, name: str, app: web.Application) -> HttpHost:
        """Mount ``app`` (an attached adapter's start calls this) and return the server it runs on."""
        host = self.host
        self._served[name] = mount(host.app, app, f"platforms.{name}", self._taken)
        return host

    def probe_listen(self) -> None:
        """Raise what :meth:`start` would if the port cannot be bound now."""
        probe_listen("http", *self._address)

    def start(self) -> None:
        """Bind and serve every mounted application; :class:`PlatformError` names the address if it cannot."""
        self.host.start()
        _log.info("one port %s serves %s", self.host.url, ", ".join(sorted(self._taken)))

    def stop(self, timeout: float = 10.0) -> None:
        """Close the port; requests in progress get up to ``timeout`` seconds."""
        if self._host is not None:
            self._host.stop(timeout)

    def describe(self) -> list[str]:
        """Banner lines: the one URL and which paths go to which entry point."""
        where = "; ".join(f"{name}: {' '.join(paths)}" for name, paths in self._served.items() if paths)
        return [f"one port: {self.host.url}  ({where}; other ports closed)"]
