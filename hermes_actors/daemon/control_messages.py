"""The control socket's messages: tagged msgspec Structs, so a client and a daemon of different versions fail with a
clear "unknown request" instead of garbage (:mod:`hermes_actors.daemon.control` frames and serves them).

A :class:`Chat` with ``stream`` set is answered by :class:`ChatText` and :class:`ChatTool` frames as the turn runs,
then its :class:`ChatReply`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

import msgspec

from hermes_actors.job_port import JobSpec, JobView
from hermes_actors.ports import PlatformHealth, Readiness, Vitals
from hermes_actors.store.records import EndReason

__all__ = [
    "Bind",
    "BindReply",
    "Chat",
    "ChatEvent",
    "ChatReply",
    "ChatText",
    "ChatTool",
    "Emit",
    "ErrorReply",
    "JobsAction",
    "JobsReply",
    "JobsRequest",
    "PlatformState",
    "Reply",
    "Request",
    "SessionAction",
    "SessionAdmin",
    "SessionAdminReply",
    "Status",
    "StatusReply",
]


class Status(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """Ask for the daemon's state."""


PlatformState = PlatformHealth
"""One entry point in a status reply (:class:`hermes_actors.ports.PlatformHealth`, the health check's type)."""


class StatusReply(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """The daemon's state."""

    pid: int
    home: str
    database: str
    started_at: float
    agent: str
    live_actors: int
    running_turns: int
    queued_messages: int
    inbox_depth: int
    outbox_backlog: int
    platforms: list[PlatformState]
    ready: Readiness | None = None  # what /health/ready says (None from a daemon before these fields)
    vitals: Vitals | None = None  # the numbers /metrics exposes


class Chat(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """Run one terminal turn: ``text`` from the terminal ``chat_id`` of ``user_id``; wait for the reply."""

    chat_id: str
    user_id: str
    text: str
    message_id: str
    user_name: str | None = None
    timeout_s: float = 600.0
    stream: bool = False  # send ChatText/ChatTool frames as the turn runs, before its ChatReply


class ChatText(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """The next piece of a streamed turn's reply text."""

    delta: str


class ChatTool(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """A streamed turn's tool call started (``running``) or finished (``completed``)."""

    name: str
    call_id: str
    status: str


ChatEvent = ChatText | ChatTool
Emit = Callable[[ChatEvent], None]
"""Where a streamed turn's events go: a frame on the chat's connection, before its reply."""


class ChatReply(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """The turn's reply and the session that answered; ``handed_off`` names the platform a ``/handoff`` moved the
    conversation to; ``ended`` names the session the line reached after it had ended (``text`` says so; the line
    was not run); ``stopped`` says the turn was stopped before it answered."""

    session_id: str | None
    text: str
    handed_off: str | None = None
    ended: str | None = None
    stopped: bool = False  # the turn was stopped (/stop) before it answered: ``text`` says so; no answer was stored


class Bind(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """Point the terminal ``chat_id`` of ``user_id`` at ``session_id`` (``/resume`` from the command line)."""

    chat_id: str
    user_id: str
    session_id: str


class BindReply(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """The routing key that now reaches the session."""

    routing_key: str


class SessionAction(enum.StrEnum):
    """What ``hermesctl sessions`` asks the daemon to do to one session."""

    RENAME = "rename"
    END = "end"
    DELETE = "delete"  # ends the session first when it is live (the user confirmed that)


class SessionAdmin(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """Rename (``title``; ``None`` or blank clears it), end or delete ``session_id`` through the daemon, so its live
    actor applies the change."""

    action: SessionAction
    session_id: str
    title: str | None = None
    reason: EndReason = EndReason.OPERATOR  # of an end: an operator's, or ``user_exit`` from a terminal chat


class SessionAdminReply(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """What was done: the stored ``title`` (rename), whether a live session was ``ended`` (end, delete) and whether
    the session was ``deleted``."""

    session_id: str
    title: str | None = None
    ended: bool = False
    deleted: bool = False


class JobsAction(enum.StrEnum):
    """What ``hermesctl jobs`` asks the daemon to do (through its jobs port, so its timers follow at once)."""

    ADD = "add"
    LIST = "list"
    SHOW = "show"
    PAUSE = "pause"
    RESUME = "resume"
    RUN = "run"
    DELETE = "delete"


class JobsRequest(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """A scheduled-job change or read: ``spec`` for ``add``, ``job_id`` for one job, ``limit`` for ``list``."""

    action: JobsAction
    job_id: str | None = None
    spec: JobSpec | None = None
    limit: int = 100


class JobsReply(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """The jobs a request read or changed (none for a delete), and whether a delete found its job."""

    jobs: list[JobView]
    deleted: bool = False


class ErrorReply(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """The request failed; ``message`` says why and what to do."""

    message: str


Request = Status | Chat | Bind | SessionAdmin | JobsRequest
Reply = StatusReply | ChatReply | ChatText | ChatTool | BindReply | SessionAdminReply | JobsReply | ErrorReply
