"""Clients watching turns live: an entry point registers a :class:`~hermes_actors.agents.turn.TurnEvents` for the
inbound message it is waiting on, and the turn that answers the message hands it to the agent.

Watching is a view for this process only: nothing of it is stored, a turn nobody watches runs as before, and a
turn replayed after a restart is watched by whoever registered again (an idempotent retry).

A turn invalidated while it runs (``/stop``, ``/new``, a reset: its cancel token) is cut off from its watchers the
moment it is cancelled (the agent may go on writing until it notices), and reported as
:meth:`~hermes_actors.turn_events.TurnEvents.stopped` once its commit has stored the message without an answer
(:meth:`TurnWatch.stopped`), so whoever hears of the stop finds the store saying so.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Protocol

from hermes_actors.agents.turn import ToolStatus, TurnEvents

__all__ = ["Cancellable", "TurnWatch"]

_log = logging.getLogger(__name__)


class Cancellable(Protocol):
    """A turn's cancel token, as the watch sees it (:class:`~hermes_actors.runtime.services.CancelToken`)."""

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when the turn is invalidated before it settles (at once if it is already)."""
        ...


class TurnWatch:
    """Message id → the events of whoever waits on that message's turn. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watchers: dict[str, TurnEvents] = {}

    def watch(self, message_id: str, events: TurnEvents) -> None:
        """Report the turn that answers ``message_id`` to ``events`` (replacing an earlier watcher)."""
        with self._lock:
            self._watchers[message_id] = events

    def unwatch(self, message_id: str) -> None:
        """Stop reporting ``message_id``'s turn (nothing happens when nobody watches it)."""
        with self._lock:
            self._watchers.pop(message_id, None)

    def events_for(self, message_ids: Iterable[str]) -> TurnEvents | None:
        """What a turn answering ``message_ids`` reports to: their watchers, ``None`` when nobody watches."""
        with self._lock:
            found = [self._watchers[m] for m in message_ids if m in self._watchers]
        if not found:
            return None
        return found[0] if len(found) == 1 else _Fanout(tuple(found))

    def begin(self, message_ids: Iterable[str], session_id: str, token: Cancellable | None = None) -> TurnEvents | None:
        """:meth:`events_for` a turn answering ``message_ids`` that begins now (its agent is about to be called),
        after telling them it has begun (:meth:`TurnEvents.started`). With the turn's ``token``, a cancel cuts them
        off from the turn: nothing the agent reports after it reaches them."""
        events = self.events_for(message_ids)
        if events is None:
            return None
        events.started(session_id)
        if token is None:
            return events
        live = _Live(events)
        token.on_cancel(live.cut)
        return live

    def stopped(self, message_ids: Iterable[str]) -> None:
        """The turn answering ``message_ids`` was stopped, and its commit stored them without an answer: tell their
        watchers (:meth:`TurnEvents.stopped`)."""
        events = self.events_for(message_ids)
        if events is None:
            return
        try:  # on the session's thread, after its commit: a watcher's bug must not fail the turn
            events.stopped()
        except Exception:
            _log.exception("a turn watcher failed on the turn's stop")


class _Live:
    """A turn's watchers until the turn is invalidated (:meth:`cut`): nothing it reports after that reaches them.

    The lock orders a cancel against the agent's thread: an event reaches the watchers before the cut or not at
    all."""

    __slots__ = ("_events", "_lock", "_over")

    def __init__(self, events: TurnEvents) -> None:
        self._events = events
        self._lock = threading.Lock()
        self._over = False

    def cut(self) -> None:
        """Let nothing more through (called on the thread that cancelled the turn)."""
        with self._lock:
            self._over = True

    def started(self, session_id: str) -> None:
        with self._lock:
            if not self._over:
                self._events.started(session_id)

    def stopped(self) -> None:
        with self._lock:
            if not self._over:
                self._events.stopped()

    def text(self, delta: str) -> None:
        with self._lock:
            if not self._over:
                self._events.text(delta)

    def tool(self, name: str, call_id: str, status: ToolStatus, detail: str = "") -> None:
        with self._lock:
            if not self._over:
                self._events.tool(name, call_id, status, detail)


class _Fanout:
    """Several watchers of one turn (a turn that merged messages); one that fails does not stop the others."""

    def __init__(self, watchers: tuple[TurnEvents, ...]) -> None:
        self._watchers = watchers

    def started(self, session_id: str) -> None:
        for watcher in self._watchers:
            try:
                watcher.started(session_id)
            except Exception:
                _log.exception("a turn watcher failed on the turn's start")

    def stopped(self) -> None:
        for watcher in self._watchers:
            try:
                watcher.stopped()
            except Exception:
                _log.exception("a turn watcher failed on the turn's stop")

    def text(self, delta: str) -> None:
        for watcher in self._watchers:
            try:
                watcher.text(delta)
            except Exception:
                _log.exception("a turn watcher failed on a text delta")

    def tool(self, name: str, call_id: str, status: ToolStatus, detail: str = "") -> None:
        for watcher in self._watchers:
            try:
                watcher.tool(name, call_id, status, detail)
            except Exception:
                _log.exception("a turn watcher failed on a tool event")
