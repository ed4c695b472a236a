"""The operator's port: every session, as the API server's ``/api/sessions`` routes see them.

An entry point that serves an operator (someone holding the admin key, not a chat user) reaches the runtime only
through :class:`Operator`, which it finds on its :class:`~hermes_actors.ports.Inbox` (``inbox.operator``). Changes go
the way ``hermesctl sessions`` sends them to a running ``hermesd``: through the session's live actor, refused with
:class:`~hermes_actors.errors.SessionBusyError` while another process holds the session's lease. The records here
are the port's own, so an entry point never sees the store's.

Errors: :class:`~hermes_actors.errors.SessionNotFoundError` (no such session), ``SessionBusyError`` (another process
has it), :class:`~hermes_actors.errors.SessionClosedError` (it ended or is ending), :class:`TitleError` (a title
too long), :class:`~hermes_actors.errors.TitleInUseError` and :class:`SessionExistsError` (a taken title or id).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import msgspec

from hermes_actors.errors import StoreError, TitleError

__all__ = [
    "AttachmentView",
    "Audience",
    "ConversationFilter",
    "ConversationPage",
    "ConversationView",
    "MessageView",
    "Operator",
    "SearchHitView",
    "SearchPage",
    "SegmentView",
    "SessionExistsError",
    "SessionMessages",
    "SessionPage",
    "SessionView",
    "TitleError",
    "TranscriptView",
]


class SessionExistsError(StoreError):
    """A session with the requested id exists already."""


class SessionView(msgspec.Struct, frozen=True, kw_only=True):
    """One session as the operator sees it; in a listing, a whole compression lineage shown by its tip.

    ``lineage`` holds the lineage's session ids, root first and ``id`` last (only ``id`` outside a lineage listing);
    ``message_count`` is the lineage's total in a lineage listing, the session's own otherwise. A listing leaves
    ``system_prompt`` out (``None``); a single session has it. ``agent`` names the configured agent that answers it.
    """

    id: str
    source: str
    title: str | None
    started_at: float
    last_active_at: float
    live: bool
    ended_at: float | None = None
    end_reason: str | None = None
    parent_session_id: str | None = None
    model: str | None = None
    message_count: int = 0
    tool_call_count: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    system_prompt: str | None = None
    lineage: list[str] = []
    preview: str | None = None
    agent: str | None = None


class SessionPage(msgspec.Struct, frozen=True, kw_only=True):
    """A page of a listing: the rows, how many there are in all under its filters, and the page's bounds."""

    sessions: list[SessionView]
    total: int
    limit: int
    offset: int


class MessageView(msgspec.Struct, frozen=True, kw_only=True):
    """One stored message; ``tool_calls`` is the JSON text the model sent (``None``: none)."""

    id: int
    session_id: str
    role: str
    content: str | None
    created_at: float
    tool_calls: str | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None


class SessionMessages(msgspec.Struct, frozen=True, kw_only=True):
    """A conversation's messages: ``session_id`` is the newest session of the lineage (where a new turn goes),
    ``lineage`` the sessions whose messages are listed, in order."""

    session_id: str
    lineage: list[str]
    messages: list[MessageView]


class Audience(msgspec.Struct, frozen=True, kw_only=True):
    """The sessions one API key sees: those ``platform`` opened in ``scope_id`` (the key's fingerprint; ``None``
    for a server without a key), and only ``user_id``'s when the key speaks for one user."""

    platform: str
    scope_id: str | None
    user_id: str | None = None


class ConversationFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which conversations a listing keeps (``None``: any): the platform, user and chat type, whether the tip has
    ended, a range of the tip's last activity (epoch seconds, inclusive), and the sessions an API key sees."""

    source: str | None = None
    user_id: str | None = None
    chat_type: str | None = None
    ended: bool | None = None
    active_after: float | None = None
    active_before: float | None = None
    audience: Audience | None = None


class ConversationView(msgspec.Struct, frozen=True, kw_only=True):
    """One conversation (a compression lineage) of a listing: its tip, where it talks and its totals."""

    tip: SessionView
    root_id: str
    message_count: int
    compressions: int
    user_id: str | None = None
    user_name: str | None = None
    chat_id: str | None = None
    chat_name: str | None = None
    chat_type: str | None = None


class ConversationPage(msgspec.Struct, frozen=True, kw_only=True):
    """A page of conversations, how many pass the filter in all, and the page's bounds."""

    conversations: list[ConversationView]
    total: int
    limit: int
    offset: int


