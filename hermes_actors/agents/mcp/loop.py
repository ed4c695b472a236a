"""The one asyncio event loop of a process for its MCP clients, on a thread of its own.

The MCP SDK is asyncio; the runtime is threads. Every server connection of the process lives on this loop (started
with the first one that is needed), and the runtime's threads reach it through :meth:`McpLoop.run`, which hands a
coroutine over and waits for it within a timeout. Connections are kept by what they connect to, so agents
configured with the same server share one process of it. At interpreter exit every connection is closed (a stdio
server's input is closed and it is given two seconds to exit before it is killed).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine, Hashable
from typing import Any, TypeVar, cast

__all__ = ["McpLoop", "shared_loop"]

_log = logging.getLogger(__name__)
T = TypeVar("T")

_CLOSE_AT_EXIT_S = 5.0  # the bound on closing every connection when the interpreter exits


class McpLoop:
    """An asyncio loop on a daemon thread (``hermes-mcp``), started with its first use, and the connections kept on
    it by key, each counted by its users. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._kept: dict[Hashable, tuple[Any, int]] = {}

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop, its thread started on first use."""
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                ready = threading.Event()
                thread = threading.Thread(target=self._serve, args=(self._loop, ready), name="hermes-mcp", daemon=True)
                thread.start()
                ready.wait()
            return self._loop

    @staticmethod
    def _serve(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        loop.run_forever()

    def run(self, work: Coroutine[Any, Any, T], timeout: float) -> T:
        """Run ``work`` on the loop and wait for its result; after ``timeout`` seconds it is cancelled and
        :class:`TimeoutError` raised. Never call it from the loop's own thread."""
        future = asyncio.run_coroutine_threadsafe(work, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no result within {timeout:g} s") from None

    def soon(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` on the loop's thread, without waiting."""
        self.loop.call_soon_threadsafe(callback)

    def keep(self, key: Hashable, make: Callable[[], T]) -> T:
        """The connection kept under ``key``, made by ``make`` for its first user; each call is a use that
        :meth:`release` ends."""
        with self._lock:
            kept, users = self._kept.get(key, (None, 0))
            if kept is None:
                kept = make()
            self._kept[key] = (kept, users + 1)
            return cast(T, kept)

    def release(self, key: Hashable) -> Any | None:
        """End one use of the connection under ``key``; return it when that was its last user (the caller closes
        it), else ``None``."""
        with self._lock:
            kept, users = self._kept.get(key, (None, 0))
            if kept is None:
                return None
            if users > 1:
                self._kept[key] = (kept, users - 1)
                return None
            del self._kept[key]
            return kept

    def close_all(self, timeout: float = _CLOSE_AT_EXIT_S) -> None:
        """Close every kept connection (those with an ``aclose`` coroutine method), within ``timeout`` seconds."""
        with self._lock:
            kept = [connection for connection, _ in self._kept.values()]
            self._kept.clear()
            loop = self._loop
        closers = [connection.aclose() for connection in kept if hasattr(connection, "aclose")]
        if loop is None or not closers:
            for closer in closers:
                closer.close()
            return

        async def close() -> None:
            await asyncio.gather(*closers, return_exceptions=True)

        try:
            self.run(close(), timeout)
        except TimeoutError:
            _log.warning("MCP servers not closed within %.0f s at exit; their processes are left to exit", timeout)


_shared = McpLoop()
atexit.register(_shared.close_all)


def shared_loop() -> McpLoop:
    """This process's loop for MCP clients."""
    return _shared
