"""The APSW store's :class:`~hermes_actors.store.search_reads.SearchReads`: every query session_search runs.

Each read is one statement, LIMITed on ``messages (session_ref, id)`` or on ``sessions``, its text a constant
wherever the arguments allow (APSW's statement cache then keeps it prepared). Full-text pages walk
``messages_fts`` (or the trigram index ``messages_fts_cjk``) in rowid order with a keyset bound and stop at their
LIMIT; sessions to skip (the caller's lineage, lineages already reported) are excluded inside that statement
(``NOT IN (SELECT value FROM json_each(?))``), so a long session full of matches is skipped by the index, not
row by row by the caller.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence
from typing import Any, cast

import apsw
import msgspec

from hermes_actors.errors import HermesError
from hermes_actors.store.connection import Transaction
from hermes_actors.store.lineage import root_on
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
from hermes_actors.store.search_reads import (
    Candidate,
    IndexRefusedError,
    MessageRow,
    RankFunction,
    RankT,
    SessionRow,
)
from hermes_actors.store.sqlite_db import SqliteDb
from hermes_actors.store.tokenizer import TOKENIZER_NAME

__all__ = ["RANK_FUNCTION", "StoreSearchReads"]

RANK_FUNCTION = "hermes_rank"  # the SQL name of the rank function: ``hermes_rank(messages_fts)``

_SESSION = "ref, id, source, started_at, last_active_at, title, ended_at, end_reason, message_count, parent_session_id"
_MESSAGE = "SELECT id, role, content, created_at, tool_name FROM messages WHERE session_ref = ?"
_CONVERSATION = "role IN ('user', 'assistant') AND content IS NOT NULL"
_FIRST = f"{_MESSAGE} ORDER BY id LIMIT ?"
_LAST = f"{_MESSAGE} ORDER BY id DESC LIMIT ?"
_BEFORE = f"{_MESSAGE} AND id < ? ORDER BY id DESC LIMIT ?"
_FROM = f"{_MESSAGE} AND id >= ? ORDER BY id LIMIT ?"
_HEAD = f"{_MESSAGE} AND id < ? AND {_CONVERSATION} ORDER BY id LIMIT ?"
_TAIL = f"{_MESSAGE} AND id > ? AND {_CONVERSATION} ORDER BY id DESC LIMIT ?"
_SESSION_BY_ID = f"SELECT {_SESSION} FROM sessions WHERE id = ?"
_SESSION_BY_REF = f"SELECT {_SESSION} FROM sessions WHERE ref = ?"
_COUNT = "SELECT count(*) FROM messages WHERE session_ref = ?"
_COUNT_BEFORE = f"{_COUNT} AND id < ?"
_COUNT_AFTER = f"{_COUNT} AND id > ?"
_FIRST_USER_TEXT = (
    "SELECT content FROM messages WHERE session_ref = ? AND role = 'user' AND content IS NOT NULL ORDER BY id LIMIT 1"
)
_NEWEST_MATCHES = "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT ?"
_NO_BOUND = {False: 2**63 - 1, True: -(2**63)}  # the first keyset bound, newest first or oldest first

# Every session whose lineage root is :root: down through every session that ended by compression. UNION (not
# UNION ALL) stops at rows already seen, so a corrupt parent cycle ends.
_MEMBERS = f"""
WITH RECURSIVE down(id, ref) AS (
    SELECT id, ref FROM sessions WHERE id = :root
    UNION
    SELECT c.id, c.ref FROM down
    JOIN sessions AS p ON p.id = down.id AND p.end_reason = '{EndReason.COMPRESSION.value}'
    JOIN sessions AS c ON c.parent_session_id = p.id
)
SELECT ref FROM down LIMIT 100000"""

_rank_functions: weakref.WeakKeyDictionary[apsw.Connection, RankFunction] = weakref.WeakKeyDictionary()


def _json_list(values: set[int]) -> str:
    """``values`` as a JSON array, sorted, for ``json_each``."""
    return "[" + ",".join(str(v) for v in sorted(values)) + "]"


class StoreSearchReads:
    """:class:`~hermes_actors.store.search_reads.SearchReads` on the SQLite store's connection (see the protocol);
    ``resolution`` finds the session a user named."""

    def __init__(self, sql: SqliteDb, resolution: SessionResolution) -> None:
        self._sql = sql
        self._db = sql.connection
        self._resolution = resolution
        self._tokenizer: apsw.FTS5Tokenizer | None = None

    def snapshot(self) -> Transaction:
        return Transaction(self._db)

    # -- the query and its words ------------------------------------------------------------------------------

    def parse_query(self, text: str, *, echo_chars: int | None = None) -> SearchQuery | FtsResult:
        return parse_search_query(text, self.tokenize, echo_chars=echo_chars)

    def tokenize(self, text: str) -> list[Token]:
        tokenizer = self._tokenizer
        if tokenizer is None:
            tokenizer = self._tokenizer = self._db.fts5_tokenizer(TOKENIZER_NAME, [])
        found = cast(list[tuple[Any, ...]], tokenizer(text.encode("utf-8"), apsw.FTS5_TOKENIZE_DOCUMENT, None))
        return [(int(token[0]), int(token[1]), str(token[2])) for token in found]

    # -- sessions ---------------------------------------------------------------------------------------------

    def session(self, session_id: str, scope: SessionFilter) -> SessionRow | None:
        condition, values = scope.sql()
        return cast(
            SessionRow | None, self._db.execute(f"{_SESSION_BY_ID} AND {condition}", (session_id, *values)).fetchone()
        )

    def resolve_session(self, reference: str, scope: SessionFilter) -> SessionRow:
        resolved = self._resolution.resolve_session(reference, visible=scope)
        return cast(SessionRow, self._db.execute(_SESSION_BY_ID, (resolved.id,)).fetchall()[0])

    def session_by_ref(self, ref: int) -> SessionRow:
        return cast(SessionRow, self._db.execute(_SESSION_BY_REF, (ref,)).fetchall()[0])

    def lineage_tips(self, count: int, *, oldest_first: bool, skip: set[int], scope: SessionFilter) -> list[SessionRow]:
        direction = "ASC" if oldest_first else "DESC"
        condition, values = scope.sql("s")
        sql = (
            f"SELECT {', '.join('s.' + c.strip() for c in _SESSION.split(','))} FROM sessions AS s "
            "WHERE NOT (s.end_reason = ? "
            "AND EXISTS (SELECT 1 FROM sessions AS c WHERE c.parent_session_id = s.id)) "
            f"AND s.ref NOT IN (SELECT value FROM json_each(?)) AND {condition} "
            f"ORDER BY s.last_active_at {direction}, s.id {direction} LIMIT ?"
        )
        params = [EndReason.COMPRESSION.value, _json_list(skip), *values, count]
        return cast(list[SessionRow], self._db.execute(sql, params).fetchall())

    def titled_sessions(self, query: SearchQuery, *, oldest_first: bool, scope: SessionFilter) -> Iterator[SessionRow]:
        params: list[Any] = []
        where = _title_filter(query.root, params)
        condition, values = scope.sql()
        params.extend(values)
        direction = "ASC" if oldest_first else "DESC"
        sql = (
            f"SELECT {_SESSION} FROM sessions WHERE title IS NOT NULL AND {where} AND {condition} "
            f"ORDER BY last_active_at {direction}, id {direction}"
        )
        yield from cast(Iterator[SessionRow], self._db.execute(sql, params))

    # -- lineages ---------------------------------------------------------------------------------------------

    def lineage_root(self, session_id: str) -> str | None:
        try:
            return root_on(self._sql, session_id)
        except HermesError:
            return None

    def lineage_root_of_ref(self, ref: int) -> str:
        return root_on(self._sql, str(self._db.execute("SELECT id FROM sessions WHERE ref = ?", (ref,)).get))

    def lineage_members(self, root: str) -> set[int]:
        return {int(ref) for (ref,) in self._db.execute(_MEMBERS, {"root": root})}

    # -- messages of one session ------------------------------------------------------------------------------

    def _messages(self, sql: str, params: tuple[int, ...]) -> list[MessageRow]:
        return cast(list[MessageRow], self._db.execute(sql, params).fetchall())

    def first_messages(self, ref: int, count: int) -> list[MessageRow]:
        return self._messages(_FIRST, (ref, count))

    def last_messages(self, ref: int, count: int) -> list[MessageRow]:
        return self._messages(_LAST, (ref, count))[::-1]

    def messages_before(self, ref: int, message_id: int, count: int) -> list[MessageRow]:
        return self._messages(_BEFORE, (ref, message_id, count))[::-1]

    def messages_from(self, ref: int, message_id: int, count: int) -> list[MessageRow]:
        return self._messages(_FROM, (ref, message_id, count))

    def conversation_head(self, ref: int, before_id: int, count: int) -> list[MessageRow]:
        return self._messages(_HEAD, (ref, before_id, count))

    def conversation_tail(self, ref: int, after_id: int, count: int) -> list[MessageRow]:
        return self._messages(_TAIL, (ref, after_id, count))[::-1]

    def count_messages(self, ref: int) -> int:
        return int(self._db.execute(_COUNT, (ref,)).get or 0)

    def count_before(self, ref: int, message_id: int) -> int:
        return int(self._db.execute(_COUNT_BEFORE, (ref, message_id)).get or 0)

    def count_after(self, ref: int, message_id: int) -> int:
        return int(self._db.execute(_COUNT_AFTER, (ref, message_id)).get or 0)

    def first_user_text(self, ref: int) -> str | None:
        found = self._db.execute(_FIRST_USER_TEXT, (ref,)).get
        return None if found is None else str(found)

    # -- single messages --------------------------------------------------------------------------------------

    def message_session(self, message_id: int) -> int | None:
        found = self._db.execute("SELECT session_ref FROM messages WHERE id = ?", (message_id,)).get
        return None if found is None else int(cast(int, found))

    def message_content(self, message_id: int) -> str | None:
        found = self._db.execute("SELECT content FROM messages WHERE id = ?", (message_id,)).get
        return None if found is None else str(found)

    # -- the full-text index ----------------------------------------------------------------------------------

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
        sql, params = _match_sql(query, roles, scope, ranked=ranked, oldest_first=oldest_first)
        bound = _NO_BOUND[oldest_first] if beyond is None else beyond
        try:
            rows = self._db.execute(sql, [*params, _json_list(excluded), bound, size]).fetchall()
        except apsw.Error as exc:
            raise IndexRefusedError(exc) from exc
        return cast(list[Candidate], rows)

    def phrase_sample(self, match: str, sample: int) -> tuple[int, int]:
        try:
            newest = self._db.execute(_NEWEST_MATCHES, (match, sample)).fetchall()
        except apsw.Error as exc:
            raise IndexRefusedError(exc) from exc
        return len(newest), int(cast(int, newest[-1][0])) if newest else 0

    def newest_message_id(self) -> int | None:
        found = self._db.execute("SELECT max(id) FROM messages").get
        return None if found is None else int(cast(int, found))

    def rank_function(self, kind: type[RankT]) -> RankT:
        found = _rank_functions.get(self._db)
        if not isinstance(found, kind):
            found = kind()
            self._db.register_fts5_function(RANK_FUNCTION, found)
            _rank_functions[self._db] = found
        return found


def _match_sql(
    query: SearchQuery, roles: Sequence[str], scope: SessionFilter, *, ranked: bool, oldest_first: bool
) -> tuple[str, list[Any]]:
    """One keyset page of matching messages: (message id, score or NULL, session ref), in rowid order; the
    parameters still to add are the excluded refs, the bound and the page size."""
    if query.substrings is None:
        table, rank = "messages_fts", f"{RANK_FUNCTION}(messages_fts)" if ranked else "NULL"
        match, params = "messages_fts MATCH ?", [query.text]
    else:
        table, rank = "messages_fts_cjk", "NULL"
        match = " AND ".join("messages_fts_cjk.content LIKE ?" for _ in query.substrings)
        params = [f"%{s}%" for s in query.substrings]
    condition, values = scope.sql("s")
    scoped = condition != "TRUE"
    join = " JOIN sessions AS s ON s.ref = m.session_ref" if scoped else ""
    source = f" AND {condition}" if scoped else ""
    keyset = f" AND {table}.rowid {'>' if oldest_first else '<'} ?"
    sql = (
        f"SELECT {table}.rowid, {rank}, m.session_ref FROM {table} JOIN messages AS m ON m.id = {table}.rowid"
        f"{join} WHERE {match} AND m.role IN (SELECT value FROM json_each(?)){source}"
        f" AND m.session_ref NOT IN (SELECT value FROM json_each(?)){keyset}"
        f" ORDER BY {table}.rowid {'ASC' if oldest_first else 'DESC'} LIMIT ?"
    )
    params.append(msgspec.json.encode(list(roles)).decode())
    if scoped:
        params.extend(values)
    return sql, params


def _title_filter(node: Query, params: list[Any]) -> str:
    """A LIKE expression on ``title`` every title matching ``node`` satisfies (a superset; NOT sides are
    ignored); appends its parameters to ``params``. LIKE folds ASCII case only."""
    match node:
        case Phrase(terms=()):
            return "0"
        case Phrase(terms=terms):
            params.extend("%" + t.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%" for t, _ in terms)
            return "(" + " AND ".join("title LIKE ? ESCAPE '\\'" for _ in terms) + ")"
        case And(queries=children):
            return "(" + " AND ".join(_title_filter(child, params) for child in children) + ")"
        case Or(queries=children):
            return "(" + " OR ".join(_title_filter(child, params) for child in children) + ")"
        case Not(match=positive):
            return _title_filter(positive, params)
        case Near(phrases=phrases):
            return "(" + " AND ".join(_title_filter(p, params) for p in phrases) + ")"
        case ColumnFilter(include=include, query=inner):
            return _title_filter(inner, params) if include else "0"
