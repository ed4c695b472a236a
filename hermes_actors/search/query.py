"""A discovery query: checked once, then evaluated in Python over titles and over the text of each hit.

Titles are matched with the same tokenizer as messages (case and diacritics folded, prefix*, phrases, AND/OR/NOT;
NEAR counts as AND within a title). The SQL pre-filter that keeps this fast compares with LIKE, which folds ASCII
case only, so a title spelled with accents matches only a query spelled with them.

The same :class:`Matcher` marks the matches in a hit's snippet. A query is first checked by
:func:`hermes_actors.store.fts.check_query`, so discovery refuses what ``fts_query`` refuses in the same words;
it also refuses a column filter other than ``content`` before FTS5 sees it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import apsw
import apsw.fts5query as fq

from hermes_actors.search.shapes import SearchResult
from hermes_actors.store.fts import check_query, refuse
from hermes_actors.store.records import FtsResult
from hermes_actors.store.tokenizer import TOKENIZER_NAME

__all__ = ["ECHO_CHARS", "Matcher", "Range", "Token", "as_result", "highlight", "parse", "refuse_query"]

ECHO_CHARS = 100  # an over-long query is echoed cut to this many characters

Token = tuple[int, int, str]  # (start byte, end byte, token)
Range = tuple[int, int]  # token indexes [start, end) of one phrase match
_Term = tuple[str, bool]  # (token, prefix)


def as_result(refused: FtsResult) -> SearchResult:
    """A refusal from :mod:`hermes_actors.store.fts` as a discovery answer."""
    return SearchResult(shape="discovery", query=refused.query, error=refused.error, suggestion=refused.suggestion)


def refuse_query(query: str, error: str, *, suggest: bool = True) -> SearchResult:
    """A discovery answer refusing ``query`` with ``error`` (and, with ``suggest``, its words quoted)."""
    return as_result(refuse(query, error, suggest=suggest))


def parse(query: str) -> fq.QUERY | SearchResult:
    """The parsed query, or the error envelope: ``fts_query``'s checks, then column filters other than content."""
    parsed = check_query(query, echo_chars=ECHO_CHARS)
    if isinstance(parsed, FtsResult):
        return as_result(parsed)
    for node in _walk(parsed):
        if isinstance(node, fq.COLUMNFILTER) and any(c != "content" for c in node.columns):
            column = next(c for c in node.columns if c != "content")
            return refuse_query(
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


class Matcher:
    """``parsed`` evaluated over token lists made by the messages index's tokenizer on ``db``."""

    def __init__(self, db: apsw.Connection, parsed: fq.QUERY) -> None:
        self.parsed = parsed
        self._tokenizer = db.fts5_tokenizer(TOKENIZER_NAME, [])

    def tokens(self, text: str) -> list[Token]:
        """``(start byte, end byte, token)`` for each token of ``text``, as the messages index sees it."""
        found = cast(list[tuple[Any, ...]], self._tokenizer(text.encode("utf-8"), apsw.FTS5_TOKENIZE_DOCUMENT, None))
        return [(int(token[0]), int(token[1]), str(token[2])) for token in found]

    def has_words(self) -> bool:
        """Whether any phrase of the query has a token (not only punctuation or spaces)."""
        return any(self._phrase_terms(p) for p in _walk(self.parsed) if isinstance(p, fq.PHRASE))

    def prefilter(self, params: list[Any]) -> str:
        """A LIKE expression on ``title`` every matching title satisfies; appends its parameters to ``params``."""
        return self._prefilter(self.parsed, params)

    def matches(self, words: list[str], marks: set[Range]) -> bool:
        """Whether ``words`` (a token list) matches; adds the token ranges of positive matches to ``marks``."""
        return self._matches(self.parsed, words, marks)

    def _phrase_terms(self, phrase: fq.PHRASE) -> list[_Term]:
        terms: list[_Term] = []
        part: fq.PHRASE | None = phrase
        while part is not None:
            if isinstance(part.phrase, str):
                words = [t for _, _, t in self.tokens(part.phrase)]
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

    def _matches(self, node: fq.QUERY, words: list[str], marks: set[Range]) -> bool:
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
    def _phrase_at(terms: list[_Term], initial: bool, words: list[str], marks: set[Range]) -> bool:
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
