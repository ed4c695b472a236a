"""Typed rows the store returns and accepts: frozen msgspec Structs, safe to pass between actors."""

from __future__ import annotations

import enum
from typing import Any

import msgspec

__all__ = [
    "AttachmentRecord",
    "EndReason",
    "FtsHit",
    "FtsResult",
    "HomeChannel",
    "InboxKind",
    "InboxRow",
    "InboxState",
    "LineagePage",
    "LineageRow",
    "MessageRecord",
    "MessageRow",
    "NewMessage",
    "OptimizeResult",
    "OutboxRow",
    "QueueSummary",
    "Role",
    "SessionFilter",
    "SessionRecord",
    "SourceCount",
    "StoreStats",
    "TimerRow",
    "TipFilter",
]


class Role(enum.StrEnum):
    """Who wrote a message."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class EndReason(enum.StrEnum):
    """Why a session ended. The first reason recorded wins."""

    NEW_SESSION = "new_session"
    SESSION_RESET = "session_reset"
    IDLE = "idle"
    DAILY = "daily"
    COMPRESSION = "compression"
    SESSION_SWITCH = "session_switch"
    USER_EXIT = "user_exit"
    HANDOFF = "handoff"
    IMPORTED = "imported"
    OPERATOR = "operator"  # hermesctl sessions end (or delete of a live session)
    BRANCHED = "branched"  # forked by the operator API: a child carries a copy of its messages on


class SessionOwnerRow(msgspec.Struct, frozen=True, kw_only=True):
    """Whose a session is (:meth:`~hermes_actors.store.sessions.Sessions.owner`): where it was opened, in which
    scope and by whom, whether it is live, and the session a routing key asked about leads to now (``None``: no
    route, or no key asked)."""

    source: str
    scope_id: str | None
    live: bool
    user_id: str | None
    route: str | None = None


class SessionRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One row of ``sessions``."""

    id: str
    source: str
    started_at: float
    last_active_at: float
    user_id: str | None = None
    user_name: str | None = None
    chat_id: str | None = None
    chat_type: str | None = None
    chat_name: str | None = None
    thread_id: str | None = None
    scope_id: str | None = None
    account_id: str | None = None
    routing_key: str | None = None
    model: str | None = None
    title: str | None = None
    system_prompt: str | None = None  # the system message as sent, frozen when the session started
    parent_session_id: str | None = None
    ended_at: float | None = None
    end_reason: str | None = None
    message_count: int = 0
    tool_call_count: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    tools: str | None = None  # the tool list offered, frozen at the start (JSON); None: from before version 6
    tokens_estimated: int = 0  # 1: some turn's token counts are estimates (the model reported no usage)
    agent: str | None = None  # the named agent chosen when it started (version 8); None: the default agent

    @property
    def is_live(self) -> bool:
        """Whether the session has not ended."""
        return self.ended_at is None


class LineageRow(msgspec.Struct, frozen=True, kw_only=True):
    """One conversation of a listing: a compression lineage, shown by its tip (its newest segment).

    ``members`` are the lineage's session ids, root first and ``tip.id`` last; ``message_count`` is their total
    (a segment after a compression repeats the summary and the recent messages it carried over).
    """

    tip: SessionRecord
    root_id: str
    members: list[str]
    message_count: int
    compressions: int  # len(members) - 1
    preview: str | None = None  # the lineage's first user message, on one line and cut


class LineagePage(msgspec.Struct, frozen=True, kw_only=True):
    """The lineages a listing shows and how many there are in all under its filters."""

    rows: list[LineageRow]
    total: int


class NewMessage(msgspec.Struct, frozen=True, kw_only=True):
    """A message to append; ``created_at`` defaults to the time of the append."""

    role: Role
    content: str | None = None
    tool_calls: str | None = None  # JSON array text
    tool_name: str | None = None
    tool_call_id: str | None = None
    token_count: int | None = None
    created_at: float | None = None
    platform_message_id: str | None = None
    input_tokens: int = 0  # counted on the session, not stored per message
    output_tokens: int = 0
    tokens_estimated: bool = False  # the session's counts above are estimates: marks the session (sticky)


class MessageRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One row of ``messages``."""

    id: int
    session_id: str
    role: str
    content: str | None
    created_at: float
    tool_calls: str | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None
    token_count: int | None = None
    platform_message_id: str | None = None


MessageRow = tuple[str, str | None, str | None, str | None, str | None, int | None, float, str | None]
"""A message as an import writes it: (role, content, tool_calls, tool_name, tool_call_id, token_count, created_at,
platform_message_id)."""


class FtsHit(msgspec.Struct, frozen=True, kw_only=True):
    """A message that matched a full-text query; ``snippet`` marks matches with ``>>>``/``<<<``."""

    message_id: int
    session_id: str
    role: str
    created_at: float
    snippet: str
    rank: float


class FtsResult(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of a full-text query: hits, or an ``error`` saying what is wrong and a ``suggestion``."""

    query: str
    hits: list[FtsHit] = msgspec.field(default_factory=list)
    error: str | None = None
    suggestion: str | None = None
    index: str | None = None  # "words" or "trigram": which index answered

    @property
    def ok(self) -> bool:
        """Whether the query ran (it may still have no hits)."""
        return self.error is None


class SourceCount(msgspec.Struct, frozen=True, kw_only=True):
    """Sessions and messages of one source platform."""

    source: str
    sessions: int
    messages: int


