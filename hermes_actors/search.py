"""session_search: recall over the store, in the shape the arguments ask for.

- **scroll** (``session_id`` and ``around_message_id``): the messages within ``window`` (1..20, default 5) of one
  message, the anchor flagged, with counts of the messages before and after;
- **read** (``session_id`` alone): the whole session, or its first 20 and last 10 messages when it is longer than
  30, with the number left out between them;
- **browse** (no query): the most recently active conversations (lineage tips), newest first;
- **discovery** (``query``, FTS5 syntax): sessions whose title matches, then sessions whose user and assistant
  messages match (``role_filter`` changes which roles), at most ``limit`` (1..10, default 3) hits, one per
  lineage, never the caller's own lineage. Each hit carries the match's snippet, the ``window`` around it, the
  first and last three user/assistant messages outside that window (``bookend_start``/``bookend_end``) and how
  many messages lie before and after the window.

A lineage is a compression chain: the sessions whose :func:`~hermes_actors.store.lineage.lineage_root` is the same.
Discovery reports each lineage once, by its first hit in the requested order (for ``newest`` that is its newest
matching message, for ``relevance`` its best one), and skips the whole lineage of ``current_session_id``.

Discovery never loads a session: hits are found by keyset pages over the FTS index (the caller's lineage, and
each lineage already reported, excluded in SQL), and each hit is built from LIMITed queries on
``messages (session_ref, id)``. ``relevance`` ranks the newest :data:`RELEVANCE_WINDOW` matching messages (all
of them when fewer match; otherwise the result's ``note`` says so) by BM25 with FTS5's constants, computed here
from per-row term counts: FTS5's own ``bm25()`` counts every document holding each query term, so each common
word in a query ("the", "error") cost tens of milliseconds on a million messages. Here a phrase's document
frequency is counted among its newest :data:`DF_SAMPLE` matches and, past that, extrapolated from how far back
they reach; ``newest``/``oldest`` walk the index in order. CJK queries of three or more characters use the
trigram index, which has no rank: there ``relevance`` means ``newest``.

Titles are matched with the same tokenizer as messages (case and diacritics folded, prefix*, phrases, AND/OR/NOT;
NEAR counts as AND within a title). The SQL pre-filter that keeps this fast compares with LIKE, which folds ASCII
case only, so a title spelled with accents matches only a query spelled with them.

Nothing here raises for what a caller typed: a malformed query, an unknown session or message, a bad sort or
role comes back as a :class:`SearchResult` whose ``error`` names the problem and the fix (with a ``suggestion``
for a query), and out-of-range numbers are clamped.
"""

from __future__ import annotations

import math
import re
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, Literal, cast

import apsw
import apsw.fts5query as fq
import msgspec

from hermes_actors.errors import HermesError
from hermes_actors.store import Role, Store
from hermes_actors.store.fts import MAX_QUERY_LENGTH, SNIPPET_TOKENS, quote_words
from hermes_actors.store.lineage import lineage_root
from hermes_actors.store.records import EndReason
from hermes_actors.store.tokenizer import CJK_CHARACTER, TOKENIZER_NAME

__all__ = [
    "DEFAULT_LIMIT",
    "DEFAULT_WINDOW",
    "RELEVANCE_WINDOW",
    "SearchHit",
    "SearchMessage",
    "SearchResult",
    "SessionInfo",
    "Shape",
    "Sort",
    "session_search",
]

DEFAULT_WINDOW = 5
MAX_WINDOW = 20
DEFAULT_LIMIT = 3
MAX_LIMIT = 10
RELEVANCE_WINDOW = 1000  # relevance ranks among at most this many of the newest matching messages
DF_SAMPLE = 500  # a phrase's document frequency is counted up to this many matches, then extrapolated
BM25_K1 = 1.2  # FTS5's bm25() constants
BM25_B = 0.75
READ_ALL_UP_TO = 30  # a longer session is read as its first READ_HEAD and last READ_TAIL messages
READ_HEAD = 20
READ_TAIL = 10
BOOKEND = 3
WINDOW_CHARS = 300  # discovery cuts window messages to this many characters (scroll and read never cut)
BOOKEND_CHARS = 200
PREVIEW_CHARS = 160

Shape = Literal["scroll", "read", "browse", "discovery"]
Sort = Literal["relevance", "newest", "oldest"]

