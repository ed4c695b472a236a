"""The client's event loop: one daemon thread that runs every request of the shared client, for any caller.

Senders and pollers are threads; aiohttp needs a loop. Rather than a loop per caller, one loop on one thread
(``hermes-http-client``) starts on the first request and runs every request as a task, so a thread waits on a
future and a coroutine on another loop awaits one. At interpreter exit it runs its closing hooks (the sessions)
and stops; in a child process after ``fork`` it starts afresh, since the parent's thread did not come along.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["ClientLoop"]

T = TypeVar("T")

_CLOSE_TIMEOUT_S = 5.0
_LOOPS: weakref.WeakSet[ClientLoop] = weakref.WeakSet()


class ClientLoop:
    """An event loop on a daemon thread named ``name``, started by the first :meth:`submit`."""

    def __init__(self, name: str = "hermes-http-client") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._hooks: list[Callable[[], Awaitable[None]]] = []
        self.generation = 0
        """Counts the loops this object has started: a session made on an older one is not used again."""
        _LOOPS.add(self)

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coro`` on the loop; cancelling the future cancels it."""
        return asyncio.run_coroutine_threadsafe(coro, self._running())

    def is_current(self) -> bool:
        """Whether the caller runs on the loop's own thread (where waiting on a future would wait on itself)."""
        return self._thread is not None and threading.current_thread() is self._thread

    def at_close(self, hook: Callable[[], Awaitable[None]]) -> None:
        """Await ``hook`` on the loop when it closes (at interpreter exit, or :meth:`close`)."""
        with self._lock:
            self._hooks.append(hook)

    def close(self) -> None:
        """Await the closing hooks, stop the loop and wait (a bounded time) for its thread; a no-op when not running."""
        with self._lock:
            loop, thread, hooks = self._loop, self._thread, list(self._hooks)
            self._loop, self._thread = None, None
            self._hooks.clear()
        if loop is None or thread is None:
            return

        async def finish() -> None:
            running = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            for hook in hooks:
                await hook()

        if thread.is_alive() and not self.is_current():
            done = asyncio.run_coroutine_threadsafe(finish(), loop)
            try:
                done.result(_CLOSE_TIMEOUT_S)
            except Exception:  # a hook that fails or hangs must not keep the process from exiting
                done.cancel()
            loop.call_soon_threadsafe(loop.stop)
            thread.join(_CLOSE_TIMEOUT_S)

    def _running(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                started = threading.Event()
                thread = threading.Thread(target=_run, args=(loop, started), name=self._name, daemon=True)
                thread.start()
                started.wait()
                self._loop, self._thread = loop, thread
                self.generation += 1
            return self._loop

    def _forget(self) -> None:
        """In a forked child: the loop's thread stayed in the parent; start a new one when next needed."""
        self._lock = threading.Lock()
        self._loop, self._thread = None, None
        self._hooks.clear()


def _run(loop: asyncio.AbstractEventLoop, started: threading.Event) -> None:
    asyncio.set_event_loop(loop)
    loop.call_soon(started.set)
    try:
        loop.run_forever()
    finally:
        loop.close()


def _close_all() -> None:
    for client_loop in list(_LOOPS):
        client_loop.close()


def _forget_all() -> None:
    for client_loop in list(_LOOPS):
        client_loop._forget()


atexit.register(_close_all)
os.register_at_fork(after_in_child=_forget_all)
