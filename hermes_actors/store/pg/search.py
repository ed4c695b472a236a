"""The PostgreSQL store's :class:`~hermes_actors.store.search_reads.SearchReads`: every query session_search runs.

The reads of :mod:`hermes_actors.store.search_apsw`, bounded the same way (LIMITed on ``messages (session_ref,
id)`` or on ``sessions``; keyset pages on the message id), inside one ``REPEATABLE READ`` transaction per search
(:meth:`PgSearchReads.snapshot`). Full-text pages are :func:`~hermes_actors.store.pg.match.condition` on the GIN
indexes. A ranked page fetches its rows' content and scores each with the caller's rank function through
:class:`_Row`, which answers FTS5's questions (tokens in the row and in the index, where each phrase matches)
from the same tokens the index was built from. The index totals come from ``search_totals`` (kept by triggers).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, cast

import apsw

from hermes_actors.errors import HermesError
from hermes_actors.store.lineage import root_on
from hermes_actors.store.pg.match import condition, phrase_locations, phrases
from hermes_actors.store.pg.sql_db import PgSqlDb
from hermes_actors.store.pg.text import from_db, tokenize
from hermes_actors.store.records import EndReason, FtsResult, SessionFilter
from hermes_actors.store.resolution import SessionResolution
from hermes_actors.store.search_query import (
    And,
    ColumnFilter,
    Near,
    Not,
    Or,
    Phrase,
    Query,
    SearchQuery,
    Token,
    parse_search_query,
)
from hermes_actors.store.search_reads import Candidate, IndexRefusedError, MessageRow, RankFunction, RankT, SessionRow

__all__ = ["PgSearchReads"]

_SESSION = "ref, id, source, started_at, last_active_at, title, ended_at, end_reason, message_count, parent_session_id"
_MESSAGE = "SELECT id, role, content, created_at, tool_name FROM messages WHERE session_ref = %s"
_CONVERSATION = "role IN ('user', 'assistant') AND content IS NOT NULL"
_MEMBERS = f"""
WITH RECURSIVE down(id, ref) AS (
    SELECT id, ref FROM sessions WHERE id = %s
    UNION
    SELECT c.id, c.ref FROM down
    JOIN sessions AS p ON p.id = down.id AND p.end_reason = '{EndReason.COMPRESSION.value}'
    JOIN sessions AS c ON c.parent_session_id = p.id
)
SELECT ref FROM down LIMIT 100000"""


def _scope(scope: SessionFilter, alias: str = "") -> tuple[str, list[Any]]:
    """``scope`` as a condition in psycopg's placeholders (this module runs on the pool itself)."""
    condition, values = scope.sql(alias)
    return condition.replace("?", "%s"), values


class _Row:
    """One matching row as a rank function sees it (the part of FTS5's extension API that BM25 uses)."""

    __slots__ = ("_locations", "_size", "_total", "phrase_count", "row_count")

    def __init__(self, wanted: list[Phrase], tokens: list[str], row_count: int, total: int) -> None:
        self._locations = [phrase_locations(phrase, tokens) for phrase in wanted]
        self._size = len(tokens)
        self._total = total
        self.phrase_count = len(wanted)
        self.row_count = row_count

    def column_size(self, col: int = -1) -> int:
        return self._size

    def column_total_size(self, col: int = -1) -> int:
        return self._total

    def phrase_locations(self, phrase: int) -> list[list[int]]:
        return [self._locations[phrase]]


def _message_rows(rows: list[tuple[Any, ...]]) -> list[MessageRow]:
    return [(int(i), str(role), from_db(content), float(at), tool) for i, role, content, at, tool in rows]