class StoreStats(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of the store's size."""

    sessions: int
    live_sessions: int
    messages: int
    by_source: list[SourceCount]
    database_bytes: int
    schema_version: int


_FILTER_COLUMNS = ("source", "scope_id", "account_id", "chat_id", "user_id")


class OptimizeResult(msgspec.Struct, frozen=True, kw_only=True):
    """What ``Store.optimize`` did: messages in each rebuilt search index and the file size around it."""

    messages_indexed: int
    cjk_indexed: int
    wal_kept: bool  # a reader kept the WAL from being emptied; it shrinks at the next checkpoint
    bytes_before: int
    bytes_after: int


class InboxState(enum.StrEnum):
    """Where an inbox row stands; the stored text is the value."""

    PENDING = "pending"
    """Accepted, its turn not yet committed."""
    DONE = "done"
    """Answered: its turn committed."""
    REJECTED = "rejected"
    """Refused (backpressure, a closed session); the refusal is the reply."""


class InboxKind(enum.StrEnum):
    """What an inbox row carries; the stored text is the value. Only a message belongs to a platform."""

    MESSAGE = "message"
    """A platform's inbound message (its payload an encoded :class:`~hermes_actors.messages.InboundMessage`)."""
    TIMER = "timer"
    """A cluster's due idle or daily reset of a session (its payload names the session and the deadline)."""
    ADMIN = "admin"
    """An operator's rename, end or delete of a session in a cluster (its payload the request, then the outcome)."""


class InboxRow(msgspec.Struct, frozen=True, kw_only=True):
    """A committed inbound message, or a control row of a cluster (``kind``; its ``platform`` is then empty)."""

    id: int
    platform: str
    account_id: str
    platform_message_id: str
    routing_key: str
    payload: bytes
    received_at: float
    state: InboxState
    session_id: str | None = None
    owner: str | None = None  # the lease owner of the process that accepted (or since claimed) the row
    kind: InboxKind = InboxKind.MESSAGE


class QueueSummary(msgspec.Struct, frozen=True, kw_only=True):
    """How many rows of a queue wait, and when the oldest of them arrived (``None``: none waits)."""

    count: int
    oldest_at: float | None


class OutboxRow(msgspec.Struct, frozen=True, kw_only=True):
    """A reply waiting for delivery; ``attempts > 0`` means a send may already have reached the platform."""

    id: int
    session_id: str | None
    platform: str
    account_id: str
    chat_id: str | None
    thread_id: str | None
    payload: bytes
    created_at: float
    attempts: int
    next_attempt_at: float


class TimerRow(msgspec.Struct, frozen=True, kw_only=True):
    """A durable deadline."""

    name: str
    due_at: float
    payload: bytes | None = None


class HomeChannel(msgspec.Struct, frozen=True, kw_only=True):
    """Where handoff and notifications go on one platform account (``/sethome``)."""

    platform: str
    account_id: str
    chat_id: str
    thread_id: str | None = None
    chat_type: str | None = None
    set_by: str | None = None
    scope_id: str | None = None


class AttachmentRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One row of ``attachments``; ``path`` is relative to the media directory (absolute if saved elsewhere)."""

    id: int
    message_id: int
    kind: str
    created_at: float
    mime_type: str | None = None
    size: int | None = None
    path: str | None = None
    sha256: str | None = None
    source_url: str | None = None
    name: str | None = None
    error: str | None = None


class SessionFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which sessions a caller may see: each field that is not ``UNSET`` must equal that column of ``sessions``.

    ``None`` and ``""`` are the same (absent), as in routing. An empty filter matches every session.
    """

    source: str | msgspec.UnsetType = msgspec.UNSET
    scope_id: str | msgspec.UnsetType | None = msgspec.UNSET
    account_id: str | msgspec.UnsetType | None = msgspec.UNSET
    chat_id: str | msgspec.UnsetType | None = msgspec.UNSET
    user_id: str | msgspec.UnsetType | None = msgspec.UNSET
    nothing: bool = False  # two requirements on one column that disagree: no session passes

    def _pairs(self) -> list[tuple[str, str]]:
        pairs = []
        for column in _FILTER_COLUMNS:
            value = getattr(self, column)
            if value is not msgspec.UNSET:
                pairs.append((column, value or ""))
        return pairs

    def sql(self, alias: str = "") -> tuple[str, list[Any]]:
        """An SQL condition over ``sessions`` (``alias.`` before each column) and its parameters; ``TRUE`` when
        empty."""
        prefix = f"{alias}." if alias else ""
        if self.nothing:
            return "FALSE", []
        pairs = self._pairs()
        if not pairs:
            return "TRUE", []
        clauses = [f"coalesce({prefix}{column}, '') = ?" for column, _ in pairs]
        return "(" + " AND ".join(clauses) + ")", [value for _, value in pairs]

    def matches(self, record: SessionRecord) -> bool:
        """Whether ``record`` passes the filter."""
        return not self.nothing and all((getattr(record, column) or "") == value for column, value in self._pairs())

    def also(self, **columns: str | None) -> SessionFilter:
        """This filter with ``columns`` required too (a platform filter on top of a visibility rule); a column
        already required to hold another value makes a filter that nothing passes."""
        for column, value in columns.items():
            held = getattr(self, column)
            if held is not msgspec.UNSET and (held or "") != (value or ""):
                return msgspec.structs.replace(self, nothing=True)
        return msgspec.structs.replace(self, **columns)


class TipFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Conditions on a lineage's tip alone: its chat type, and a range of its last activity (inclusive, epoch
    seconds; ``None``: open)."""

    chat_type: str | None = None
    active_after: float | None = None
    active_before: float | None = None

    def sql(self) -> tuple[list[str], list[Any]]:
        """The clauses over the tip ``s`` and their parameters."""
        clauses: list[str] = []
        params: list[Any] = []
        if self.chat_type is not None:
            clauses.append("coalesce(s.chat_type, '') = ?")
            params.append(self.chat_type)
        if self.active_after is not None:
            clauses.append("s.last_active_at >= ?")
            params.append(self.active_after)
        if self.active_before is not None:
            clauses.append("s.last_active_at <= ?")
            params.append(self.active_before)
        return clauses, params
