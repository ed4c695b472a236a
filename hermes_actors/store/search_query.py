"""A discovery query as plain data: FTS5 syntax parsed once, each phrase already cut into index tokens.

:func:`hermes_actors.search.session_search` evaluates a query itself (over titles, and over the text of each hit
to mark its snippet) as well as sending it to the index. :func:`parse_search_query` turns what a user typed
into a :class:`SearchQuery`, a tree of frozen Structs that needs no parser to walk: the same checks and the same
words as :func:`hermes_actors.store.fts.check_query` (so discovery refuses what ``fts_query`` refuses), then
each phrase's text tokenized as the messages index tokenizes a document. The tree keeps FTS5's order of phrases
(the order its auxiliary functions number them in) and each phrase's own FTS5 text, so a phrase can be counted
in the index on its own.
"""

from __future__ import annotations

from collections.abc import Callable

import apsw.fts5query as fq
import msgspec

from hermes_actors.store.fts import check_query, cjk_substrings
from hermes_actors.store.records import FtsResult

__all__ = [
    "And",
    "ColumnFilter",
    "Near",
    "Not",
    "Or",
    "Phrase",
    "Query",
    "SearchQuery",
    "Term",
    "Token",
    "Tokenize",
    "parse_search_query",
]

Token = tuple[int, int, str]  # (start byte, end byte, token) of one token of a text
Term = tuple[str, bool]  # (token, prefix): ``prefix`` when the token ends a ``*`` phrase part
Tokenize = Callable[[str], list[Token]]  # a text's tokens as the messages index sees a document


class Phrase(msgspec.Struct, frozen=True, kw_only=True):
    """Consecutive tokens (``one two``, ``"one two"``, ``one+two``, ``deploy*``); ``initial`` for ``^``.

    ``terms`` is empty for a phrase of punctuation only, which nothing matches. ``match`` is the phrase alone
    as FTS5 query text.
    """

    terms: tuple[Term, ...]
    initial: bool
    match: str


class And(msgspec.Struct, frozen=True):
    """Every child matches (``a b``, ``a AND b``)."""

    queries: tuple[Query, ...]


class Or(msgspec.Struct, frozen=True):
    """Any child matches."""

    queries: tuple[Query, ...]


class Not(msgspec.Struct, frozen=True):
    """``match`` matches and ``no_match`` does not."""

    match: Query
    no_match: Query


class Near(msgspec.Struct, frozen=True):
    """``NEAR(a b, 10)``: every phrase, close together (in a title, anywhere: evaluated as an AND there)."""

    phrases: tuple[Phrase, ...]


class ColumnFilter(msgspec.Struct, frozen=True, kw_only=True):
    """``col: query`` (``include``) or ``- col: query`` (not ``include``)."""

    columns: tuple[str, ...]
    include: bool
    query: Query


Query = Phrase | And | Or | Not | Near | ColumnFilter


class SearchQuery(msgspec.Struct, frozen=True, kw_only=True):
    """A checked query: the text as typed, its tree, and the substrings when the trigram index answers it.

    ``substrings`` is set when the query is an AND of plain CJK phrases of three or more characters (see
    :func:`hermes_actors.store.fts.cjk_substrings`); every other query goes to the words index.
    """

    text: str
    root: Query
    substrings: tuple[str, ...] | None = None


def parse_search_query(text: str, tokenize: Tokenize, *, echo_chars: int | None = None) -> SearchQuery | FtsResult:
    """``text`` checked and parsed, or the envelope refusing it in ``fts_query``'s words (an over-long query is
    echoed cut to ``echo_chars`` characters). Never raises for what a user typed."""
    parsed = check_query(text, echo_chars=echo_chars)
    if isinstance(parsed, FtsResult):
        return parsed
    substrings = cjk_substrings(parsed)
    return SearchQuery(
        text=text,
        root=_convert(parsed, tokenize),
        substrings=None if substrings is None else tuple(substrings),
    )


def _convert(node: fq.QUERY, tokenize: Tokenize) -> Query:
    if isinstance(node, fq.PHRASE):
        return _phrase(node, tokenize)
    if isinstance(node, fq.AND):
        return And(tuple(_convert(child, tokenize) for child in node.queries))
    if isinstance(node, fq.OR):
        return Or(tuple(_convert(child, tokenize) for child in node.queries))
    if isinstance(node, fq.NOT):
        return Not(_convert(node.match, tokenize), _convert(node.no_match, tokenize))
    if isinstance(node, fq.NEAR):
        return Near(tuple(_phrase(phrase, tokenize) for phrase in node.phrases))
    return ColumnFilter(  # COLUMNFILTER
        columns=tuple(node.columns), include=node.filter == "include", query=_convert(node.query, tokenize)
    )


def _phrase(phrase: fq.PHRASE, tokenize: Tokenize) -> Phrase:
    """The phrase's tokens across its ``+`` parts, each part's last token a prefix when that part ends in ``*``."""
    terms: list[Term] = []
    part: fq.PHRASE | None = phrase
    while part is not None:
        if isinstance(part.phrase, str):
            words = [token for _, _, token in tokenize(part.phrase)]
        else:
            words = [t if isinstance(t, str) else t[0] for t in part.phrase.tokens]
        terms.extend((word, part.prefix and i == len(words) - 1) for i, word in enumerate(words))
        part = part.plus
    return Phrase(terms=tuple(terms), initial=phrase.initial, match=fq.to_query_string(phrase))
