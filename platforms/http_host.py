"""Serve an aiohttp application from a background thread, for the HTTP platforms (API server, webhooks).

The runtime is threads and actors; aiohttp is asyncio. A :class:`HttpHost` owns one event loop on one thread,
binds the listening socket before :meth:`HttpHost.start` returns (so a port in use is an error at start, not a
log line later) and stops within a bound. Handlers call blocking runtime methods through :meth:`HttpHost.blocking`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from aiohttp import web

from hermes_actors.errors import PlatformError

__all__ = ["HttpHost"]

_log = logging.getLogger(__name__)

T = TypeVar("T")


class HttpHost:
    """One aiohttp application on ``host:port`` (port 0 picks a free one), served from its own thread."""

    def __init__(self, app: web.Application, *, host: str = "127.0.0.1", port: int = 0, name: str = "http") -> None:
        self.app = app
        self.host = host
        self.name = name
        self._requested_port = port
        self._port: int | None = None
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
                started.set_exception(exc)
                loop.close()
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
            raise PlatformError(
                f"{self.name}: cannot listen on {self.host}:{self._requested_port} ({exc.strerror or exc}); "
                "choose another port in config.yaml or stop the program using it"
            ) from exc

    async def _setup(self) -> int:
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False, shutdown_timeout=5.0)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self._requested_port)
        await site.start()
        self._runner = runner
        addresses = runner.addresses  # (host, port, ...) of each bound socket
        return int(addresses[0][1]) if addresses else self._requested_port

    async def _teardown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def blocking(self, call: Callable[[], T]) -> T:
        """Run a blocking runtime call (``gateway.accept``) off the event loop and await its result."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving: close the listener, let handlers finish up to ``timeout``, then end the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
        if thread.is_alive():
            _log.warning("%s: server thread did not stop within %.1f s", self.name, timeout)
        self._executor.shutdown(wait=False, cancel_futures=True)
