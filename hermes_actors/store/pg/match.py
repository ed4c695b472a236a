"""A parsed search query (:class:`~hermes_actors.store.search_query.SearchQuery`) as a PostgreSQL condition on
``messages``, and where its phrases match in a message's tokens.

How FTS5's syntax maps (see :mod:`hermes_actors.store.pg.text` for the two index columns):

* a phrase of words: ``words @@ 'a' <-> 'b'`` (``deploy*``: ``'deploy':*``), answered by the ``words`` GIN index;
* a phrase with Chinese/Japanese/Korean characters: each run of CJK terms is ``cjk @@`` the AND of its bigrams
  (one character: that character), answered by the ``cjk`` GIN index, and then rechecked as a substring of the
  content (``strpos``); the phrase's other words go to ``words`` as above;
* ``AND``/``OR``/``NOT``: the same operators between those conditions (PostgreSQL combines the bitmap scans);
* ``^phrase``: the phrase, and its first word at position 1 (a recheck on the row's ``words``);
* ``NEAR(a b, N)``: every phrase matches (the distance is not checked: an AND, as titles are evaluated);
* ``content: q``: ``q`` (the index has that one column); ``- content: q`` matches nothing; another column
  name is refused as FTS5 refuses it (:class:`~hermes_actors.store.search_reads.IndexRefusedError`).

Every literal is a query parameter; nothing a user typed is spliced into the SQL text.
"""

from __future__ import annotations

from typing import Any

import apsw

from hermes_actors.store.pg.text import cjk_lexemes, is_cjk, quote_lexeme
from hermes_actors.store.search_query import And, ColumnFilter, Near, Not, Or, Phrase, Query, Term
from hermes_actors.store.search_reads import IndexRefusedError

__all__ = ["CONTENT_COLUMN", "condition", "phrase_locations", "phrases"]

CONTENT_COLUMN = "content"


def condition(node: Query, params: list[Any], alias: str = "m") -> str:
    """A boolean SQL expression over ``messages AS alias`` true for the rows matching ``node``; appends its
    parameters to ``params``. Raises :class:`IndexRefusedError` for a column filter naming another column."""
    match node:
        case Phrase():
            return _phrase(node, params, alias)
        case And(queries=children):
            return "(" + " AND ".join(condition(child, params, alias) for child in children) + ")"
        case Or(queries=children):
            return "(" + " OR ".join(condition(child, params, alias) for child in children) + ")"
        case Not(match=matched, no_match=refused):
            return f"({condition(matched, params, alias)} AND NOT {condition(refused, params, alias)})"
        case Near(phrases=near):
            return "(" + " AND ".join(_phrase(phrase, params, alias) for phrase in near) + ")"
        case ColumnFilter(columns=columns, include=include, query=inner):
            unknown = [c for c in columns if c.lower() != CONTENT_COLUMN]
            if unknown:
                raise IndexRefusedError(apsw.SQLError(f"no such column: {unknown[0]}"))
            return condition(inner, params, alias) if include else "FALSE"


def _words_tsquery(terms: list[Term]) -> str:
    return " <-> ".join(quote_lexeme(token) + (":*" if prefix else "") for token, prefix in terms)


def _phrase(phrase: Phrase, params: list[Any], alias: str) -> str:
    if not phrase.terms:
        return "FALSE"
    parts: list[str] = []
    words: list[Term] = []
    run = ""

    def flush_words() -> None:
        if words:
            parts.append(f"{alias}.words @@ %s::tsquery")
            params.append(_words_tsquery(words))
            words.clear()

    def flush_run() -> None:
        nonlocal run
        if run:
            parts.append(f"{alias}.cjk @@ %s::tsquery AND strpos({alias}.content, %s) > 0")
            params.extend([" & ".join(quote_lexeme(lexeme) for lexeme in cjk_lexemes(run)), run])
            run = ""

    for token, prefix in phrase.terms:
        if is_cjk(token):
            flush_words()
            run += token
        else:
            flush_run()
            words.append((token, prefix))
    flush_words()
    flush_run()
    first, first_prefix = phrase.terms[0]
    if phrase.initial and not is_cjk(first):
        # The first word at position 1: checked on the row's own lexemes once the index has found it.
        test = "starts_with(u.lexeme, %s)" if first_prefix else "u.lexeme = %s"
        parts.append(f"EXISTS (SELECT 1 FROM unnest({alias}.words) AS u WHERE {test} AND 1 = ANY(u.positions))")
        params.append(first)
    elif phrase.initial:
        parts.append(f"starts_with(ltrim({alias}.content), %s)")
        params.append(first)
    return "(" + " AND ".join(parts) + ")"


def phrases(node: Query) -> list[Phrase]:
    """The query's phrases in the order FTS5 numbers them (the order a rank function sees them in)."""
    match node:
        case Phrase():
            return [node]
        case And(queries=children) | Or(queries=children):
            return [p for child in children for p in phrases(child)]
        case Not(match=matched, no_match=refused):
            return phrases(matched) + phrases(refused)
        case Near(phrases=near):
            return list(near)
        case ColumnFilter(query=inner):
            return phrases(inner)


def phrase_locations(phrase: Phrase, tokens: list[str]) -> list[int]:
    """The token offsets in ``tokens`` where ``phrase`` starts a match (``^``: offset 0 only)."""
    terms = phrase.terms
    if not terms:
        return []
    last = len(tokens) - len(terms)
    starts = range((0 if phrase.initial else last) + 1) if last >= 0 else range(0)
    return [
        i
        for i in starts
        if all(
            tokens[i + j] == token or (prefix and tokens[i + j].startswith(token))
            for j, (token, prefix) in enumerate(terms)
        )
    ]
