"""Serve an aiohttp application from a background thread, for the HTTP platforms (API server, webhooks).

The runtime is threads and actors; aiohttp is asyncio. A :class:`HttpHost` owns one event loop on one thread,
binds the listening socket before :meth:`HttpHost.start` returns (so a port in use is an error at start, not a
log line later) and stops within a bound. Handlers call blocking runtime methods through :meth:`HttpHost.blocking`.

Every adapter a platform pushes to (webhooks, Slack, Feishu, WhatsApp, Telegram webhooks, the API server) has the
same server lifecycle, so :class:`HttpAdapter` owns it once: the address, start and stop, reading a body within
``max_body_bytes`` and committing a message off the loop. What differs (routes, answer shapes, log wording) stays
in each adapter; a request it refuses is a :class:`Refused` it turns into its own answer.

Every host accepts through an :class:`~platforms.support.http_listener.HttpListener` (header and idle timeouts,
a cap on open connections: :class:`~hermes_actors.config.HttpLimits`) and stamps the security headers of
:mod:`platforms.support.security_headers` on every response.
"""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from hermes_actors.config import HttpLimits
from hermes_actors.errors import PlatformError
from platforms.support.http_body import Refused, committed, read_body, read_decoded, unreadable
from platforms.support.http_listener import AnswerLog, HttpListener, ListenerStatistics
from platforms.support.security_headers import stamp_security_headers

if TYPE_CHECKING:
    from hermes_actors.messages import InboundMessage
    from hermes_actors.ports import AcceptResult, Inbox, Intake

__all__ = [
    "HttpAdapter",
    "HttpHost",
    "Refused",
    "ServedConfig",
    "SharedPort",
    "committed",
    "probe_listen",
    "read_body",
    "read_decoded",
    "unreadable",
]

_log = logging.getLogger(__name__)

T = TypeVar("T")


class _ServerLog(logging.LoggerAdapter[logging.Logger]):
    """aiohttp's server log, where a request the client got wrong is an info line instead of an error.

    aiohttp answers a request it cannot parse (a control character in a header, a line too long) with a plain
    400 before any handler runs, and once a handler has answered it drains the rest of the body, failing again
    on one that cannot be read (a ``Content-Encoding`` it is not in); both it logs with a stack at ERROR, as if
    the server had failed. They are the client's fault; the server's own failures (anything else) stay errors.
    """

    def __init__(self, server_name: str) -> None:
        super().__init__(logging.getLogger("aiohttp.server"))
        self.server_name = server_name

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kwargs: Any) -> None:
        if isinstance(exc_info, HttpProcessingError) and 400 <= exc_info.code < 500:
            refused = " ".join(exc_info.message.split())[:200]
            self.info("%s: refused a malformed HTTP request (%d %s)", self.server_name, exc_info.code, refused)
        elif isinstance(exc_info, web.RequestPayloadError):
            self.info("%s: a request body could not be read (%s)", self.server_name, unreadable(exc_info))
        else:
            super().exception(msg, *args, exc_info=exc_info, **kwargs)


async def _expect(request: web.Request) -> None:
    """Answer an ``Expect`` header as aiohttp does, also when its value is not UTF-8 (aiohttp's own answer fails
    on such a value, with a 500 and an error logged)."""
    expect = request.headers.get("Expect", "")
    if request.version < (1, 1):  # HTTP/1.0 has no expectations
        return
    if expect.lower() != "100-continue":
        raise web.HTTPExpectationFailed(text=f"unknown Expect: {ascii(expect)[1:-1][:100]}; only 100-continue is")
    await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    request.writer.output_size = 0  # the 100 is not part of the response


def _answer_expect_safely(app: web.Application) -> None:
    """Give every route of ``app`` :func:`_expect` as its ``Expect`` handler."""
    for route in app.router.routes():
        # aiohttp has no public setter; routes are added with the default handler by add_get, add_post, ...
        route._expect_handler = _expect


def _cannot_listen(name: str, host: str, port: int, exc: OSError) -> PlatformError:
    # asyncio's bind error repeats the address in its strerror; the errno's own text says it once
    reason = os.strerror(exc.errno) if exc.errno else exc.strerror or str(exc)
    return PlatformError(
        f"{name}: cannot listen on {host}:{port} ({reason}); "
        "choose another port in config.yaml or stop the program using it"
    )