class PgSearchReads:
    """:class:`~hermes_actors.store.search_reads.SearchReads` on the PostgreSQL store's pool (see the protocol);
    ``resolution`` finds the session a user named."""

    def __init__(self, sql: PgSqlDb, resolution: SessionResolution) -> None:
        self._sql = sql
        self._db = sql.database
        self._resolution = resolution
        self._rank: RankFunction | None = None

    @contextmanager
    def _snapshot(self) -> Iterator[object]:
        if self._db.in_transaction:
            with self._db.transaction():
                yield None
            return
        with self._db.transaction():
            self._db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            yield None

    def snapshot(self) -> AbstractContextManager[object]:
        return self._snapshot()

    def parse_query(self, text: str, *, echo_chars: int | None = None) -> SearchQuery | FtsResult:
        return parse_search_query(text, tokenize, echo_chars=echo_chars)

    def tokenize(self, text: str) -> list[Token]:
        return tokenize(text)

    # -- sessions ---------------------------------------------------------------------------------------------

    def _sessions(self, sql: str, params: Sequence[Any]) -> list[SessionRow]:
        return cast(list[SessionRow], self._db.execute(sql, params))

    def session(self, session_id: str, scope: SessionFilter) -> SessionRow | None:
        where, values = _scope(scope)
        found = self._sessions(f"SELECT {_SESSION} FROM sessions WHERE id = %s AND {where}", (session_id, *values))
        return found[0] if found else None

    def resolve_session(self, reference: str, scope: SessionFilter) -> SessionRow:
        resolved = self._resolution.resolve_session(reference, visible=scope)
        return self._sessions(f"SELECT {_SESSION} FROM sessions WHERE id = %s", (resolved.id,))[0]

    def session_by_ref(self, ref: int) -> SessionRow:
        return self._sessions(f"SELECT {_SESSION} FROM sessions WHERE ref = %s", (ref,))[0]

    def lineage_tips(self, count: int, *, oldest_first: bool, skip: set[int], scope: SessionFilter) -> list[SessionRow]:
        direction = "ASC" if oldest_first else "DESC"
        where, values = _scope(scope, "s")
        columns = ", ".join("s." + c.strip() for c in _SESSION.split(","))
        sql = (
            f"SELECT {columns} FROM sessions AS s WHERE NOT (s.end_reason = %s "
            "AND EXISTS (SELECT 1 FROM sessions AS c WHERE c.parent_session_id = s.id)) "
            f"AND NOT s.ref = ANY(%s) AND {where} ORDER BY s.last_active_at {direction}, s.id {direction} LIMIT %s"
        )
        return self._sessions(sql, [EndReason.COMPRESSION.value, sorted(skip), *values, count])

    def titled_sessions(self, query: SearchQuery, *, oldest_first: bool, scope: SessionFilter) -> Iterator[SessionRow]:
        params: list[Any] = []
        title = _title_filter(query.root, params)
        where, values = _scope(scope)
        direction = "ASC" if oldest_first else "DESC"
        sql = (
            f"SELECT {_SESSION} FROM sessions WHERE title IS NOT NULL AND {title} AND {where} "
            f"ORDER BY last_active_at {direction}, id {direction}"
        )
        yield from self._sessions(sql, [*params, *values])

    # -- lineages ---------------------------------------------------------------------------------------------

    def lineage_root(self, session_id: str) -> str | None:
        try:
            return root_on(self._sql, session_id)
        except HermesError:
            return None

    def lineage_root_of_ref(self, ref: int) -> str:
        return root_on(self._sql, str(self._db.value("SELECT id FROM sessions WHERE ref = %s", (ref,))))

    def lineage_members(self, root: str) -> set[int]:
        return {int(ref) for (ref,) in self._db.execute(_MEMBERS, (root,))}

    # -- messages of one session ------------------------------------------------------------------------------

    def _messages(self, sql: str, params: tuple[int, ...]) -> list[MessageRow]:
        return _message_rows(self._db.execute(sql, params))

    def first_messages(self, ref: int, count: int) -> list[MessageRow]:
        return self._messages(f"{_MESSAGE} ORDER BY id LIMIT %s", (ref, count))

    def last_messages(self, ref: int, count: int) -> list[MessageRow]:
        return self._messages(f"{_MESSAGE} ORDER BY id DESC LIMIT %s", (ref, count))[::-1]

    def messages_before(self, ref: int, message_id: int, count: int) -> list[MessageRow]:
        return self._messages(f"{_MESSAGE} AND id < %s ORDER BY id DESC LIMIT %s", (ref, message_id, count))[::-1]

    def messages_from(self, ref: int, message_id: int, count: int) -> list[MessageRow]:
        return self._messages(f"{_MESSAGE} AND id >= %s ORDER BY id LIMIT %s", (ref, message_id, count))

    def conversation_head(self, ref: int, before_id: int, count: int) -> list[MessageRow]:
        sql = f"{_MESSAGE} AND id < %s AND {_CONVERSATION} ORDER BY id LIMIT %s"
        return self._messages(sql, (ref, before_id, count))

    def conversation_tail(self, ref: int, after_id: int, count: int) -> list[MessageRow]:
        sql = f"{_MESSAGE} AND id > %s AND {_CONVERSATION} ORDER BY id DESC LIMIT %s"
        return self._messages(sql, (ref, after_id, count))[::-1]

    def count_messages(self, ref: int) -> int:
        return int(self._db.value("SELECT count(*) FROM messages WHERE session_ref = %s", (ref,)) or 0)

    def count_before(self, ref: int, message_id: int) -> int:
        sql = "SELECT count(*) FROM messages WHERE session_ref = %s AND id < %s"
        return int(self._db.value(sql, (ref, message_id)) or 0)

    def count_after(self, ref: int, message_id: int) -> int:
        sql = "SELECT count(*) FROM messages WHERE session_ref = %s AND id > %s"
        return int(self._db.value(sql, (ref, message_id)) or 0)

    def first_user_text(self, ref: int) -> str | None:
        found = self._db.value(
            "SELECT content FROM messages WHERE session_ref = %s AND role = 'user' AND content IS NOT NULL "
            "ORDER BY id LIMIT 1",
            (ref,),
        )
        return from_db(found)

    # -- single messages --------------------------------------------------------------------------------------

    def message_session(self, message_id: int) -> int | None:
        found = self._db.value("SELECT session_ref FROM messages WHERE id = %s", (message_id,))
        return None if found is None else int(found)

    def message_content(self, message_id: int) -> str | None:
        return from_db(self._db.value("SELECT content FROM messages WHERE id = %s", (message_id,)))

    # -- the full-text indexes --------------------------------------------------------------------------------

    def match_page(
        self,
        query: SearchQuery,
        *,
        roles: Sequence[str],
        scope: SessionFilter,
        ranked: bool,
        oldest_first: bool,
        excluded: set[int],
        beyond: int | None,
        size: int,
    ) -> list[Candidate]:
        params: list[Any] = []
        match = condition(query.root, params)
        where, values = _scope(scope, "s")
        join = "" if where == "TRUE" else " JOIN sessions AS s ON s.ref = m.session_ref"
        keyset = "" if beyond is None else f" AND m.id {'>' if oldest_first else '<'} %s"
        sql = (
            f"SELECT m.id, m.session_ref{', m.content' if ranked else ''} FROM messages AS m{join} "
            f"WHERE {match} AND m.role = ANY(%s) AND {where} AND NOT m.session_ref = ANY(%s){keyset} "
            f"ORDER BY m.id {'ASC' if oldest_first else 'DESC'} LIMIT %s"
        )
        params += [list(roles), *values, sorted(excluded), *([] if beyond is None else [beyond]), size]
        rows = self._db.execute(sql, params)
        if not ranked:
            return [(int(row[0]), None, int(row[1])) for row in rows]
        rank = self._rank
        if rank is None or not rows:
            return [(int(row[0]), None if rank is None else 0.0, int(row[1])) for row in rows]
        count, total = self._db.execute("SELECT sum(messages), sum(tokens) FROM search_totals")[0]
        wanted = phrases(query.root)
        return [
            (
                int(mid),
                float(rank(_Row(wanted, [t for _, _, t in tokenize(from_db(text) or "")], int(count), int(total)))),
                int(ref),
            )
            for mid, ref, text in rows
        ]

    def phrase_sample(self, match: str, sample: int) -> tuple[int, int]:
        parsed = parse_search_query(match, tokenize)
        if isinstance(parsed, FtsResult):
            raise IndexRefusedError(_refusal(parsed))
        params: list[Any] = []
        where = condition(parsed.root, params)
        sql = f"SELECT m.id FROM messages AS m WHERE {where} ORDER BY m.id DESC LIMIT %s"
        rows = self._db.execute(sql, [*params, sample])
        return len(rows), int(rows[-1][0]) if rows else 0

    def newest_message_id(self) -> int | None:
        found = self._db.value("SELECT max(id) FROM messages")
        return None if found is None else int(found)

    def rank_function(self, kind: type[RankT]) -> RankT:
        found = self._rank
        if not isinstance(found, kind):
            found = kind()
            self._rank = found
        return found


def _refusal(result: FtsResult) -> apsw.Error:
    return apsw.SQLError(result.error or "the query was refused")


def _title_filter(node: Query, params: list[Any]) -> str:
    """An ILIKE expression every title matching ``node`` satisfies (a superset; NOT sides are ignored)."""
    match node:
        case Phrase(terms=()):
            return "FALSE"
        case Phrase(terms=terms):
            params.extend("%" + t.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%" for t, _ in terms)
            return "(" + " AND ".join("title ILIKE %s" for _ in terms) + ")"
        case And(queries=children):
            return "(" + " AND ".join(_title_filter(child, params) for child in children) + ")"
        case Or(queries=children):
            return "(" + " OR ".join(_title_filter(child, params) for child in children) + ")"
        case Not(match=positive):
            return _title_filter(positive, params)
        case Near(phrases=near):
            return "(" + " AND ".join(_title_filter(p, params) for p in near) + ")"
        case ColumnFilter(include=include, query=inner):
            return _title_filter(inner, params) if include else "FALSE"
