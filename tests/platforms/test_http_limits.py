"""``HttpLimits`` on every HTTP listener: connections that send no request are closed after the header timeout,
idle ones after the idle timeout, and at the connection cap idle sockets cannot keep a real request out."""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import ExitStack, closing
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from aiohttp import web

from hermes_actors.config import HttpLimits
from hermes_actors.daemon.config_file import DaemonSettings, decode_settings
from hermes_actors.daemon.startup import build_adapters
from hermes_actors.errors import ConfigError
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from platforms.support.http_host import HttpAdapter, HttpHost
from platforms.webhook.config import WebhookConfig

REPO = Path(__file__).resolve().parents[2]
FAST = HttpLimits(header_timeout_s=0.3, idle_timeout_s=1.0, max_connections=50)
MARGIN_S = 1.0  # for a loaded CI machine; every wait below is bounded by it
HEALTH = b"GET /health HTTP/1.1\r\nHost: test\r\n\r\n"


def _app(busy: threading.Semaphore | None = None, release: threading.Event | None = None) -> web.Application:
    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def slow(request: web.Request) -> web.Response:
        assert busy is not None
        assert release is not None
        busy.release()
        await asyncio.to_thread(release.wait, 10)
        return web.Response(text="done")

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/slow", slow)
    return app


def _serve(stack: ExitStack, limits: HttpLimits, app: web.Application | None = None) -> HttpHost:
    app = app if app is not None else _app()
    host = HttpHost(app, name="limits-test", limits=limits)
    host.start()
    stack.callback(host.stop, 5.0)
    return host


def _connect(stack: ExitStack, host: HttpHost | str) -> socket.socket:
    """A connection to ``host`` (or a URL) that ``stack`` closes."""
    port = host.port if isinstance(host, HttpHost) else urlsplit(host).port
    return stack.enter_context(closing(socket.create_connection(("127.0.0.1", port), timeout=10)))


def _seconds_until_closed(client: socket.socket, within: float) -> float:
    """Seconds until the server closes ``client`` (reading and dropping what it sends); fails after ``within``."""
    started = time.monotonic()
    client.settimeout(within)
    try:
        while client.recv(4096):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        pytest.fail(f"the server kept the connection open for more than {within} s")
    return time.monotonic() - started


def _read_response(client: socket.socket) -> bytes:
    """One small response on a kept-alive connection (read up to its body, which fits one read here)."""
    client.settimeout(MARGIN_S + FAST.header_timeout_s)
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = client.recv(4096)
        assert chunk, "the server closed the connection before answering"
        answer += chunk
    return answer


def test_a_connection_that_sends_no_request_is_closed_after_the_header_timeout() -> None:
    with ExitStack() as stack:
        host = _serve(stack, FAST)
        client = _connect(stack, host)
        waited = _seconds_until_closed(client, FAST.header_timeout_s + MARGIN_S)
        assert waited >= FAST.header_timeout_s - 0.05
        assert host.statistics().timed_out == 1


def test_a_request_head_that_never_ends_is_closed_at_the_header_timeout_not_the_idle_one() -> None:
    with ExitStack() as stack:
        host = _serve(stack, HttpLimits(header_timeout_s=0.3, idle_timeout_s=30.0, max_connections=50))
        client = _connect(stack, host)
        client.sendall(b"GET /health HTTP/1.1\r\nHost: test\r\nX-Trickle: ")
        assert _seconds_until_closed(client, 0.3 + MARGIN_S) < 0.3 + MARGIN_S


def test_a_kept_alive_connection_is_answered_and_then_closed_after_the_idle_timeout() -> None:
    with ExitStack() as stack:
        host = _serve(stack, FAST)
        client = _connect(stack, host)
        client.sendall(HEALTH)
        assert _read_response(client).startswith(b"HTTP/1.1 200")
        client.sendall(HEALTH)  # the same connection serves a second request: the head deadline is the first's
        assert _read_response(client).startswith(b"HTTP/1.1 200")
        waited = _seconds_until_closed(client, FAST.idle_timeout_s + MARGIN_S)
        assert waited >= FAST.idle_timeout_s - 0.1  # the idle timeout, not the (shorter) header one
        assert host.statistics().timed_out == 0


def test_with_the_cap_reached_by_idle_connections_a_real_request_is_answered_within_the_header_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with ExitStack() as stack:
        host = _serve(stack, FAST)
        idle = [_connect(stack, host) for _ in range(60)]
        started = time.monotonic()
        with urllib.request.urlopen(host.url + "/health", timeout=FAST.header_timeout_s + MARGIN_S) as response:
            assert response.read() == b"ok"
        assert time.monotonic() - started < FAST.header_timeout_s + MARGIN_S
        assert host.statistics().open <= FAST.max_connections
        assert len(idle) == 60
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]  # aiohttp's and asyncio's too
    assert len(warnings) == 1, [r.getMessage() for r in warnings]  # once per episode, not once per connection
    assert "daemon.http_max_connections" in warnings[0].getMessage()


