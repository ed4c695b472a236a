"""A discovery query: checked once, then evaluated in Python over titles and over the text of each hit.

Titles are matched with the same tokenizer as messages (case and diacritics folded, prefix*, phrases, AND/OR/NOT;
NEAR counts as AND within a title). The store's pre-filter that keeps this fast
(:meth:`~hermes_actors.store.search_reads.SearchReads.titled_sessions`) compares with LIKE, which folds ASCII
case only, so a title spelled with accents matches only a query spelled with them.

The same :class:`Matcher` marks the matches in a hit's snippet. A query is parsed by the store with the checks
of :func:`hermes_actors.store.fts.check_query`, so discovery refuses what ``fts_query`` refuses in the same
words; :func:`parse` also refuses a column filter other than ``content`` before the index sees it.
"""

from __future__ import annotations

from collections.abc import Iterator

from hermes_actors.search.shapes import SearchResult
from hermes_actors.store.fts import refuse
from hermes_actors.store.records import FtsResult
from hermes_actors.store.search_query import And, ColumnFilter, Near, Not, Or, Phrase, Query, SearchQuery, Term, Token
from hermes_actors.store.search_reads import SearchReads

__all__ = ["ECHO_CHARS", "Matcher", "Range", "Token", "as_result", "highlight", "parse", "refuse_query", "walk"]

ECHO_CHARS = 100  # an over-long query is echoed cut to this many characters

Range = tuple[int, int]  # token indexes [start, end) of one phrase match


def as_result(refused: FtsResult) -> SearchResult:
    """A refusal from :mod:`hermes_actors.store.fts` as a discovery answer."""
    return SearchResult(shape="discovery", query=refused.query, error=refused.error, suggestion=refused.suggestion)


def refuse_query(query: str, error: str, *, suggest: bool = True) -> SearchResult:
    """A discovery answer refusing ``query`` with ``error`` (and, with ``suggest``, its words quoted)."""
    return as_result(refuse(query, error, suggest=suggest))


def parse(reads: SearchReads, query: str) -> SearchQuery | SearchResult:
    """The parsed query, or the error envelope: ``fts_query``'s checks, then column filters other than content."""
    parsed = reads.parse_query(query, echo_chars=ECHO_CHARS)
    if isinstance(parsed, FtsResult):
        return as_result(parsed)
    for node in walk(parsed.root):
        if isinstance(node, ColumnFilter) and any(c != "content" for c in node.columns):
            column = next(c for c in node.columns if c != "content")
            return refuse_query(
                query,
                f"the query filters on column {column!r}, but messages have only 'content'; "
                "quote words that contain ':' to search them literally",
            )
    return parsed


def walk(node: Query) -> Iterator[Query]:
    """``node`` and every node below it, parents first, in the query's order."""
    yield node
    match node:
        case And(queries=children) | Or(queries=children):
            for child in children:
                yield from walk(child)
        case Not(match=positive, no_match=negative):
            yield from walk(positive)
            yield from walk(negative)
        case Near(phrases=phrases):
            yield from phrases
        case ColumnFilter(query=inner):
            yield from walk(inner)


class Matcher:
    """``query`` evaluated over token lists made by the messages index's tokenizer."""

    def __init__(self, reads: SearchReads, query: SearchQuery) -> None:
        self.query = query
        self.tokens = reads.tokenize  # ``(start byte, end byte, token)`` per token, as the messages index sees it

    def has_words(self) -> bool:
        """Whether any phrase of the query has a token (not only punctuation or spaces)."""
        return any(p.terms for p in walk(self.query.root) if isinstance(p, Phrase))

    def matches(self, words: list[str], marks: set[Range]) -> bool:
        """Whether ``words`` (a token list) matches; adds the token ranges of positive matches to ``marks``."""
        return self._matches(self.query.root, words, marks)

    def _matches(self, node: Query, words: list[str], marks: set[Range]) -> bool:
        match node:
            case Phrase(terms=terms, initial=initial):
                return self._phrase_at(terms, initial, words, marks)
            case And(queries=children) | Near(phrases=children):
                # Every child is tried, not just up to the first decisive one, so that all matches get marked.
                results = [self._matches(child, words, marks) for child in children]
                return all(results)
            case Or(queries=children):
                results = [self._matches(child, words, marks) for child in children]
                return any(results)
            case Not(match=positive, no_match=negative):
                return self._matches(positive, words, marks) and not self._matches(negative, words, set())
            case ColumnFilter(include=include, query=inner):
                return include and self._matches(inner, words, marks)

    @staticmethod
    def _phrase_at(terms: tuple[Term, ...], initial: bool, words: list[str], marks: set[Range]) -> bool:
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


def highlight(text: str, spans: list[Token], marks: set[Range], low: int, high: int) -> str:
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
