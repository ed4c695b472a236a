"""The work a session runs besides plain messages, and the lifecycle's reports to the supervisor.

A :class:`Delivery` is a committed inbound message; a :data:`Control` is a lifecycle step (end, title, compress,
handoff, an approval's decision) run as a turn of the session's actor. :class:`EndDue` and :class:`HandoffResult`
are what the reset timers and the outbox report. They live here, below the runtime, because the lifecycle commands
build and read them; the runtime's message protocol (:mod:`hermes_actors.runtime.protocol`) re-exports every one of
them.
"""

from __future__ import annotations

from concurrent.futures import Future

import msgspec

from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource
from hermes_actors.store.records import EndReason

__all__ = [
    "AdminChange",
    "Compress",
    "Control",
    "Decide",
    "Delivery",
    "EndDue",
    "EndSession",
    "Handoff",
    "HandoffResult",
    "PendingHandoff",
    "SetTitle",
]


class Delivery(msgspec.Struct, frozen=True, kw_only=True):
    """A committed inbound message and its inbox row."""

    inbox_id: int
    message: InboundMessage
    replayed: bool = False  # handed over by recovery: another turn may have answered it since (checked first)
    term: int = 0  # cluster mode: the epoch of its shard's term it was handed over under (0: not in a cluster)


class EndSession(msgspec.Struct, frozen=True, kw_only=True):
    """End the session: ``/new``, ``/reset``, a reset timer (which may notify), or an operator (``done`` resolves
    once the end has committed); ``save_memories`` runs the save-memory turn first (``runtime.save_memory_on``)."""

    reason: EndReason
    reply: str | None = None
    save_memories: bool = False
    done: Future[None] | None = None


class SetTitle(msgspec.Struct, frozen=True, kw_only=True):
    """``/title [text]``: show the title, or set it. With ``done`` it is an operator's rename (``hermesctl sessions
    rename``): ``text`` is set (blank or ``None`` clears it) and ``done`` resolves with the stored title or the
    refusal."""

    text: str | None = None
    done: Future[str | None] | None = None


class Compress(msgspec.Struct, frozen=True, kw_only=True):
    """``/compress``: summarise into a continuation session."""


class Handoff(msgspec.Struct, frozen=True, kw_only=True):
    """``/handoff <platform>``: bind the platform's home chat to this session and continue there."""

    platform: str


class Decide(msgspec.Struct, frozen=True, kw_only=True):
    """``/approve ID`` or ``/deny ID [reason]`` (a chat's buttons, the API and the console send the same): the
    decision on the calls request ``approval_id`` holds, which the paused turn continues from. ``by`` names who
    answered (a principal, ``operator`` or ``timeout``)."""

    approval_id: int
    approved: bool
    by: str
    reason: str | None = None


Control = EndSession | SetTitle | Compress | Handoff | Decide


class AdminChange(msgspec.Struct, frozen=True, kw_only=True):
    """hermesd → supervisor: an operator's rename or end of ``session_id`` (``hermesctl sessions ...``), run as a
    control turn of its actor so the actor's state and the store agree; ``control`` carries the future to answer."""

    session_id: str
    control: SetTitle | EndSession


class EndDue(msgspec.Struct, frozen=True, kw_only=True):
    """Timer → supervisor: end ``session_id`` for ``reason`` after a save-memory turn, telling the user ``notice``."""

    session_id: str
    reason: EndReason
    notice: str | None = None


class HandoffResult(msgspec.Struct, frozen=True, kw_only=True):
    """Outbox → supervisor: how the first message of a handoff went (``error`` is ``None`` when it was sent), and
    the chat (and thread) it went to."""

    session_id: str
    error: str | None = None
    chat_id: str | None = None
    thread_id: str | None = None


class PendingHandoff(msgspec.Struct, frozen=True, kw_only=True):
    """A ``/handoff`` waiting for its first message to be sent.

    ``key`` is the routing key the handoff turn pointed at the session (empty until that turn has committed) and
    ``previous`` the session that key led to before, which a failed handoff restores. ``message_id`` is the
    ``/handoff`` message, which the report of how the handoff went answers.
    """

    origin: SessionSource
    platform: str
    message_id: str | None = None
    key: str = ""
    previous: str | None = None
