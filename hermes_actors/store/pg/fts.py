"""``fts_query`` on PostgreSQL: the same refusals, filters, orders and envelope as :mod:`hermes_actors.store.fts`.

A query is checked and parsed exactly as on SQLite (:func:`~hermes_actors.store.fts.check_text`,
:func:`~hermes_actors.store.search_query.parse_search_query`), so a malformed query gets the same error and
suggestion. It runs as :func:`~hermes_actors.store.pg.match.condition`. ``index`` says which route answered in the
SQLite store's words: ``"trigram"`` for an AND of CJK phrases of three or more characters (here the bigram
index with a substring recheck), ``"words"`` otherwise. Relevance is PostgreSQL's ``ts_rank`` over the query's
words and CJK lexemes (``rank`` is its negation: lower is better, as FTS5's); snippets are cut here, 16 tokens
around the first match with ``>>>``/``<<<`` marks, as FTS5's ``snippet()`` shows them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hermes_actors.store.fts import SNIPPET_TOKENS, Order, check_text, refuse
from hermes_actors.store.pg.db import Database
from hermes_actors.store.pg.match import condition, phrase_locations, phrases
from hermes_actors.store.pg.text import cjk_lexemes, from_db, is_cjk, quote_lexeme, tokenize
from hermes_actors.store.records import FtsHit, FtsResult
from hermes_actors.store.search_query import (
    And,
    ColumnFilter,
    Near,
    Not,
    Or,
    Phrase,
    Query,
    SearchQuery,
    parse_search_query,
)
from hermes_actors.store.search_reads import IndexRefusedError

__all__ = ["query_messages", "snippet"]

_ORDERS = ("relevance", "newest", "oldest")


def query_messages(
    db: Database,
    query: str,
    *,
    limit: int = 20,
    roles: Sequence[str] | None = None,
    session_id: str | None = None,
    order: Order = "relevance",
) -> FtsResult:
    """Run ``query`` over the messages; never raises for what a user typed."""
    refused = check_text(query, None)
    if refused is not None:
        return refused
    if order not in _ORDERS:
        return refuse(query, f"sort must be one of {', '.join(_ORDERS)}, not {order!r}", suggest=False)
    parsed = parse_search_query(query, tokenize)
    if isinstance(parsed, FtsResult):
        return parsed
    params: list[Any] = []
    try:
        where = condition(parsed.root, params)
    except IndexRefusedError as exc:
        return exc.refusal(query)
    if roles:
        where += " AND m.role = ANY(%s)"
        params.append(list(roles))
    if session_id is not None:
        where += " AND s.id = %s"
        params.append(session_id)
    index = "words" if parsed.substrings is None else "trigram"
    rank_params: list[Any] = []
    rank_sql = _rank_sql(parsed, rank_params) if index == "words" else "0.0"
    ordering = {"relevance": "rank, m.id DESC", "newest": "m.id DESC", "oldest": "m.id"}[order]
    if index == "trigram" and order == "relevance":
        ordering = "m.id DESC"
    params.append(max(1, min(int(limit), 1000)))
    rows = db.execute(
        f"SELECT m.id, s.id, m.role, m.created_at, m.content, {rank_sql} AS rank FROM messages AS m "
        f"JOIN sessions AS s ON s.ref = m.session_ref WHERE {where} ORDER BY {ordering} LIMIT %s",
        [*rank_params, *params],
    )
    wanted = phrases(parsed.root)
    hits = [
        FtsHit(
            message_id=int(mid),
            session_id=str(sid),
            role=str(role),
            created_at=float(at),
            snippet=snippet(from_db(content) or "", wanted),
            rank=float(rank),
        )
        for mid, sid, role, at, content, rank in rows
    ]
    return FtsResult(query=query, hits=hits, index=index)


def _positive(node: Query) -> list[Phrase]:
    """The phrases a matching row can contain (those under a NOT's right side are left out)."""
    match node:
        case Phrase():
            return [node]
        case Not(match=matched):
            return _positive(matched)
        case And(queries=children) | Or(queries=children):
            return [p for child in children for p in _positive(child)]
        case Near(phrases=near):
            return list(near)
        case ColumnFilter(include=include, query=inner):
            return _positive(inner) if include else []


def _rank_sql(parsed: SearchQuery, params: list[Any]) -> str:
    """``-(ts_rank(words, any word) + ts_rank(cjk, any CJK lexeme))``: lower is better, as FTS5's rank."""
    words: set[str] = set()
    cjk: set[str] = set()
    for phrase in _positive(parsed.root):
        run = ""
        for token, prefix in phrase.terms:
            if is_cjk(token):
                run += token
                continue
            if run:
                cjk.update(cjk_lexemes(run))
                run = ""
            words.add(quote_lexeme(token) + (":*" if prefix else ""))
        if run:
            cjk.update(cjk_lexemes(run))
    parts = []
    if words:
        parts.append("ts_rank(m.words, %s::tsquery)")
        params.append(" | ".join(sorted(words)))
    if cjk:
        parts.append("ts_rank(m.cjk, %s::tsquery)")
        params.append(" | ".join(quote_lexeme(c) for c in sorted(cjk)))
    return "-(" + " + ".join(parts) + ")::double precision" if parts else "0.0"


def snippet(content: str, wanted: Sequence[Phrase], tokens_shown: int = SNIPPET_TOKENS) -> str:
    """``content`` cut to ``tokens_shown`` tokens around the first match of ``wanted``, matches marked."""
    found = tokenize(content)
    words = [token for _, _, token in found]
    marked: set[int] = set()
    for phrase in wanted:
        for start in phrase_locations(phrase, words):
            marked.update(range(start, start + len(phrase.terms)))
    if not found:
        return content
    first = min(marked) if marked else 0
    last = max((m for m in marked if m < first + tokens_shown), default=first)
    # The matches of the first window centred in it, as FTS5's snippet() places them.
    centred = first - (tokens_shown - (last - first + 1)) // 2
    begin = 0 if len(found) <= tokens_shown else max(0, min(centred, len(found) - tokens_shown))
    end = min(len(found), begin + tokens_shown)
    utf8 = content.encode("utf-8")
    cut_from = 0 if begin == 0 else found[begin][0]
    cut_to = len(utf8) if end == len(found) else found[end - 1][1]
    pieces: list[bytes] = [b"\xe2\x80\xa6"] if begin > 0 else []
    at = cut_from
    index = begin
    while index < end:
        if index not in marked:
            index += 1
            continue
        last = index
        while last + 1 < end and last + 1 in marked:
            last += 1
        pieces += [utf8[at : found[index][0]], b">>>", utf8[found[index][0] : found[last][1]], b"<<<"]
        at = found[last][1]
        index = last + 1
    pieces.append(utf8[at:cut_to])
    if end < len(found):
        pieces.append(b"\xe2\x80\xa6")
    return b"".join(pieces).decode("utf-8", errors="replace")