_SORTS = ("relevance", "newest", "oldest")
_DEFAULT_ROLES = (Role.USER.value, Role.ASSISTANT.value)
_FIRST_PAGE = 100  # newest/oldest: the first keyset page; later pages grow fourfold up to RELEVANCE_WINDOW
_MAX_PAGES = MAX_LIMIT + 2  # every page after the first yields a new lineage, so this bound is never the limit
_ONLY_CJK = re.compile(f"(?:{CJK_CHARACTER.pattern})+")
_RANK = "hermes_rank"


class _Ranker:
    """An FTS5 auxiliary function scoring a row by BM25 (higher is better), one per connection.

    :meth:`prepare` sets each query phrase's document frequency before a query runs (``None``: weight 1, for a
    query with one phrase, where weights cannot change the order; ``0``: a phrase only a NOT refers to). The
    index size and average length come from FTS5 on the first row.
    """

    def __init__(self) -> None:
        self._frequencies: list[float | None] = []
        self._weights: list[float] | None = None
        self._average = 1.0

    def prepare(self, frequencies: list[float | None]) -> None:
        self._frequencies = frequencies
        self._weights = None

    def __call__(self, api: apsw.FTS5ExtensionApi, *args: apsw.SQLiteValue) -> float:
        weights = self._weights
        if weights is None:
            documents = max(1, api.row_count)
            self._average = max(1.0, api.column_total_size(0) / documents)
            weights = self._weights = [_idf(df, documents) for df in self._frequencies[: api.phrase_count]]
        norm = BM25_K1 * (1 - BM25_B + BM25_B * api.column_size(0) / self._average)
        score = 0.0
        for phrase, weight in enumerate(weights):
            if weight:
                hits = len(api.phrase_locations(phrase)[0])
                if hits:
                    score += weight * hits * (BM25_K1 + 1) / (hits + norm)
        return score


def _idf(df: float | None, documents: int) -> float:
    if df is None:
        return 1.0
    if df == 0:
        return 0.0
    return max(1e-6, math.log((documents - min(df, documents) + 0.5) / (min(df, documents) + 0.5)))


_rankers: weakref.WeakKeyDictionary[apsw.Connection, _Ranker] = weakref.WeakKeyDictionary()


def _ranker_on(db: apsw.Connection) -> _Ranker:
    """The :class:`_Ranker` registered on ``db`` (once: readers are pooled and reused)."""
    ranker = _rankers.get(db)
    if ranker is None:
        ranker = _rankers[db] = _Ranker()
        db.register_fts5_function(_RANK, ranker)
    return ranker


class SearchMessage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One message in a window, a bookend or a read; ``anchor`` marks the message a scroll or hit is about."""

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


class SearchHit(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One lineage found by discovery, reported in one of its sessions.

    ``matched`` is ``"title"`` (``window`` is then the session's first messages and ``message_id`` is ``None``)
    or ``"message"``; ``snippet`` marks the match with ``>>>``/``<<<``. ``bookend_start``/``bookend_end`` are the
    first and last three user/assistant messages outside ``window``; ``messages_before``/``messages_after`` count
    every message before and after it.
    """

    session_id: str
    source: str
    started_at: float
    last_active_at: float
    matched: Literal["title", "message"]
    snippet: str
    title: str | None = None
    lineage_root: str | None = None  # set when the session continues an earlier one
    message_id: int | None = None
    role: str | None = None
    window: list[SearchMessage] = msgspec.field(default_factory=list)
    bookend_start: list[SearchMessage] = msgspec.field(default_factory=list)
    bookend_end: list[SearchMessage] = msgspec.field(default_factory=list)
    messages_before: int = 0
    messages_after: int = 0


