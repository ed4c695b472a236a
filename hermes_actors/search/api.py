"""session_search: the arguments checked and clamped, and the shape they ask for answered.

Scroll, read and browse are a few bounded reads each (:class:`~hermes_actors.store.search_reads.SearchReads`,
on the store passed in) and live here; discovery has its own module. Every
problem with what a caller passed becomes a :class:`SearchResult` whose ``error`` names it and the fix, in the
order the checks appear in :func:`_search`.
"""

from __future__ import annotations

from collections.abc import Sequence

from hermes_actors.search.discovery import MAX_LIMIT, discover
from hermes_actors.search.lineages import Lineages
from hermes_actors.search.query import parse
from hermes_actors.search.shapes import SearchResult, SessionInfo, Shape, Sort
from hermes_actors.search.transcript import (
    cut,
    first_messages,
    last_messages,
    messages_around,
    open_session,
    session_info,
)
from hermes_actors.store import Role, SessionFilter
from hermes_actors.store.interface import StoreInterface
from hermes_actors.store.search_reads import SearchReads

__all__ = ["DEFAULT_LIMIT", "DEFAULT_WINDOW", "MAX_LIMIT", "MAX_WINDOW", "session_search"]

DEFAULT_WINDOW = 5
MAX_WINDOW = 20
DEFAULT_LIMIT = 3
READ_ALL_UP_TO = 30  # a longer session is read as its first READ_HEAD and last READ_TAIL messages
READ_HEAD = 20
READ_TAIL = 10
PREVIEW_CHARS = 160

_SORTS = ("relevance", "newest", "oldest")
_DEFAULT_ROLES = (Role.USER.value, Role.ASSISTANT.value)


def session_search(
    store: StoreInterface,
    *,
    query: str | None = None,
    session_id: str | None = None,
    around_message_id: int | None = None,
    window: int = DEFAULT_WINDOW,
    role_filter: Sequence[str] | str | None = None,
    sort: Sort = "relevance",
    limit: int = DEFAULT_LIMIT,
    current_session_id: str | None = None,
    source: str | None = None,
    visible: SessionFilter | None = None,
) -> SearchResult:
    """Search the store; the shape follows from the arguments (see :mod:`hermes_actors.search`). Never raises for
    input.

    ``visible`` limits every shape to the sessions that pass it (the asking principal's, for the agent's tool):
    a session outside it is answered exactly like one that does not exist. ``source`` narrows further to one
    platform. Runs in one read transaction, so every query of a search sees the same snapshot of the store.
    """
    scope = visible or SessionFilter()
    if source is not None:
        scope = scope.also(source=source)
    reads = store.search_reads()
    with reads.snapshot():
        return _search(
            reads, query, session_id, around_message_id, window, role_filter, sort, limit, current_session_id, scope
        )


def _search(
    reads: SearchReads,
    query: str | None,
    session_id: str | None,
    around_message_id: int | None,
    window: int,
    role_filter: Sequence[str] | str | None,
    sort: Sort,
    limit: int,
    current_session_id: str | None,
    scope: SessionFilter,
) -> SearchResult:
    span = _clamp(window, 1, MAX_WINDOW, DEFAULT_WINDOW)
    count = _clamp(limit, 1, MAX_LIMIT, DEFAULT_LIMIT)
    if session_id is not None:
        shape: Shape = "read" if around_message_id is None else "scroll"
        if query is not None and query.strip():
            return SearchResult(
                shape=shape,
                query=query,
                error="query and session_id do not go together: drop session_id to search every session, "
                "or drop query to read that session",
            )
        found = open_session(reads, session_id, scope)
        if isinstance(found, str):
            return SearchResult(shape=shape, error=found)
        ref, info = found
        if around_message_id is None:
            return _read(reads, ref, info)
        return _scroll(reads, ref, info, around_message_id, span)
    if around_message_id is not None:
        return SearchResult(
            shape="scroll", error="around_message_id needs session_id: pass the session_id of the hit it came from"
        )
    if sort not in _SORTS:
        shape = "browse" if query is None else "discovery"
        return SearchResult(shape=shape, query=query, error=f"sort must be one of {', '.join(_SORTS)}, not {sort!r}")
    if query is None or not query.strip():
        return _browse(reads, count, sort, current_session_id, scope)
    roles = _roles(role_filter)
    if isinstance(roles, str):
        return SearchResult(shape="discovery", query=query, error=roles)
    parsed = parse(reads, query)
    if isinstance(parsed, SearchResult):
        return parsed
    return discover(reads, query, parsed, roles, sort, count, span, current_session_id, scope)


def _clamp(value: object, low: int, high: int, default: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        return default
    return max(low, min(high, value))


def _roles(role_filter: Sequence[str] | str | None) -> tuple[str, ...] | str:
    """The roles to search (user and assistant unless given), or an error text naming an unknown role.

    A string is a comma-separated list (``"user,assistant,tool"``), as the reference system's tool takes it.
    """
    if isinstance(role_filter, str):
        chosen = [role.strip() for role in role_filter.split(",") if role.strip()]
    else:
        chosen = list(role_filter or ())
    if not chosen:
        return _DEFAULT_ROLES
    known = [r.value for r in Role]
    unknown = [r for r in chosen if r not in known]
    if unknown:
        return f"role_filter has {unknown[0]!r}; roles are {', '.join(known)}"
    return tuple(dict.fromkeys(chosen))


def _read(reads: SearchReads, ref: int, info: SessionInfo) -> SearchResult:
    total = reads.count_messages(ref)
    if total <= READ_ALL_UP_TO:
        return SearchResult(shape="read", session=info, messages=first_messages(reads, ref, total), omitted=0)
    return SearchResult(
        shape="read",
        session=info,
        messages=first_messages(reads, ref, READ_HEAD) + last_messages(reads, ref, READ_TAIL),
        omitted=total - READ_HEAD - READ_TAIL,
    )


def _scroll(reads: SearchReads, ref: int, info: SessionInfo, anchor: object, span: int) -> SearchResult:
    if isinstance(anchor, bool) or not isinstance(anchor, int):
        return SearchResult(shape="scroll", session=info, error=f"around_message_id must be an integer, not {anchor!r}")
    owner = reads.message_session(anchor) if abs(anchor) < 2**63 else None
    if owner != ref:
        return SearchResult(
            shape="scroll",
            session=info,
            error=f"message {anchor} is not in session {info.session_id}; "
            "pass a message id from that session (a hit's match_message_id or one of its messages)",
        )
    window, before, after = messages_around(reads, ref, anchor, span)
    return SearchResult(shape="scroll", session=info, messages=window, messages_before=before, messages_after=after)


def _browse(reads: SearchReads, count: int, sort: Sort, current: str | None, scope: SessionFilter) -> SearchResult:
    """Lineage tips, most recently active first (``oldest``: least recently), the caller's lineage skipped."""
    lineages = Lineages(reads)
    skip = lineages.members(lineages.root_of_session(current)) if current is not None else set()
    sessions = []
    for row in reads.lineage_tips(count, oldest_first=sort == "oldest", skip=skip, scope=scope):
        preview = reads.first_user_text(row[0])
        sessions.append(session_info(row, cut(preview, PREVIEW_CHARS)[0] if preview is not None else None)[1])
    return SearchResult(shape="browse", sessions=sessions)
