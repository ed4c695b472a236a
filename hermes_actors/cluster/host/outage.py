"""How a shard host's loops report that PostgreSQL is away: one WARNING when a loop first fails and one when it
works again, with how long it was down, instead of a traceback every second while the server restarts."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from hermes_actors.errors import StoreError

__all__ = ["Outages"]


class Outages:
    """The outages of a host's loops (the pull, the heartbeat, the listener), by name; ``errors`` counts every
    failure. A failure that is not the store's (a bug) is logged with its traceback each time."""

    def __init__(self, logger: logging.Logger, prefix: str, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._log = logger
        self._prefix = prefix
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._since: dict[str, float] = {}
        self.errors = 0

    def failed(self, loop: str, exc: BaseException) -> None:
        """``loop`` failed with ``exc``."""
        with self._lock:
            self.errors += 1
            first = loop not in self._since
            if first:
                self._since[loop] = self._monotonic()
        if not isinstance(exc, StoreError):
            self._log.error("%s: %s failed", self._prefix, loop, exc_info=exc)
        elif first:
            self._log.warning("%s: %s failed, PostgreSQL is away (%s); trying again", self._prefix, loop, exc)

    def worked(self, loop: str) -> None:
        """``loop`` worked (after an outage: say so, and for how long it was down)."""
        with self._lock:
            since = self._since.pop(loop, None)
        if since is not None:
            self._log.warning("%s: %s works again after %.1f s", self._prefix, loop, self._monotonic() - since)
