"""The session a log line is about, as structured fields (``session_id``, ``platform``) every formatter can add.

A session actor runs in a ``contextvars.Context`` of its own (on whichever pool thread runs it:
:class:`~hermes_actors.runtime.actors.PooledActor`), so :func:`bind_session` at the actor's start puts the session
into that context: every line logged in it from then on (the turn logic, the lifecycle steps, the agent calls, whose
pool threads run in a copy of that context) is about that session. A line about a session logged
elsewhere (the supervisor's thread) passes ``extra=session_extra(session_id, platform)`` instead, which wins.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Sequence

from hermes_actors.lifecycle.work import Delivery

__all__ = ["FIELDS", "bind_session", "fields_of", "platform_extra", "session_extra"]

FIELDS = ("session_id", "platform")
"""The structured fields of a line about a session, in the order formatters print them."""

_bound: contextvars.ContextVar[tuple[str, str | None] | None] = contextvars.ContextVar("hermes_session", default=None)


def bind_session(session_id: str, platform: str | None) -> None:
    """From now on, lines logged in this context (this thread, and what runs in copies of its context) are about
    ``session_id`` of ``platform``."""
    _bound.set((session_id, platform))


def session_extra(session_id: str, platform: str | None = None) -> dict[str, str]:
    """``extra=`` for a line about ``session_id`` logged outside its actor's thread."""
    return {"session_id": session_id, "platform": platform} if platform else {"session_id": session_id}


def platform_extra(session_id: str, deliveries: Sequence[Delivery]) -> dict[str, str]:
    """:func:`session_extra` with the platform of the first of ``deliveries`` (none: without a platform)."""
    return session_extra(session_id, deliveries[0].message.source.platform if deliveries else None)


def fields_of(record: logging.LogRecord) -> dict[str, str]:
    """The session fields of ``record``: its own (``extra=``), else those bound where it was logged (call it on
    the logging thread: a handler's ``format`` runs there)."""
    found = {name: str(getattr(record, name)) for name in FIELDS if getattr(record, name, None) is not None}
    if "session_id" not in found:
        bound = _bound.get()
        if bound is not None:
            found["session_id"] = bound[0]
            if bound[1] is not None:
                found.setdefault("platform", bound[1])
    return found
