"""Full-text queries over messages that never raise for what a user types.

A query is FTS5 syntax (``docker deployment``, ``"exact phrase"``, ``python NOT java``, ``deploy*``). It is
checked before it reaches SQLite: empty, over-long, NUL-bearing or unparsable queries come back as an
:class:`FtsResult` whose ``error`` says what is wrong and whose ``suggestion`` is the same words quoted so they
are searched literally. Queries made only of CJK phrases of three or more characters go to the trigram index
(``messages_fts_cjk``) as substring matches; everything else, including one- and two-character CJK queries, goes
to ``messages_fts`` (see :mod:`hermes_actors.store.tokenizer`).

:func:`check_query`, :func:`cjk_substrings` and the ``refuse*`` envelopes are public so that
:func:`hermes_actors.search.session_search` refuses the same queries with the same words and routes the same
queries to the trigram index as :func:`query_messages` does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

import apsw
import apsw.fts5query

from hermes_actors.store.records import FtsHit, FtsResult
from hermes_actors.store.tokenizer import CJK_CHARACTER

__all__ = [
    "MAX_QUERY_LENGTH",
    "Order",
    "check_query",
    "check_text",
    "cjk_substrings",
    "query_messages",
    "quote_words",
    "refuse",
    "refuse_index_error",
]

MAX_QUERY_LENGTH = 1000
SNIPPET_TOKENS = 16

Order = Literal["relevance", "newest", "oldest"]

_ONLY_CJK = re.compile(f"(?:{CJK_CHARACTER.pattern})+")
# Ordering by the FTS table's own rowid lets FTS5 walk its doclists in order and stop at the LIMIT; ordering by
# m.id would sort every match (and build every snippet) first.
_ORDER_BY = {"relevance": "rank", "newest": "messages_fts.rowid DESC", "oldest": "messages_fts.rowid"}


def quote_words(query: str) -> str:
    """Return ``query`` with each white-space separated word quoted as an FTS5 string (a literal search)."""
    return " ".join('"' + word.replace('"', '""') + '"' for word in query.split())


def refuse(query: str, error: str, *, suggest: bool = True) -> FtsResult:
    """The envelope of a query that did not run: ``error``, and with ``suggest`` its words quoted to search."""
    suggestion = quote_words(query.replace("\x00", "")) if suggest else None
    return FtsResult(query=query, error=error, suggestion=suggestion or None)


def refuse_index_error(query: str, exc: apsw.Error) -> FtsResult:
    """The envelope of a query the parser lets through but FTS5 refuses (an unknown column filter, say)."""
    message = str(exc).removeprefix("SQLError: ").removeprefix("fts5: ")
    return refuse(query, f"the search index refused the query ({message}); quote words to search them literally")


def check_query(query: str, *, echo_chars: int | None = None) -> apsw.fts5query.QUERY | FtsResult:
    """``query`` parsed, or the envelope refusing it: it holds a NUL, is over :data:`MAX_QUERY_LENGTH`
    characters, is blank, or is not FTS5 syntax.

    An over-long query is echoed in its envelope cut to ``echo_chars`` characters and "…" (whole when ``None``).
    """
    refused = check_text(query, echo_chars)
    return refused if refused is not None else _parse(query)


def check_text(query: str, echo_chars: int | None) -> FtsResult | None:
    """The envelope refusing ``query`` for its text alone (a NUL, over-long, blank), or ``None``."""
    if "\x00" in query:
        return refuse(query, "the query contains a NUL character; remove it")
    if len(query) > MAX_QUERY_LENGTH:
        return refuse(
            query if echo_chars is None else query[:echo_chars] + "…",
            f"the query is {len(query)} characters long; the limit is {MAX_QUERY_LENGTH}, so use fewer words",
            suggest=False,
        )
    if not query.strip():
        return refuse(query, "the query is empty; give at least one word", suggest=False)
    return None


def _parse(query: str) -> apsw.fts5query.QUERY | FtsResult:
    try:
        return apsw.fts5query.parse_query_string(query)
    except apsw.fts5query.ParseError as exc:
        return refuse(
            query,
            f"the query is not valid search syntax: {exc.message.lower()} at character {exc.position + 1}; "
            "quote words to search them literally",
        )


def cjk_substrings(parsed: apsw.fts5query.QUERY) -> list[str] | None:
    """Return the substrings when ``parsed`` is an AND of plain CJK phrases of 3+ characters, else ``None``.

    Those queries go to the trigram index as substring matches; every other query goes to the word index.
    """
    parts = parsed.queries if isinstance(parsed, apsw.fts5query.AND) else [parsed]
    substrings: list[str] = []
    for part in parts:
        if not isinstance(part, apsw.fts5query.PHRASE):
            return None
        if part.prefix or part.plus is not None or part.initial:
            return None
        if not isinstance(part.phrase, str) or len(part.phrase) < 3 or not _ONLY_CJK.fullmatch(part.phrase):
            return None
        substrings.append(part.phrase)
    return substrings


def _filters(roles: Sequence[str] | None, session_id: str | None) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    if roles:
        clauses.append(f"m.role IN ({', '.join('?' * len(roles))})")
        params.extend(roles)
    if session_id is not None:
        clauses.append("s.id = ?")
        params.append(session_id)
    return "".join(f" AND {c}" for c in clauses), params


def _mark(content: str, needles: list[str]) -> str:
    """Build a snippet around the first needle for the trigram path, which has no FTS5 snippet()."""
    first = min((content.find(n), n) for n in needles if n in content) if content else (-1, "")
    at, needle = first
    if at < 0:
        return content[:80]
    start = max(0, at - 24)
    end = min(len(content), at + len(needle) + 24)
    lead = "…" if start > 0 else ""
    tail = "…" if end < len(content) else ""
    return f"{lead}{content[start:at]}>>>{needle}<<<{content[at + len(needle) : end]}{tail}"


def query_messages(
    db: apsw.Connection,
    query: str,
    *,
    limit: int = 20,
    roles: Sequence[str] | None = None,
    session_id: str | None = None,
    order: Order = "relevance",
) -> FtsResult:
    """Run ``query`` against the message indexes; see the module docstring. Never raises for bad queries."""
    # The order is checked between the text and the syntax: a bad order outranks a syntax error, not a NUL.
    refused = check_text(query, None)
    if refused is not None:
        return refused
    if order not in _ORDER_BY:
        return refuse(query, f"sort must be one of {', '.join(_ORDER_BY)}, not {order!r}", suggest=False)
    parsed = _parse(query)
    if isinstance(parsed, FtsResult):
        return parsed
    where, params = _filters(roles, session_id)
    limit = max(1, min(int(limit), 1000))
    substrings = cjk_substrings(parsed)
    try:
        if substrings is not None:
            return _query_trigram(db, query, substrings, where, params, limit, order)
        return _query_words(db, query, where, params, limit, order)
    except apsw.Error as exc:
        return refuse_index_error(query, exc)


def _query_words(db: apsw.Connection, query: str, where: str, params: list[Any], limit: int, order: Order) -> FtsResult:
    sql = (
        "SELECT m.id, s.id, m.role, m.created_at, "
        f"snippet(messages_fts, 0, '>>>', '<<<', '…', {SNIPPET_TOKENS}), rank "
        "FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid JOIN sessions s ON s.ref = m.session_ref "
        f"WHERE messages_fts MATCH ?{where} ORDER BY {_ORDER_BY[order]} LIMIT ?"
    )
    hits = [
        FtsHit(message_id=mid, session_id=sid, role=role, created_at=at, snippet=snip, rank=rank)
        for mid, sid, role, at, snip, rank in db.execute(sql, [query, *params, limit])
    ]
    return FtsResult(query=query, hits=hits, index="words")


def _query_trigram(
    db: apsw.Connection,
    query: str,
    substrings: list[str],
    where: str,
    params: list[Any],
    limit: int,
    order: Order,
) -> FtsResult:
    likes = " AND ".join("f.content LIKE ?" for _ in substrings)
    direction = "f.rowid" if order == "oldest" else "f.rowid DESC"
    sql = (
        "SELECT m.id, s.id, m.role, m.created_at, m.content "
        "FROM messages_fts_cjk f JOIN messages m ON m.id = f.rowid JOIN sessions s ON s.ref = m.session_ref "
        f"WHERE {likes}{where} ORDER BY {direction} LIMIT ?"
    )
    rows = db.execute(sql, [*(f"%{s}%" for s in substrings), *params, limit])
    hits = [
        FtsHit(
            message_id=mid,
            session_id=sid,
            role=role,
            created_at=at,
            snippet=_mark(content or "", substrings),
            rank=0.0,
        )
        for mid, sid, role, at, content in rows
    ]
    return FtsResult(query=query, hits=hits, index="trigram")
