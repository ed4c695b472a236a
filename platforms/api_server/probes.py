"""The API server's operational routes: ``/health``, ``/health/ready``, ``/health/detailed`` and ``/metrics``.

``/health`` says the process serves and the store takes writes (a load balancer's liveness check); ``/health/ready``
also needs every configured entry point up, and names what is not; ``/health/detailed`` adds one entry per readiness
check (``checks``: the store writable, the free space of the store's disk, the agent's kind, model and state
(``ok``, ``degraded`` with its last error, ``unknown``; a degraded agent fails readiness only with
``agent.probe.fail_readiness: true``), each entry point) and the runtime's numbers, and in cluster mode the whole
cluster (``cluster``);
``/health/cluster`` (cluster mode) is that view alone: 503 when it names trouble (a message pending too long, a
shard held by no host, a silent host), 404 outside cluster mode;
``/metrics`` is the Prometheus exposition. All of it comes through the :class:`~hermes_actors.ports.ApiInbox` port,
read off the event loop. ``/metrics`` and ``/health/detailed`` need the bearer key when one is set (the adapter's
authentication covers :data:`KEYED_PATHS`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec
from aiohttp import web

from hermes_actors.ports import PlatformStatus, Readiness
from platforms.api_server.wire import PLATFORM, json_response

if TYPE_CHECKING:
    from hermes_actors.ports import ApiInbox
    from platforms.support.http_host import HttpHost

__all__ = ["KEYED_PATHS", "Probes"]

KEYED_PATHS = frozenset({"/metrics", "/health/detailed", "/health/cluster"})
"""Paths outside ``/v1/`` that need the key when one is set: they show the runtime's insides."""

_NOT_STARTED = "the API server is not started"


class Probes:
    """The operational routes; ``attached`` returns the running server's inbox and host (``None`` before start),
    ``waiting`` how many requests wait for a reply now."""

    def __init__(self, attached: Callable[[], tuple[ApiInbox, HttpHost] | None], waiting: Callable[[], int]) -> None:
        self._attached = attached
        self._waiting = waiting

    def add_to(self, app: web.Application) -> None:
        """Add the routes to ``app``."""
        app.router.add_get("/health", self.health)
        app.router.add_get("/health/ready", self.ready)
        app.router.add_get("/health/detailed", self.detailed)
        app.router.add_get("/health/cluster", self.cluster)
        app.router.add_get("/metrics", self.metrics)

    async def health(self, request: web.Request) -> web.Response:
        """200 while the gateway can take messages; 503 naming the reason when it cannot (the store cannot be
        written: a full or read-only disk), so a load balancer stops sending turns that would fail."""
        attached = self._attached()
        reason: str | None = _NOT_STARTED
        if attached is not None:
            inbox, host = attached
            reason = await host.blocking(inbox.store_unwritable_reason)
        body = {"platform": PLATFORM, "waiting": self._waiting()}
        if reason is not None:
            return json_response({"status": "unavailable", "reason": reason, **body}, status=503)
        return json_response({"status": "ok", **body})

    async def ready(self, request: web.Request) -> web.Response:
        """200 when the store takes writes and every configured entry point is up; else 503 with the reasons."""
        attached = self._attached()
        if attached is None:
            return _not_started()
        inbox, host = attached
        readiness = await host.blocking(inbox.readiness)
        return json_response(_readiness_body(readiness), status=200 if readiness.ready else 503)

    async def detailed(self, request: web.Request) -> web.Response:
        """The readiness body with the runtime's numbers (``vitals``); 503 when not ready, as ``/health/ready``."""
        attached = self._attached()
        if attached is None:
            return _not_started()
        inbox, host = attached
        readiness = await host.blocking(inbox.readiness)
        vitals = await host.blocking(inbox.vitals)
        body = {
            **_readiness_body(readiness),
            "checks": _checks(readiness),
            "waiting": self._waiting(),
            "vitals": msgspec.to_builtins(vitals),
        }
        if readiness.cluster is not None:
            body["cluster"] = readiness.cluster
        return json_response(body, status=200 if readiness.ready else 503)

    async def cluster(self, request: web.Request) -> web.Response:
        """A cluster replica's view of the whole cluster; 503 when it names trouble, 404 outside cluster mode."""
        attached = self._attached()
        if attached is None:
            return _not_started()
        inbox, host = attached
        readiness = await host.blocking(inbox.readiness)
        if readiness.cluster is None:
            return json_response({"status": "not_found", "reason": "not a cluster replica"}, status=404)
        view = readiness.cluster
        body = {"status": "ok" if view.ok else "trouble", "trouble": view.trouble, "cluster": view.status}
        return json_response(body, status=200 if view.ok else 503)

    async def metrics(self, request: web.Request) -> web.Response:
        """The Prometheus text exposition of the runtime's series."""
        attached = self._attached()
        if attached is None:
            return _not_started()
        inbox, host = attached
        exposition = await host.blocking(inbox.metrics)
        return web.Response(body=exposition.body, headers={"Content-Type": exposition.content_type})


def _readiness_body(readiness: Readiness) -> dict[str, object]:
    return {
        "status": "ready" if readiness.ready else "not_ready",
        "reasons": readiness.reasons(),
        "store": {"writable": readiness.store is None, "reason": readiness.store},
        "platforms": msgspec.to_builtins(readiness.platforms),
    }


def _checks(readiness: Readiness) -> dict[str, object]:
    """Each readiness check on its own: ``ok`` and what it found (the disk informs; the agent is not ``ok`` while
    degraded, and fails readiness only with ``agent.probe.fail_readiness``)."""
    failed = (PlatformStatus.FAILED, PlatformStatus.DISCONNECTED)
    platforms = [msgspec.to_builtins(p) | {"ok": p.state not in failed} for p in readiness.platforms]
    disk = msgspec.to_builtins(readiness.disk) if readiness.disk is not None else None
    agent = msgspec.to_builtins(readiness.agent) if readiness.agent is not None else None
    return {
        "store": {"ok": readiness.store is None, "writable": readiness.store is None, "reason": readiness.store},
        "disk": {"ok": True, **disk} if disk is not None else {"ok": True, "reason": "free space unknown"},
        "agent": {"ok": agent["state"] != "degraded", **agent}
        if agent is not None
        else {"ok": True, "reason": "agent unknown"},
        "platforms": {"ok": all(p["ok"] for p in platforms), "entries": platforms},
    }


def _not_started() -> web.Response:
    return json_response({"status": "unavailable", "reason": _NOT_STARTED}, status=503)
