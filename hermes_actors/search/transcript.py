"""Sessions and their messages as search results, from bounded reads of one session's messages.

Every shape shows messages the same way (a window around one, the first or last few, the bookends outside a
window), and none may load a whole session to do it: a session can hold hundreds of thousands of messages. Each
function here reads only the rows it returns, plus a count (see :class:`~hermes_actors.store.search_reads.
SearchReads`).
"""

from __future__ import annotations

from collections.abc import Sequence

from hermes_actors.errors import HermesError
from hermes_actors.search.shapes import SearchMessage, SessionInfo
from hermes_actors.store import SessionFilter
from hermes_actors.store.search_reads import MessageRow, SearchReads, SessionRow

__all__ = [
    "BOOKEND",
    "BOOKEND_CHARS",
    "bookends",
    "cut",
    "first_messages",
    "last_messages",
    "messages_around",
    "open_session",
    "session_info",
]

BOOKEND = 3
BOOKEND_CHARS = 200


def session_info(row: SessionRow, preview: str | None = None) -> tuple[int, SessionInfo]:
    """The session ref and :class:`SessionInfo` of a session row."""
    ref, sid, source, started, active, title, ended, reason, count, parent = row
    return int(ref), SessionInfo(
        session_id=sid,
        source=source,
        started_at=started,
        last_active_at=active,
        title=title,
        ended_at=ended,
        end_reason=reason,
        message_count=count,
        parent_session_id=parent,
        preview=preview,
    )


def open_session(
    reads: SearchReads, session_id: str, scope: SessionFilter | None = None
) -> tuple[int, SessionInfo] | str:
    """The session by exact id, else by unique id prefix or title; an error text naming it when none matches.

    A session outside ``scope`` is not there: it gets the same error text as an id nothing has.
    """
    visible = scope or SessionFilter()
    row = reads.session(session_id, visible)
    if row is None and session_id.strip() and "\x00" not in session_id:
        try:
            row = reads.resolve_session(session_id, visible)
        except HermesError as exc:
            return str(exc)
    if row is None:
        return f"no session has id {session_id[:100]!r}; take an id from a search hit or 'hermesctl sessions list'"
    return session_info(row)


def cut(text: str | None, chars: int | None) -> tuple[str | None, bool]:
    """``text`` cut to ``chars`` characters (the last one "…"), and whether it was cut."""
    if text is None or chars is None or len(text) <= chars:
        return text, False
    return text[: chars - 1] + "…", True


def _messages(
    rows: Sequence[MessageRow], *, anchor: int | None = None, chars: int | None = None
) -> list[SearchMessage]:
    out: list[SearchMessage] = []
    for mid, role, content, created, tool in rows:
        text, was_cut = cut(content, chars)
        out.append(
            SearchMessage(
                id=mid,
                role=role,
                content=text,
                created_at=created,
                tool_name=tool,
                anchor=mid == anchor,
                truncated=was_cut,
            )
        )
    return out


def first_messages(reads: SearchReads, ref: int, count: int, chars: int | None = None) -> list[SearchMessage]:
    """The first ``count`` messages of session ``ref``, each cut to ``chars`` characters."""
    return _messages(reads.first_messages(ref, count), chars=chars)


def last_messages(reads: SearchReads, ref: int, count: int) -> list[SearchMessage]:
    """The last ``count`` messages of session ``ref``, oldest first."""
    return _messages(reads.last_messages(ref, count))


def messages_around(
    reads: SearchReads, ref: int, anchor: int, span: int, chars: int | None = None
) -> tuple[list[SearchMessage], int, int]:
    """The messages within ``span`` of ``anchor`` in session ``ref``, and the counts before and after them."""
    before = _messages(reads.messages_before(ref, anchor, span), chars=chars)
    after = _messages(reads.messages_from(ref, anchor, span + 1), anchor=anchor, chars=chars)
    window = before + after
    return window, reads.count_before(ref, window[0].id), reads.count_after(ref, window[-1].id)


def bookends(
    reads: SearchReads, ref: int, window: Sequence[SearchMessage]
) -> tuple[list[SearchMessage], list[SearchMessage]]:
    """The first and last BOOKEND user/assistant messages with text before and after ``window``."""
    if not window:
        return [], []
    start = _messages(reads.conversation_head(ref, window[0].id, BOOKEND), chars=BOOKEND_CHARS)
    end = _messages(reads.conversation_tail(ref, window[-1].id, BOOKEND), chars=BOOKEND_CHARS)
    return start, end