def probe_listen(name: str, host: str, port: int) -> None:
    """Raise the :class:`PlatformError` :meth:`HttpHost.start` would if ``host:port`` cannot be bound now (a
    moment's bind, as the server binds: address reuse on); port 0 always can."""
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise _cannot_listen(name, host, port, OSError(exc.errno, exc.strerror)) from None
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                raise _cannot_listen(name, host, port, exc) from None


class HttpHost:
    """One aiohttp application on ``host:port`` (port 0 picks a free one), served from its own thread within
    ``limits``."""

    def __init__(
        self,
        app: web.Application,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        name: str = "http",
        limits: HttpLimits | None = None,
    ) -> None:
        self.app = app
        self.host = host
        self.name = name
        self.limits = limits if limits is not None else HttpLimits()
        self._requested_port = port
        self._port: int | None = None
        self._listener: HttpListener | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(32, thread_name_prefix=f"hermes-{name}")

    @property
    def port(self) -> int:
        """The bound port (known once started)."""
        if self._port is None:
            raise PlatformError(f"{self.name}: not started")
        return self._port

    @property
    def url(self) -> str:
        """``http://host:port`` of the running server."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> None:
        """Bind and start serving; raise :class:`PlatformError` naming the address if it cannot bind."""
        started: concurrent.futures.Future[int] = concurrent.futures.Future()
        loop = asyncio.new_event_loop()
        self._loop = loop

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                port = loop.run_until_complete(self._setup())
            except BaseException as exc:
                loop.close()  # before the starter hears of it: its stop() must find the loop closed, not closing
                started.set_exception(exc)
                return
            started.set_result(port)
            loop.run_forever()
            loop.run_until_complete(self._teardown())
            loop.close()

        self._thread = threading.Thread(target=run, name=f"hermes-{self.name}-loop", daemon=True)
        self._thread.start()
        try:
            self._port = started.result(timeout=30)
        except OSError as exc:
            raise _cannot_listen(self.name, self.host, self._requested_port, exc) from exc

    def statistics(self) -> ListenerStatistics:
        """A snapshot of the listener's connections (none before :meth:`start`)."""
        if self._listener is None:
            return ListenerStatistics(open=0, idle=0, timed_out=0, evicted=0)
        return self._listener.statistics()

    async def _setup(self) -> int:
        _answer_expect_safely(self.app)
        stamp_security_headers(self.app)
        log = _ServerLog(self.name)
        # auto_decompress off: bodies are decoded by read_decoded, after they have been read (see its docstring).
        # keepalive_timeout: aiohttp's own timer, from the connection's start and after each answer.
        runner = web.AppRunner(
            self.app,
            access_log=logging.getLogger("aiohttp.access"),  # AnswerLog logs nothing: it marks connections idle
            access_log_class=AnswerLog,
            handle_signals=False,
            shutdown_timeout=5.0,
            logger=log,
            auto_decompress=False,
            keepalive_timeout=self.limits.idle_timeout_s,
        )
        await runner.setup()
        assert runner.server is not None  # set by setup()
        listener = HttpListener(self.name, self.limits, runner.server)
        self._runner = runner
        port = await listener.open(self.host, self._requested_port)
        self._listener = listener
        return port

    async def _teardown(self) -> None:
        if self._listener is not None:
            await self._listener.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def blocking(self, call: Callable[[], T]) -> T:
        """Run a blocking runtime call (``inbox.accept``) off the event loop and await its result."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving: close the listener, let handlers finish up to ``timeout``, then end the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive() or loop.is_closed():
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        if thread.is_alive():
            _log.warning("%s: server thread did not stop within %.1f s", self.name, timeout)
        self._executor.shutdown(wait=False, cancel_futures=True)


class SharedPort(Protocol):
    """One listener several adapters serve on (:class:`platforms.support.shared_http.SharedListener`)."""

    def add(self, name: str, app: web.Application) -> HttpHost:
        """Mount ``app`` for the adapter ``name``; return the server it runs on."""
        ...


class ServedConfig(Protocol):
    """The part of an adapter's config that says where its server listens and how large a body may be."""

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...

    @property
    def max_body_bytes(self) -> int: ...


C = TypeVar("C", bound=ServedConfig)


