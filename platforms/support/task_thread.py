"""One background event loop on its own thread, running a named task per connection: the polling adapters' engine.

The runtime is threads and actors; the adapters that reach out to their platform (Telegram and Matrix long polls,
Signal's event streams, Discord's gateway websockets) are asyncio. Each runs one task per bot or account on one
loop that shares one ``aiohttp.ClientSession``, so they share this lifecycle: :meth:`TaskThread.start` returns once
every task runs and raises what failed before that; an error after it is logged, since nobody waits for it then;
:meth:`TaskThread.stop` cancels the tasks from the caller's thread and waits a bounded time for the loop to end.

What differs stays in each adapter: what its tasks do, its thread name and log wording (passed in, with its own
logger, so its log lines read as before). The loop's default executor (where ``asyncio.to_thread`` and
:func:`~hermes_actors.ports.accept_many_async` run) is shut down before the loop closes, so a commit under way ends
first.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import aiohttp

from platforms.support.http_client import open_session

__all__ = ["Spawn", "TaskThread"]

_START_TIMEOUT_S = 30.0

Spawn = Callable[[aiohttp.ClientSession], Mapping[str, Coroutine[Any, Any, None]]]
"""Called on the loop with the shared session; returns the coroutines to run as tasks, keyed by task name."""


class TaskThread:
    """Runs the tasks a :data:`Spawn` returns on a new event loop in the thread ``name``.

    ``log`` and ``label`` (such as ``"telegram: the poll"``) word the two log lines this class writes: ``"<label>
    loop ended with an error"`` and ``"<label> thread did not stop within <timeout> s"``.
    """

    def __init__(self, *, name: str, label: str, log: logging.Logger) -> None:
        self._name = name
        self._label = label
        self._log = log
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tasks: list[asyncio.Task[None]] = []

    def start(self, spawn: Spawn) -> None:
        """Start the thread and return once the tasks run; an error raised before then is raised here."""
        started: concurrent.futures.Future[None] = concurrent.futures.Future()
        loop = asyncio.new_event_loop()
        self._loop = loop

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._run(spawn, started))
            except BaseException as exc:
                if not started.done():  # failed before the tasks began: start() raises it
                    started.set_exception(exc)
                else:
                    self._log.exception("%s loop ended with an error", self._label)
            finally:
                loop.run_until_complete(loop.shutdown_default_executor())
                loop.close()

        self._thread = threading.Thread(target=run, name=self._name, daemon=True)
        self._thread.start()
        started.result(timeout=_START_TIMEOUT_S)

    async def _run(self, spawn: Spawn, started: concurrent.futures.Future[None]) -> None:
        async with open_session() as session:
            self._tasks = [asyncio.create_task(coro, name=name) for name, coro in spawn(session).items()]
            started.set_result(None)
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel the tasks and wait up to ``timeout`` for the thread; a no-op when it is not running."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return

        def cancel() -> None:
            for task in self._tasks:
                task.cancel()

        try:
            loop.call_soon_threadsafe(cancel)
        except RuntimeError:  # the loop closed in between: the tasks have ended already
            return
        thread.join(timeout)
        if thread.is_alive():
            self._log.warning("%s thread did not stop within %.1f s", self._label, timeout)
