"""The result Structs of :func:`~hermes_actors.search.session_search`, one for each thing an answer holds.

They cross to the agent as JSON (the ``session_search`` tool) and to ``hermesctl search``, so they live apart from
the code that fills them: frozen and keyword-only. A discovery hit carries every field, under the reference
system's names (``when``, ``messages``, ``match_message_id``), so a count of 0 is never a field left out; elsewhere
a field at its default is left out to keep answers short, and a count that a shape always reports (a scroll's
``messages_before``/``messages_after``, a read's ``omitted``) is ``None`` in the shapes that do not report it.
"""

from __future__ import annotations

from typing import Literal

import msgspec

__all__ = ["SearchHit", "SearchMessage", "SearchResult", "SessionInfo", "Shape", "Sort"]

Shape = Literal["scroll", "read", "browse", "discovery"]
Sort = Literal["relevance", "newest", "oldest"]


class SearchMessage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One message in a window, a bookend or a read; ``anchor`` marks the message a scroll or hit is about (the
    flags and ``tool_name`` are left out when false or absent)."""

    id: int
    role: str
    content: str | None
    created_at: float
    tool_name: str | None = None
    anchor: bool = False
    truncated: bool = False  # ``content`` was cut (discovery only; scroll and read return it whole)


class SessionInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What identifies a session in a result: id, title, source, when, size, and a preview when browsing."""

    session_id: str
    source: str
    started_at: float
    last_active_at: float
    title: str | None = None
    ended_at: float | None = None
    end_reason: str | None = None
    message_count: int = 0
    parent_session_id: str | None = None
    preview: str | None = None  # browse: the first user message, cut to PREVIEW_CHARS


class SearchHit(msgspec.Struct, frozen=True, kw_only=True):
    """One lineage found by discovery, reported in one of its sessions; every field is always there.

    ``when`` is the session's start. ``matched`` is ``"title"`` (``messages`` are then the session's first messages
    and ``match_message_id`` is ``None``) or ``"message"`` (``messages`` are the window around the match, the
    anchor flagged); ``snippet`` marks the match with ``>>>``/``<<<``. ``bookend_start``/``bookend_end`` are the
    first and last three user/assistant messages outside ``messages``; ``messages_before``/``messages_after`` count
    every message before and after it.
    """

    session_id: str
    title: str | None
    when: float
    source: str
    last_active_at: float
    matched: Literal["title", "message"]
    snippet: str
    lineage_root: str | None  # set when the session continues an earlier one
    match_message_id: int | None
    role: str | None
    messages: list[SearchMessage]
    bookend_start: list[SearchMessage]
    bookend_end: list[SearchMessage]
    messages_before: int
    messages_after: int


class SearchResult(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The answer of :func:`~hermes_actors.search.session_search`; fields at their default are left out of the JSON.

    ``error`` (with a ``suggestion`` for a malformed query) means nothing was searched. ``note`` says how an
    answer was bounded (a relevance window, a clamp).
    """

    shape: Shape
    query: str | None = None
    session: SessionInfo | None = None  # scroll, read
    messages: list[SearchMessage] = msgspec.field(default_factory=list)  # scroll, read
    omitted: int | None = None  # read: messages left out between the first 20 and the last 10
    messages_before: int | None = None  # scroll
    messages_after: int | None = None  # scroll
    sessions: list[SessionInfo] = msgspec.field(default_factory=list)  # browse
    hits: list[SearchHit] = msgspec.field(default_factory=list)  # discovery
    note: str | None = None
    error: str | None = None
    suggestion: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the search ran (it may still have found nothing)."""
        return self.error is None
