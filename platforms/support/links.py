"""Where each connection of an adapter stands, for :class:`~hermes_actors.ports.ConnectionReporter`.

The adapters that hold a connection to their platform (a websocket, a long poll, an event stream, an IMAP
session) keep one :class:`Links` per adapter: their connection tasks say :meth:`Links.connected` after each
successful poll or handshake, :meth:`Links.failed` with the error after each failed one, :meth:`Links.stopped`
when they give up for good; readiness reads :meth:`Links.problem` from another thread at every probe.

A connection in its first attempt is not a problem (a starting daemon is not "not ready" for the moment its
first poll takes); it becomes one only once an attempt has failed, and stays one until an attempt succeeds. Its
state reads ``starting``, ``connected``, ``reconnecting (<error>)`` or ``stopped: <error>`` (:meth:`Links.state`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

__all__ = ["Links", "problem_of"]

_STARTING, _CONNECTED = "starting", "connected"


def problem_of(kind: str, states: Iterable[tuple[str, str | None]]) -> str | None:
    """One line naming each connection that is down (``<kind> '<name>': <state>``, joined by ``; ``), or ``None``
    when no ``state`` is a problem (``None``)."""
    down = [f"{kind} '{name}': {state}" for name, state in states if state is not None]
    return "; ".join(down) if down else None


class Links:
    """The state of each named connection (a bot, an account) of one adapter; thread-safe.

    ``kind`` names a connection in :meth:`problem` (``"bot"``, ``"account"``).
    """

    def __init__(self, kind: str, names: Iterable[str] = ()) -> None:
        self._kind = kind
        self._lock = threading.Lock()
        self._states: dict[str, str] = dict.fromkeys(names, _STARTING)

    def connected(self, name: str) -> None:
        """``name`` is up: a poll was answered, a handshake finished."""
        with self._lock:
            self._states[name] = _CONNECTED

    def failed(self, name: str, error: str) -> None:
        """``name``'s last attempt failed with ``error``; it tries again."""
        with self._lock:
            self._states[name] = f"reconnecting ({error})"

    def stopped(self, name: str, error: str) -> None:
        """``name`` gave up for good because of ``error`` (which names the fix)."""
        with self._lock:
            self._states[name] = f"stopped: {error}"

    def state(self, name: str) -> str:
        """Where ``name`` stands: ``starting``, ``connected``, ``reconnecting (...)`` or ``stopped: ...``."""
        with self._lock:
            return self._states.get(name, _STARTING)

    def states(self) -> dict[str, str]:
        """:meth:`state` of every connection."""
        with self._lock:
            return dict(self._states)

    def problem(self) -> str | None:
        """Every connection that is down, named with its last error, or ``None`` when none is."""
        with self._lock:
            states = sorted(self._states.items())
        return problem_of(self._kind, ((name, None if now in (_STARTING, _CONNECTED) else now) for name, now in states))