def test_at_the_cap_new_connections_close_the_oldest_idle_one_at_once_instead_of_waiting_for_its_timeout() -> None:
    with ExitStack() as stack:
        host = _serve(stack, HttpLimits(header_timeout_s=30.0, idle_timeout_s=30.0, max_connections=50))
        idle = [_connect(stack, host) for _ in range(60)]
        started = time.monotonic()
        with urllib.request.urlopen(host.url + "/health", timeout=MARGIN_S) as response:
            assert response.read() == b"ok"
        assert time.monotonic() - started < MARGIN_S
        # The first ones were closed to make room for the later ones and the request.
        assert _seconds_until_closed(idle[0], MARGIN_S) < MARGIN_S
        stats = host.statistics()
        assert (stats.timed_out, stats.evicted >= 11, stats.open <= 50) == (0, True, True)


def test_at_the_cap_with_every_connection_answering_a_new_one_waits_until_one_is_idle_and_closes_that_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    busy, release = threading.Semaphore(0), threading.Event()
    limits = HttpLimits(header_timeout_s=5.0, idle_timeout_s=5.0, max_connections=2)
    with ExitStack() as stack:
        stack.callback(release.set)
        host = _serve(stack, limits, _app(busy, release))
        slow = [_connect(stack, host) for _ in range(2)]
        for client in slow:
            client.sendall(b"GET /slow HTTP/1.1\r\nHost: test\r\n\r\n")
        assert busy.acquire(timeout=5)
        assert busy.acquire(timeout=5)  # both handlers are running
        waiting = _connect(stack, host)  # the kernel queues it; the listener does not take it yet
        waiting.sendall(HEALTH)
        waiting.settimeout(0.5)
        with pytest.raises(TimeoutError):
            waiting.recv(1)
        assert host.statistics().open == 2
        release.set()
        assert _read_response(waiting).startswith(b"HTTP/1.1 200")
        # Both slow ones were answered; one of them, kept alive and idle now, was closed to let the request in.
        assert all(_read_response(client).startswith(b"HTTP/1.1 200") for client in slow)
        assert host.statistics().evicted == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "daemon.http_max_connections" in warnings[0]


def test_the_limits_are_daemon_settings_whose_bad_values_name_the_field() -> None:
    assert DaemonSettings().http_limits == HttpLimits()  # the defaults agree
    settings = decode_settings(
        {"daemon": {"http_header_timeout_s": 2, "http_idle_timeout_s": 30, "http_max_connections": 100}}
    )
    assert settings.daemon.http_limits == HttpLimits(header_timeout_s=2, idle_timeout_s=30, max_connections=100)
    for field, value, words in [
        ("http_header_timeout_s", 0, "more than 0"),
        ("http_idle_timeout_s", -1, "more than 0"),
        ("http_max_connections", 0, "at least 1"),
    ]:
        with pytest.raises(ConfigError, match=rf"^daemon\.{field}: .*{words}"):
            decode_settings({"daemon": {field: value}})


_OUT_OF_FILES_SERVER = """
import logging, os, resource, sys
from aiohttp import web
from hermes_actors.config import HttpLimits
from platforms.support.http_host import HttpHost

logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")

async def health(request):
    return web.Response(text="ok")

app = web.Application()
app.router.add_get("/health", health)
host = HttpHost(app, name="few-files", limits=HttpLimits(header_timeout_s=30, idle_timeout_s=30, max_connections=500))
host.start()
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 8, hard))
print(host.port, flush=True)
sys.stdin.read()
host.stop(5)
"""


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc/self/fd")
def test_out_of_file_descriptors_idle_connections_make_room_and_it_is_one_warning_not_an_error_per_retry() -> None:
    server = subprocess.Popen(
        [sys.executable, "-c", _OUT_OF_FILES_SERVER],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        with ExitStack() as stack:
            idle = [
                stack.enter_context(closing(socket.create_connection(("127.0.0.1", port), timeout=10)))
                for _ in range(30)
            ]
            started = time.monotonic()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2 * MARGIN_S) as response:
                assert response.read() == b"ok"
            assert time.monotonic() - started < 2 * MARGIN_S  # not the 30 s header timeout
            assert len(idle) == 30
    finally:
        _, err = server.communicate("", timeout=30)
    assert server.returncode == 0, err
    assert "out of system resource" not in err  # asyncio's ERROR line, once a second while it lasted
    warnings = [line for line in err.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert len(warnings) == 1, err
    assert "out of file descriptors" in warnings[0]
    assert "LimitNOFILE" in warnings[0]


def test_an_adapter_on_its_own_port_holds_its_clients_to_the_limits_it_was_built_with(tmp_path: Path) -> None:
    (adapter,) = build_adapters({"webhook": WebhookConfig(port=0)}, {}, FAST).values()
    assert isinstance(adapter, HttpAdapter)
    with Gateway(tmp_path / "state.db") as gateway, ExitStack() as stack:
        adapter.start(GatewayInbox(gateway))
        stack.callback(adapter.stop)
        client = _connect(stack, adapter.url)
        assert _seconds_until_closed(client, FAST.header_timeout_s + MARGIN_S) >= FAST.header_timeout_s - 0.05