class HttpAdapter(abc.ABC, Generic[C]):
    """The server half of an adapter a platform pushes requests to, on ``config.host:config.port``.

    Subclasses set :attr:`server_name` (the ``platforms.<name>`` config section, also the server thread's name)
    and add their handlers in :meth:`_add_routes`; handlers read bodies with :meth:`_read_body` and commit
    messages with :meth:`_accept_inbound`. A subclass that needs more of the runtime than the
    :class:`~hermes_actors.ports.Intake` kept here types its own ``start`` against its port and serves with
    :meth:`_serve`.
    """

    server_name: ClassVar[str]

    def __init__(self, config: C) -> None:
        self.config = config
        self._inbox: Intake | None = None
        self._host: HttpHost | None = None
        self._shared: SharedPort | None = None
        self._limits = HttpLimits()

    def share(self, port: SharedPort) -> None:
        """Serve on ``port`` (one listener for every HTTP adapter) instead of ``config.host:config.port``."""
        self._shared = port

    def limit_connections(self, limits: HttpLimits) -> None:
        """Hold the clients of the adapter's own port to ``limits`` (a shared port has its owner's)."""
        self._limits = limits

    @property
    def url(self) -> str:
        """``http://host:port`` of the server (the configured address until it has started)."""
        if self._host is not None:
            return self._host.url
        host = f"[{self.config.host}]" if ":" in self.config.host else self.config.host
        return f"http://{host}:{self.config.port}"

    def start(self, inbox: Inbox) -> None:
        """:meth:`_serve` on ``inbox``."""
        self._serve(inbox)

    def _serve(self, inbox: Intake) -> None:
        """Serve the adapter's routes; raise :class:`~hermes_actors.errors.PlatformError` if it cannot bind. On a
        shared port the routes are mounted there, and the port's owner binds it."""
        if self._shared is not None:
            self._inbox = inbox
            self._host = self._shared.add(self.server_name, self._application())
            return
        host = HttpHost(
            self._application(),
            host=self.config.host,
            port=self.config.port,
            name=self.server_name,
            limits=self._limits,
        )
        # Set before binding: a request may arrive as soon as the socket listens.
        self._inbox, self._host = inbox, host
        try:
            host.start()
        except BaseException:
            self._host = None
            raise

    def probe_listen(self) -> None:
        """Raise what :meth:`start` would if the configured address cannot be bound now (nothing on a shared
        port, whose owner probes it)."""
        if self._shared is None and self._serves_http():
            probe_listen(self.server_name, self.config.host, self.config.port)

    def _serves_http(self) -> bool:
        """Whether :meth:`start` opens the server (an adapter that may run without one says when)."""
        return True

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server; requests in progress get up to ``timeout`` seconds (a shared port's owner closes it)."""
        if self._host is not None and self._shared is None:
            self._host.stop(timeout)

    def _application(self) -> web.Application:
        """The application to serve: bodies limited to ``max_body_bytes``, with the routes of :meth:`_add_routes`."""
        app = web.Application(client_max_size=self.config.max_body_bytes)
        self._add_routes(app)
        return app

    @abc.abstractmethod
    def _add_routes(self, app: web.Application) -> None:
        """Add the adapter's handlers to ``app``."""

    async def _read_body(self, request: web.Request) -> bytes:
        """The body of ``request``, or :class:`Refused` 413 naming ``platforms.<server_name>.max_body_bytes``."""
        return await read_body(request, self.config.max_body_bytes, f"platforms.{self.server_name}.max_body_bytes")

    async def _accept_inbound(self, inbound: InboundMessage, log: logging.Logger, failed: str) -> AcceptResult | None:
        """Commit ``inbound`` through ``inbox.submit`` and await the commit, or ``None`` if it was not stored.

        No thread waits for the commit: the loop awaits the writer's future, so every request in flight shares
        the next group commit. A failure is logged with its stack on ``log`` as ``failed`` (a format taking the
        account and the message id); the caller answers ``None`` with a 5xx, so the platform delivers the message
        again.
        """
        inbox = self._inbox
        try:
            if inbox is None:  # pragma: no cover - the server runs only after start()
                raise PlatformError(f"{self.server_name}: the adapter is not started")
            return await committed(inbox.submit(inbound), inbox.ask_timeout_s)
        except Exception:
            log.exception(failed, inbound.source.account_id, inbound.message_id)
            return None