class SearchHitView(msgspec.Struct, frozen=True, kw_only=True):
    """One conversation found by a search: the session and message of the match, and the snippet marking it with
    ``>>>``/``<<<`` (``matched`` is ``"title"`` or ``"message"``; a title match has no ``message_id``)."""

    session_id: str
    source: str
    title: str | None
    matched: str
    snippet: str
    last_active_at: float
    message_id: int | None = None
    role: str | None = None


class SearchPage(msgspec.Struct, frozen=True, kw_only=True):
    """What ``session_search`` discovery found; ``error`` (and ``suggestion``) when the query could not run."""

    query: str
    hits: list[SearchHitView] = []
    note: str | None = None
    error: str | None = None
    suggestion: str | None = None


class AttachmentView(msgspec.Struct, frozen=True, kw_only=True):
    """A file that came with a message; ``path`` is relative to the media directory when the file is in it."""

    message_id: int
    kind: str
    mime_type: str | None = None
    size: int | None = None
    path: str | None = None
    name: str | None = None
    source_url: str | None = None
    error: str | None = None


class SegmentView(msgspec.Struct, frozen=True, kw_only=True):
    """One session of a lineage with its messages; ``summary_id`` is the compression summary it starts with, and
    ``carried`` how many messages after it were carried over from the previous segment."""

    session: SessionView
    messages: list[MessageView]
    attachments: list[AttachmentView] = []
    summary_id: int | None = None
    carried: int = 0


class TranscriptView(msgspec.Struct, frozen=True, kw_only=True):
    """A whole lineage, root segment first; ``session_id`` is its tip."""

    session_id: str
    segments: list[SegmentView]


class Operator(Protocol):
    """What an operator may do to any session. Every call blocks (run it off an event loop)."""

    @property
    def admin_key(self) -> str | None:
        """The key an operator must present (``None``: the operator's routes are off)."""
        ...

    def list_sessions(self, *, limit: int, offset: int, source: str | None, include_children: bool) -> SessionPage:
        """Most recently active first: one row per compression lineage (its tip), or every session with
        ``include_children``; ``source`` keeps one platform's."""
        ...

    def create_session(self, *, session_id: str | None, title: str | None, system_prompt: str | None) -> SessionView:
        """A new live session, with no route yet; ``system_prompt`` replaces the configured one for it."""
        ...

    def get_session(self, session_id: str) -> SessionView:
        """The session with exactly this id."""
        ...

    def rename(self, session_id: str, title: str | None) -> SessionView:
        """Set the title (``None`` or blank clears it) through the session's actor."""
        ...

    def end(self, session_id: str) -> SessionView:
        """End the session as an operator (a session ended already keeps its first reason)."""
        ...

    def delete(self, session_id: str) -> bool:
        """Delete the session and its messages (a live one is ended first); whether it existed."""
        ...

    def messages(self, session_id: str, *, lineage: bool) -> SessionMessages:
        """The messages of the lineage ``session_id`` belongs to, up to its newest session (``lineage=False``:
        only that newest session's)."""
        ...

    def fork(self, session_id: str) -> SessionView:
        """A child of the session carrying a copy of its messages and its system prompt and tools; the session
        ends with reason ``branched``; the child's title is the parent's numbered ``"<title> (N)"``."""
        ...

    def chat_target(self, session_id: str) -> str:
        """The live session a new turn for ``session_id`` goes to (the newest of its lineage); ``SessionClosedError``
        when that one ended, ``SessionBusyError`` while another process holds it."""
        ...

    def conversations(self, where: ConversationFilter, *, limit: int, offset: int) -> ConversationPage:
        """One row per compression lineage passing ``where``, most recently active tip first."""
        ...

    def search(self, query: str, *, sort: str, limit: int) -> SearchPage:
        """``session_search`` discovery over every session (FTS5 syntax; ``sort``: relevance, newest, oldest)."""
        ...

    def session_search(self, arguments: Mapping[str, Any], *, audience: Audience | None) -> str:
        """The agent's ``session_search`` tool run with ``arguments`` over the sessions ``audience`` sees (``None``:
        every session): its JSON answer, a problem with the arguments as ``{"error": ...}`` (never raises for it)."""
        ...

    def session_search_parameters(self) -> dict[str, Any]:
        """The JSON schema of ``session_search``'s arguments, as the agent's tool offers them."""
        ...

    def transcript(self, session_id: str) -> TranscriptView:
        """The whole lineage ``session_id`` belongs to, each segment with its messages and their files."""
        ...

    def export_lineage(self, session_id: str) -> bytes:
        """The lineage of ``session_id`` as ``hermesctl sessions export`` writes it: one JSONL line per session."""
        ...

    def recent_ends(self, *, limit: int) -> list[SessionView]:
        """The sessions that ended most recently (resets, compressions, ends by hand), newest end first."""
        ...
