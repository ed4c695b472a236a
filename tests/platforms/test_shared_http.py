"""``SharedListener``: several adapters' applications on one port, each keeping its paths and middlewares."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator

import pytest
from aiohttp import web

from hermes_actors.errors import PlatformError
from platforms.support.http_host import HttpHost
from platforms.support.shared_http import SharedListener, mount


async def _ok(request: web.Request) -> web.Response:
    return web.Response(text=f"{request.method} {request.path} {request.match_info.get('name', '')}".strip())


@web.middleware
async def _locked(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    if request.headers.get("Authorization") != "Bearer k":
        return web.Response(status=401, text="key required")
    return await handler(request)


def _api() -> web.Application:
    app = web.Application(middlewares=[_locked])
    app.router.add_post("/v1/chat/completions", _ok)
    app.router.add_get("/v1/models", _ok)
    app.router.add_get("/health", _ok)
    return app


def _hooks() -> web.Application:
    app = web.Application()
    app.router.add_post("/webhooks/{name}", _ok)
    return app


@pytest.fixture
def served() -> Iterator[str]:
    root = web.Application()
    taken: dict[str, str] = {}
    assert mount(root, _api(), "platforms.api_server", taken) == ["/v1", "/health"]
    assert mount(root, _hooks(), "platforms.webhook", taken) == ["/webhooks"]
    host = HttpHost(root, name="shared-test")
    host.start()
    try:
        yield host.url
    finally:
        host.stop()


def _call(url: str, method: str = "GET", key: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    request = urllib.request.Request(url, method=method, headers=headers, data=b"{}" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_each_application_keeps_its_paths_and_its_middleware_applies_to_its_own_paths_only(served: str) -> None:
    assert _call(served + "/v1/models", key="k") == (200, "GET /v1/models")
    assert _call(served + "/v1/chat/completions", "POST", key="k") == (200, "POST /v1/chat/completions")
    assert _call(served + "/health", key="k") == (200, "GET /health")
    assert _call(served + "/health", "HEAD", key="k")[0] == 200
    assert _call(served + "/v1/models") == (401, "key required")
    assert _call(served + "/webhooks/default", "POST") == (200, "POST /webhooks/default default")
    assert _call(served + "/webhooks/default")[0] == 405
    assert _call(served + "/slack/events/main", "POST")[0] == 404


def test_two_applications_claiming_one_prefix_cannot_share_the_port() -> None:
    root = web.Application()
    taken: dict[str, str] = {}
    mount(root, _hooks(), "platforms.webhook", taken)
    with pytest.raises(PlatformError, match=r"platforms\.other and platforms\.webhook both serve /webhooks"):
        mount(root, _hooks(), "platforms.other", taken)


def test_a_listener_without_http_adapters_describes_no_paths() -> None:
    listener = SharedListener(host="127.0.0.1", port=0)
    assert listener.attach("signal", object()) is False  # type: ignore[arg-type]
    listener.stop()  # never started: nothing to close


def test_a_host_that_could_not_bind_stops_without_touching_its_closed_loop() -> None:
    # Its loop closes before start() raises, so a stop() right after (hermesd's shutdown of a failed start) finds it
    # closed; it used to race the closing loop and fail with "Event loop is closed", leaving the home's lock held.
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        for _ in range(60):
            host = HttpHost(web.Application(), port=holder.getsockname()[1], name="taken")
            with pytest.raises(PlatformError, match="in use"):
                host.start()
            host.stop(1.0)