class SearchResult(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The answer of :func:`session_search`; fields at their default are left out of the JSON.

    ``error`` (with a ``suggestion`` for a malformed query) means nothing was searched. ``note`` says how an
    answer was bounded (a relevance window, a clamp).
    """

    shape: Shape
    query: str | None = None
    session: SessionInfo | None = None  # scroll, read
    messages: list[SearchMessage] = msgspec.field(default_factory=list)  # scroll, read
    omitted: int = 0  # read: messages left out between the first 20 and the last 10
    messages_before: int = 0  # scroll
    messages_after: int = 0  # scroll
    sessions: list[SessionInfo] = msgspec.field(default_factory=list)  # browse
    hits: list[SearchHit] = msgspec.field(default_factory=list)  # discovery
    note: str | None = None
    error: str | None = None
    suggestion: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the search ran (it may still have found nothing)."""
        return self.error is None


def _clamp(value: object, low: int, high: int, default: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        return default
    return max(low, min(high, value))


def session_search(
    store: Store,
    *,
    query: str | None = None,
    session_id: str | None = None,
    around_message_id: int | None = None,
    window: int = DEFAULT_WINDOW,
    role_filter: Sequence[str] | None = None,
    sort: Sort = "relevance",
    limit: int = DEFAULT_LIMIT,
    current_session_id: str | None = None,
    source: str | None = None,
) -> SearchResult:
    """Search the store; the shape follows from the arguments (see the module docstring). Never raises for input.

    Runs in one read transaction, so every query of a search sees the same snapshot of the store.
    """
    with store.transaction():
        return _search(
            store, query, session_id, around_message_id, window, role_filter, sort, limit, current_session_id, source
        )


def _search(
    store: Store,
    query: str | None,
    session_id: str | None,
    around_message_id: int | None,
    window: int,
    role_filter: Sequence[str] | None,
    sort: Sort,
    limit: int,
    current_session_id: str | None,
    source: str | None,
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
        found = _open_session(store, session_id)
        if isinstance(found, str):
            return SearchResult(shape=shape, error=found)
        ref, info = found
        if around_message_id is None:
            return _read(store.connection, ref, info)
        return _scroll(store.connection, ref, info, around_message_id, span)
    if around_message_id is not None:
        return SearchResult(
            shape="scroll", error="around_message_id needs session_id: pass the session_id of the hit it came from"
        )
    if sort not in _SORTS:
        shape = "browse" if query is None else "discovery"
        return SearchResult(shape=shape, query=query, error=f"sort must be one of {', '.join(_SORTS)}, not {sort!r}")
    if query is None or not query.strip():
        return _browse(store, count, sort, current_session_id, source)
    roles = _roles(role_filter)
    if isinstance(roles, str):
        return SearchResult(shape="discovery", query=query, error=roles)
    parsed = _parse(query)
    if isinstance(parsed, SearchResult):
        return parsed
    return _Discovery(store, query, parsed, roles, sort, count, span, current_session_id, source).run()


# -- sessions and messages -----------------------------------------------------------------------------------

_INFO_COLUMNS = (
    "ref, id, source, started_at, last_active_at, title, ended_at, end_reason, message_count, parent_session_id"
)
_MESSAGE_COLUMNS = "id, role, content, created_at, tool_name"


def _info(row: Sequence[Any], preview: str | None = None) -> tuple[int, SessionInfo]:
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


def _open_session(store: Store, session_id: str) -> tuple[int, SessionInfo] | str:
    """The session by exact id, else by unique id prefix or title; an error text naming it when none matches."""
    db = store.connection
    row = db.execute(f"SELECT {_INFO_COLUMNS} FROM sessions WHERE id = ?", (session_id,)).fetchone()
    if row is None and session_id.strip() and "\x00" not in session_id:
        try:
            resolved = store.resolve_session(session_id)
        except HermesError as exc:
            return str(exc)
        row = db.execute(f"SELECT {_INFO_COLUMNS} FROM sessions WHERE id = ?", (resolved.id,)).fetchone()
    if row is None:
        return f"no session has id {session_id[:100]!r}; take an id from a search hit or 'hermesctl sessions list'"
    return _info(row)


def _cut(text: str | None, chars: int | None) -> tuple[str | None, bool]:
    if text is None or chars is None or len(text) <= chars:
        return text, False
    return text[: chars - 1] + "…", True


def _messages(
    db: apsw.Connection, sql: str, params: Sequence[Any], *, anchor: int | None = None, chars: int | None = None
) -> list[SearchMessage]:
    out: list[SearchMessage] = []
    for mid, role, content, created, tool in db.execute(sql, params):
        text, cut = _cut(content, chars)
        out.append(
            SearchMessage(
                id=mid, role=role, content=text, created_at=created, tool_name=tool, anchor=mid == anchor, truncated=cut
            )
        )
    return out


def _first(db: apsw.Connection, ref: int, count: int, chars: int | None = None) -> list[SearchMessage]:
    sql = f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE session_ref = ? ORDER BY id LIMIT ?"
    return _messages(db, sql, (ref, count), chars=chars)


def _last(db: apsw.Connection, ref: int, count: int) -> list[SearchMessage]:
    sql = f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE session_ref = ? ORDER BY id DESC LIMIT ?"
    return _messages(db, sql, (ref, count))[::-1]


def _around(
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
    return window, _count(db, ref, "<", window[0].id), _count(db, ref, ">", window[-1].id)


def _count(db: apsw.Connection, ref: int, op: Literal["<", ">"], message_id: int) -> int:
    sql = f"SELECT count(*) FROM messages WHERE session_ref = ? AND id {op} ?"
    return int(db.execute(sql, (ref, message_id)).get or 0)


def _bookends(
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


def _read(db: apsw.Connection, ref: int, info: SessionInfo) -> SearchResult:
    total = int(db.execute("SELECT count(*) FROM messages WHERE session_ref = ?", (ref,)).get or 0)
    if total <= READ_ALL_UP_TO:
        return SearchResult(shape="read", session=info, messages=_first(db, ref, total))
    return SearchResult(
        shape="read",
        session=info,
        messages=_first(db, ref, READ_HEAD) + _last(db, ref, READ_TAIL),
        omitted=total - READ_HEAD - READ_TAIL,
    )


def _scroll(db: apsw.Connection, ref: int, info: SessionInfo, anchor: object, span: int) -> SearchResult:
    if isinstance(anchor, bool) or not isinstance(anchor, int):
        return SearchResult(shape="scroll", session=info, error=f"around_message_id must be an integer, not {anchor!r}")
    owner = db.execute("SELECT session_ref FROM messages WHERE id = ?", (anchor,)).get if abs(anchor) < 2**63 else None
    if owner != ref:
        return SearchResult(
            shape="scroll",
            session=info,
            error=f"message {anchor} is not in session {info.session_id}; "
            "pass a message id from that session (a hit's message_id or window)",
        )
    window, before, after = _around(db, ref, anchor, span)
    return SearchResult(shape="scroll", session=info, messages=window, messages_before=before, messages_after=after)


# -- browse ----------------------------------------------------------------------------------------------------


def _browse(store: Store, count: int, sort: Sort, current: str | None, source: str | None) -> SearchResult:
    """Lineage tips, most recently active first (``oldest``: least recently), the caller's lineage skipped."""
    db = store.connection
    lineages = _Lineages(store)
    skip = lineages.members(lineages.root_of_session(current)) if current is not None else set()
    direction = "ASC" if sort == "oldest" else "DESC"
    where = "" if source is None else "AND s.source = :source "
    sql = (
        f"SELECT {', '.join('s.' + c.strip() for c in _INFO_COLUMNS.split(','))} FROM sessions AS s "
        "WHERE NOT (s.end_reason = :compressed "
        "AND EXISTS (SELECT 1 FROM sessions AS c WHERE c.parent_session_id = s.id)) "
        f"AND s.ref NOT IN (SELECT value FROM json_each(:skip)) {where}"
        f"ORDER BY s.last_active_at {direction}, s.id {direction} LIMIT :count"
    )
    params = {"compressed": EndReason.COMPRESSION.value, "skip": _json_list(skip), "source": source, "count": count}
    sessions = []
    for row in db.execute(sql, params).fetchall():
        preview = db.execute(
            "SELECT content FROM messages WHERE session_ref = ? AND role = 'user' AND content IS NOT NULL "
            "ORDER BY id LIMIT 1",
            (row[0],),
        ).get
        sessions.append(_info(row, _cut(str(preview), PREVIEW_CHARS)[0] if preview is not None else None)[1])
    return SearchResult(shape="browse", sessions=sessions)


def _json_list(values: set[int]) -> str:
    return "[" + ",".join(str(v) for v in sorted(values)) + "]"


# -- lineages --------------------------------------------------------------------------------------------------

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


class _Lineages:
    """Lineage roots and members, cached for one search."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._roots: dict[int, str] = {}

    def root(self, ref: int) -> str:
        found = self._roots.get(ref)
        if found is None:
            sid = str(self._store.connection.execute("SELECT id FROM sessions WHERE ref = ?", (ref,)).get)
            found = self._roots[ref] = lineage_root(self._store, sid)
        return found

    def members(self, root: str) -> set[int]:
        return {int(ref) for (ref,) in self._store.connection.execute(_MEMBERS, {"root": root})}

    def root_of_session(self, session_id: str) -> str:
        """The root of ``session_id``'s lineage; the id itself when it is not stored (yet)."""
        try:
            return lineage_root(self._store, session_id)
        except HermesError:
            return session_id


# -- discovery -------------------------------------------------------------------------------------------------


def _roles(role_filter: Sequence[str] | None) -> tuple[str, ...] | str:
    """The roles to search (user and assistant unless given), or an error text naming an unknown role."""
    chosen = [role_filter] if isinstance(role_filter, str) else list(role_filter or ())
    if not chosen:
        return _DEFAULT_ROLES
    known = [r.value for r in Role]
    unknown = [r for r in chosen if r not in known]
    if unknown:
        return f"role_filter has {unknown[0]!r}; roles are {', '.join(known)}"
    return tuple(dict.fromkeys(chosen))


def _refuse(query: str, error: str, *, suggest: bool = True) -> SearchResult:
    suggestion = quote_words(query.replace("\x00", "")) if suggest else ""
    return SearchResult(shape="discovery", query=query, error=error, suggestion=suggestion or None)


def _parse(query: str) -> fq.QUERY | SearchResult:
    """The parsed query, or the error envelope; the same checks and words as ``hermes_actors.store.fts``."""
    if "\x00" in query:
        return _refuse(query, "the query contains a NUL character; remove it")
    if len(query) > MAX_QUERY_LENGTH:
        return _refuse(
            query[:100] + "…",
            f"the query is {len(query)} characters long; the limit is {MAX_QUERY_LENGTH}, so use fewer words",
            suggest=False,
        )
    try:
        parsed = fq.parse_query_string(query)
    except fq.ParseError as exc:
        return _refuse(
            query,
            f"the query is not valid search syntax: {exc.message.lower()} at character {exc.position + 1}; "
            "quote words to search them literally",
        )
    for node in _walk(parsed):
        if isinstance(node, fq.COLUMNFILTER) and any(c != "content" for c in node.columns):
            column = next(c for c in node.columns if c != "content")
            return _refuse(
                query,
                f"the query filters on column {column!r}, but messages have only 'content'; "
                "quote words that contain ':' to search them literally",
            )
    return parsed


def _walk(node: fq.QUERY) -> Iterator[fq.QUERY]:
    yield node
    if isinstance(node, fq.AND | fq.OR):
        for child in node.queries:
            yield from _walk(child)
    elif isinstance(node, fq.NOT):
        yield from _walk(node.match)
        yield from _walk(node.no_match)
    elif isinstance(node, fq.NEAR):
        yield from node.phrases
    elif isinstance(node, fq.COLUMNFILTER):
        yield from _walk(node.query)


def _phrases(node: fq.QUERY, positive: bool = True) -> list[tuple[fq.PHRASE, bool]]:
    """The query's phrases in the order FTS5 numbers them, each with whether a match can contain it."""
    if isinstance(node, fq.PHRASE):
        return [(node, positive)]
    if isinstance(node, fq.AND | fq.OR):
        return [pair for child in node.queries for pair in _phrases(child, positive)]
    if isinstance(node, fq.NOT):
        return _phrases(node.match, positive) + _phrases(node.no_match, False)
    if isinstance(node, fq.NEAR):
        return [(phrase, positive) for phrase in node.phrases]
    return _phrases(node.query, positive and node.filter == "include")


def _trigram_substrings(parsed: fq.QUERY) -> list[str] | None:
    """The substrings when ``parsed`` is an AND of plain CJK phrases of 3+ characters (the trigram index's case)."""
    parts = parsed.queries if isinstance(parsed, fq.AND) else [parsed]
    out: list[str] = []
    for part in parts:
        if not isinstance(part, fq.PHRASE) or part.prefix or part.plus is not None or part.initial:
            return None
        if not isinstance(part.phrase, str) or len(part.phrase) < 3 or not _ONLY_CJK.fullmatch(part.phrase):
            return None
        out.append(part.phrase)
    return out


_Term = tuple[str, bool]  # (token, prefix)
_Range = tuple[int, int]  # token indexes [start, end) of one phrase match


class _Discovery:
    """One discovery search: title hits, then message hits, one per lineage."""

    def __init__(
        self,
        store: Store,
        query: str,
        parsed: fq.QUERY,
        roles: tuple[str, ...],
        sort: Sort,
        limit: int,
        span: int,
        current: str | None,
        source: str | None,
    ) -> None:
        self.store = store
        self.db = store.connection
        self.query = query
        self.parsed = parsed
        self.roles = roles
        self.sort = sort
        self.limit = limit
        self.span = span
        self.source = source
        self.lineages = _Lineages(store)
        self.taken: set[str] = set()
        self.excluded: set[int] = set()
        if current is not None:
            root = self.lineages.root_of_session(current)
            self.taken.add(root)
            self.excluded = self.lineages.members(root)
        self.hits: list[SearchHit] = []
        self.note: str | None = None
        self._tokenizer = self.db.fts5_tokenizer(TOKENIZER_NAME, [])

    def run(self) -> SearchResult:
        parsed = self.parsed
        if not any(self._phrase_terms(p) for p in _walk(parsed) if isinstance(p, fq.PHRASE)):
            return _refuse(
                self.query,
                "the query has no words to search for (only punctuation or spaces); give at least one word",
                suggest=False,
            )
        try:
            self._title_hits(parsed)
            if len(self.hits) < self.limit:
                self._message_hits(_trigram_substrings(parsed))
        except apsw.Error as exc:
            # What the parser lets through but FTS5 refuses.
            message = str(exc).removeprefix("SQLError: ").removeprefix("fts5: ")
            return _refuse(
                self.query, f"the search index refused the query ({message}); quote words to search them literally"
            )
        return SearchResult(shape="discovery", query=self.query, hits=self.hits, note=self.note)

    def _take(self, ref: int, root: str) -> None:
        self.taken.add(root)
        self.excluded |= self.lineages.members(root)
        self.excluded.add(ref)

    # -- titles ----------------------------------------------------------------------------------------------

    def _tokens(self, text: str) -> list[tuple[int, int, str]]:
        """``(start byte, end byte, token)`` for each token of ``text``, as the messages index sees it."""
        found = cast(list[tuple[Any, ...]], self._tokenizer(text.encode("utf-8"), apsw.FTS5_TOKENIZE_DOCUMENT, None))
        return [(int(token[0]), int(token[1]), str(token[2])) for token in found]

    def _phrase_terms(self, phrase: fq.PHRASE) -> list[_Term]:
        terms: list[_Term] = []
        part: fq.PHRASE | None = phrase
        while part is not None:
            if isinstance(part.phrase, str):
                words = [t for _, _, t in self._tokens(part.phrase)]
            else:
                words = [t if isinstance(t, str) else t[0] for t in part.phrase.tokens]
            terms.extend((w, part.prefix and i == len(words) - 1) for i, w in enumerate(words))
            part = part.plus
        return terms

    def _prefilter(self, node: fq.QUERY, params: list[str]) -> str:
        """A LIKE expression every title matching ``node`` satisfies (a superset; NOT sides are ignored)."""
        if isinstance(node, fq.PHRASE):
            terms = self._phrase_terms(node)
            if not terms:
                return "0"
            params.extend("%" + t.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%" for t, _ in terms)
            return "(" + " AND ".join("title LIKE ? ESCAPE '\\'" for _ in terms) + ")"
        if isinstance(node, fq.AND | fq.OR):
            glue = " AND " if isinstance(node, fq.AND) else " OR "
            return "(" + glue.join(self._prefilter(child, params) for child in node.queries) + ")"
        if isinstance(node, fq.NOT):
            return self._prefilter(node.match, params)
        if isinstance(node, fq.NEAR):
            return "(" + " AND ".join(self._prefilter(p, params) for p in node.phrases) + ")"
        return self._prefilter(node.query, params) if node.filter == "include" else "0"  # COLUMNFILTER

    def _matches(self, node: fq.QUERY, words: list[str], marks: set[_Range]) -> bool:
        """Whether ``words`` (a token list) matches ``node``; adds the token ranges of positive matches to ``marks``."""
        if isinstance(node, fq.PHRASE):
            return self._phrase_at(self._phrase_terms(node), node.initial, words, marks)
        if isinstance(node, fq.AND | fq.OR | fq.NEAR):
            # Every child is tried, not just up to the first decisive one, so that all matches get marked.
            children = node.phrases if isinstance(node, fq.NEAR) else node.queries
            results = [self._matches(child, words, marks) for child in children]
            return any(results) if isinstance(node, fq.OR) else all(results)
        if isinstance(node, fq.NOT):
            return self._matches(node.match, words, marks) and not self._matches(node.no_match, words, set())
        return node.filter == "include" and self._matches(node.query, words, marks)  # COLUMNFILTER

    @staticmethod
    def _phrase_at(terms: list[_Term], initial: bool, words: list[str], marks: set[_Range]) -> bool:
        if not terms:
            return False
        found = False
        starts = [0] if initial else range(len(words) - len(terms) + 1)
        for start in starts:
            if start + len(terms) <= len(words) and all(
                words[start + k].startswith(t) if prefix else words[start + k] == t
                for k, (t, prefix) in enumerate(terms)
            ):
                marks.add((start, start + len(terms)))
                found = True
        return found

    def _title_hits(self, parsed: fq.QUERY) -> None:
        params: list[Any] = []
        where = self._prefilter(parsed, params)
        if self.source is not None:
            where += " AND source = ?"
            params.append(self.source)
        direction = "ASC" if self.sort == "oldest" else "DESC"
        sql = (
            f"SELECT {_INFO_COLUMNS} FROM sessions WHERE title IS NOT NULL AND {where} "
            f"ORDER BY last_active_at {direction}, id {direction}"
        )
        for row in self.db.execute(sql, params):
            ref, info = _info(row)
            if ref in self.excluded:
                continue
            title = info.title or ""
            spans = self._tokens(title)
            marks: set[_Range] = set()
            if not self._matches(parsed, [t for _, _, t in spans], marks):
                continue
            root = self.lineages.root(ref)
            if root in self.taken:
                continue
            self._take(ref, root)
            self.hits.append(self._title_hit(ref, info, root, _highlight(title, spans, marks, 0, len(spans))))
            if len(self.hits) == self.limit:
                return

    def _title_hit(self, ref: int, info: SessionInfo, root: str, snippet: str) -> SearchHit:
        window = _first(self.db, ref, 2 * self.span + 1, chars=WINDOW_CHARS)
        _, end = _bookends(self.db, ref, window)
        return SearchHit(
            session_id=info.session_id,
            source=info.source,
            started_at=info.started_at,
            last_active_at=info.last_active_at,
            matched="title",
            snippet=snippet,
            title=info.title,
            lineage_root=None if root == info.session_id else root,
            window=window,
            bookend_end=end,
            messages_after=_count(self.db, ref, ">", window[-1].id) if window else 0,
        )

    # -- messages --------------------------------------------------------------------------------------------

    def _candidate_sql(self, substrings: list[str] | None) -> tuple[str, list[Any]]:
        """SQL for one keyset page of matching messages: (message id, score or NULL, session ref), in rowid order."""
        descending = self.sort != "oldest"
        if substrings is None:
            table, rank = "messages_fts", f"{_RANK}(messages_fts)" if self.sort == "relevance" else "NULL"
            match, params = "messages_fts MATCH ?", [self.query]
        else:
            table, rank = "messages_fts_cjk", "NULL"
            match, params = (
                " AND ".join("messages_fts_cjk.content LIKE ?" for _ in substrings),
                [f"%{s}%" for s in substrings],
            )
        join = " JOIN sessions AS s ON s.ref = m.session_ref" if self.source is not None else ""
        source = " AND s.source = ?" if self.source is not None else ""
        keyset = f" AND {table}.rowid {'<' if descending else '>'} ?"
        sql = (
            f"SELECT {table}.rowid, {rank}, m.session_ref FROM {table} JOIN messages AS m ON m.id = {table}.rowid"
            f"{join} WHERE {match} AND m.role IN (SELECT value FROM json_each(?)){source}"
            f" AND m.session_ref NOT IN (SELECT value FROM json_each(?)){keyset}"
            f" ORDER BY {table}.rowid {'DESC' if descending else 'ASC'} LIMIT ?"
        )
        params.append(msgspec.json.encode(list(self.roles)).decode())
        if self.source is not None:
            params.append(self.source)
        return sql, params

    def _message_hits(self, substrings: list[str] | None) -> None:
        sql, params = self._candidate_sql(substrings)
        ranked = self.sort == "relevance" and substrings is None
        if ranked:
            _ranker_on(self.db).prepare(self._frequencies())
        page = RELEVANCE_WINDOW if ranked else _FIRST_PAGE
        bound = 2**63 - 1 if self.sort != "oldest" else -(2**63)
        for number in range(_MAX_PAGES):
            rows = self.db.execute(sql, [*params, _json_list(self.excluded), bound, page]).fetchall()
            order: Sequence[int] = range(len(rows))
            if ranked:
                order = sorted(order, key=lambda i: -cast(float, rows[i][1]))
            for index in order:
                mid, ref = int(cast(int, rows[index][0])), int(cast(int, rows[index][2]))
                if ref in self.excluded:
                    continue
                root = self.lineages.root(ref)
                if root in self.taken:
                    self.excluded.add(ref)
                    continue
                self._take(ref, root)
                self.hits.append(self._message_hit(mid, ref, root))
                if len(self.hits) == self.limit:
                    break
            if ranked and number == 0 and len(rows) == page:
                self.note = (
                    f"more than {RELEVANCE_WINDOW} messages matched: relevance ranked the newest {RELEVANCE_WINDOW} "
                    "(older ones only fill up the limit); narrow the query or use sort='oldest' to reach older ones"
                )
            if len(self.hits) == self.limit or len(rows) < page:
                return
            bound = int(cast(int, rows[-1][0]))
            page = min(page * 4, RELEVANCE_WINDOW)

    def _frequencies(self) -> list[float | None]:
        """Per query phrase, in FTS5's order: its estimated document frequency, ``None`` when the query has one
        phrase that can match (its weight cannot change the order), 0 for phrases only a NOT refers to."""
        phrases = _phrases(self.parsed)
        if sum(positive for _, positive in phrases) <= 1:
            return [None if positive else 0.0 for _, positive in phrases]
        return [self._document_frequency(phrase) if positive else 0.0 for phrase, positive in phrases]

    def _document_frequency(self, phrase: fq.PHRASE) -> float:
        """How many messages hold ``phrase``: counted up to DF_SAMPLE, beyond that extrapolated from the id range
        its newest DF_SAMPLE matches span (message ids grow with time, so the density holds on average)."""
        newest = self.db.execute(
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT ?",
            (fq.to_query_string(phrase), DF_SAMPLE),
        ).fetchall()
        if len(newest) < DF_SAMPLE:
            return float(len(newest))
        last = int(cast(int, newest[-1][0]))
        highest = int(cast(int, self.db.execute("SELECT max(id) FROM messages").get or last))
        return DF_SAMPLE * highest / max(1, highest - last + 1)

    def _message_hit(self, mid: int, ref: int, root: str) -> SearchHit:
        _, info = _info(self.db.execute(f"SELECT {_INFO_COLUMNS} FROM sessions WHERE ref = ?", (ref,)).fetchall()[0])
        window, before, after = _around(self.db, ref, mid, self.span, chars=WINDOW_CHARS)
        start, end = _bookends(self.db, ref, window)
        return SearchHit(
            session_id=info.session_id,
            source=info.source,
            started_at=info.started_at,
            last_active_at=info.last_active_at,
            matched="message",
            snippet=self._snippet(self.db.execute("SELECT content FROM messages WHERE id = ?", (mid,)).get),
            title=info.title,
            lineage_root=None if root == info.session_id else root,
            message_id=mid,
            role=next((m.role for m in window if m.anchor), None),
            window=window,
            bookend_start=start,
            bookend_end=end,
            messages_before=before,
            messages_after=after,
        )

    def _snippet(self, content: str | None) -> str:
        """About SNIPPET_TOKENS tokens of ``content`` from just before its first match, matches marked.

        Built here from the message text (as titles are) rather than by FTS5's snippet(), which would run the
        whole query again for each hit: for a broad prefix that is a merge of thousands of doclists each time.
        """
        text = content or ""
        spans = self._tokens(text)
        marks: set[_Range] = set()
        self._matches(self.parsed, [t for _, _, t in spans], marks)
        if not marks:
            return _cut(text, WINDOW_CHARS)[0] or ""
        first = min(start for start, _ in marks)
        low = max(0, min(first - SNIPPET_TOKENS // 4, len(spans) - SNIPPET_TOKENS))
        high = min(len(spans), low + SNIPPET_TOKENS)
        return ("…" if low > 0 else "") + _highlight(text, spans, marks, low, high) + ("…" if high < len(spans) else "")


def _highlight(text: str, spans: list[tuple[int, int, str]], marks: set[_Range], low: int, high: int) -> str:
    """The text of tokens ``low`` to ``high`` with each marked range wrapped in ``>>>``/``<<<``.

    Token offsets are UTF-8 byte offsets; overlapping ranges are merged. A title passes all of its tokens and
    keeps the text around them.
    """
    data = text.encode("utf-8")
    merged: list[list[int]] = []
    for start, end in sorted(marks):
        if merged and start < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    whole = low == 0 and high == len(spans)
    at = 0 if whole else spans[low][0]
    out: list[bytes] = []
    for start, end in merged:
        if start < low or end > high:
            continue
        out += [data[at : spans[start][0]], b">>>", data[spans[start][0] : spans[end - 1][1]], b"<<<"]
        at = spans[end - 1][1]
    out.append(data[at:] if whole else data[at : spans[high - 1][1]])
    return b"".join(out).decode("utf-8", "replace")
