"""Sessions and their messages as search results, by LIMITed queries on ``messages (session_ref, id)``.

Every shape shows messages the same way (a window around one, the first or last few, the bookends outside a
window), and none may load a whole session to do it: a session can hold hundreds of thousands of messages. Each
function here reads only the rows it returns, plus a count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import apsw

from hermes_actors.errors import HermesError
from hermes_actors.search.shapes import SearchMessage, SessionInfo
from hermes_actors.store import SessionFilter, Store

__all__ = [
    "BOOKEND",
    "BOOKEND_CHARS",
    "INFO_COLUMNS",
    "bookends",
    "count_messages",
    "cut",
    "first_messages",
    "last_messages",
    "messages_around",
    "open_session",
    "session_info",
]

BOOKEND = 3
BOOKEND_CHARS = 200

INFO_COLUMNS = (
    "ref, id, source, started_at, last_active_at, title, ended_at, end_reason, message_count, parent_session_id"
)
_MESSAGE_COLUMNS = "id, role, content, created_at, tool_name"


def session_info(row: Sequence[Any], preview: str | None = None) -> tuple[int, SessionInfo]:
    """The session ref and :class:`SessionInfo` of a row of :data:`INFO_COLUMNS`."""
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


def open_session(store: Store, session_id: str, scope: SessionFilter | None = None) -> tuple[int, SessionInfo] | str:
    """The session by exact id, else by unique id prefix or title; an error text naming it when none matches.

    A session outside ``scope`` is not there: it gets the same error text as an id nothing has.
    """
    db = store._connection
    condition, values = (scope or SessionFilter()).sql()
    row = db.execute(
        f"SELECT {INFO_COLUMNS} FROM sessions WHERE id = ? AND {condition}", (session_id, *values)
    ).fetchone()
    if row is None and session_id.strip() and "\x00" not in session_id:
        try:
            resolved = store.resolve_session(session_id, visible=scope)
        except HermesError as exc:
            return str(exc)
        row = db.execute(f"SELECT {INFO_COLUMNS} FROM sessions WHERE id = ?", (resolved.id,)).fetchone()
    if row is None:
        return f"no session has id {session_id[:100]!r}; take an id from a search hit or 'hermesctl sessions list'"
    return session_info(row)


def cut(text: str | None, chars: int | None) -> tuple[str | None, bool]:
    """``text`` cut to ``chars`` characters (the last one "…"), and whether it was cut."""
    if text is None or chars is None or len(text) <= chars:
        return text, False
    return text[: chars - 1] + "…", True


def _messages(
    db: apsw.Connection, sql: str, params: Sequence[Any], *, anchor: int | None = None, chars: int | None = None
) -> list[SearchMessage]:
    out: list[SearchMessage] = []
    for mid, role, content, created, tool in db.execute(sql, params):
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


def first_messages(db: apsw.Connection, ref: int, count: int, chars: int | None = None) -> list[SearchMessage]:
    """The first ``count`` messages of session ``ref``, each cut to ``chars`` characters."""
    sql = f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE session_ref = ? ORDER BY id LIMIT ?"
    return _messages(db, sql, (ref, count), chars=chars)


def last_messages(db: apsw.Connection, ref: int, count: int) -> list[SearchMessage]:
    """The last ``count`` messages of session ``ref``, oldest first."""
    sql = f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE session_ref = ? ORDER BY id DESC LIMIT ?"
    return _messages(db, sql, (ref, count))[::-1]


def messages_around(
    db: apsw.Connection, ref: int, anchor: int, span: int, chars: int | None = None
) -> tuple[list[SearchMessage], int, int]:
    """The messages within ``span`` of ``anchor`` in session ``ref``, and the counts before and after them."""
    before = _messages(
        db,
        f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE session_ref = ? AND id < ? ORDER BY id DESC LIMIT ?",
        (ref, anchor, span),
        chars=chars,
    )[::-1]
    after = _messages(
        db,
        f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE session_ref = ? AND id >= ? ORDER BY id LIMIT ?",
        (ref, anchor, span + 1),
        anchor=anchor,
        chars=chars,
    )
    window = before + after
    return window, count_messages(db, ref, "<", window[0].id), count_messages(db, ref, ">", window[-1].id)


def count_messages(db: apsw.Connection, ref: int, op: Literal["<", ">"], message_id: int) -> int:
    """How many messages of session ``ref`` come before (``<``) or after (``>``) ``message_id``."""
    sql = f"SELECT count(*) FROM messages WHERE session_ref = ? AND id {op} ?"
    return int(db.execute(sql, (ref, message_id)).get or 0)


def bookends(
    db: apsw.Connection, ref: int, window: Sequence[SearchMessage]
) -> tuple[list[SearchMessage], list[SearchMessage]]:
    """The first and last BOOKEND user/assistant messages with text before and after ``window``."""
    if not window:
        return [], []
    kept = "role IN ('user', 'assistant') AND content IS NOT NULL"
    start = _messages(
        db,
        f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE session_ref = ? AND id < ? AND {kept} ORDER BY id LIMIT ?",
        (ref, window[0].id, BOOKEND),
        chars=BOOKEND_CHARS,
    )
    end = _messages(
        db,
        f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE session_ref = ? AND id > ? AND {kept} ORDER BY id DESC LIMIT ?",
        (ref, window[-1].id, BOOKEND),
        chars=BOOKEND_CHARS,
    )
    return start, end[::-1]
