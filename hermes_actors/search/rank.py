"""BM25 relevance for discovery, with document frequencies that cost a bounded number of rows to find.

FTS5's own ``bm25()`` counts every document holding each query term, so each common word in a query ("the",
"error") cost tens of milliseconds on a million messages. Here an auxiliary function (:func:`ranker_on`) scores a
row by BM25 with FTS5's constants from its per-row term counts, and a phrase's document frequency is counted among
its newest ``sample`` matches and, past that, extrapolated from how far back they reach
(:func:`phrase_frequencies`). Discovery bounds which rows get scored; this module only scores them.
"""

from __future__ import annotations

import math
import weakref
from typing import cast

import apsw
import apsw.fts5query as fq

__all__ = ["BM25_B", "BM25_K1", "RANK_FUNCTION", "Ranker", "phrase_frequencies", "ranker_on"]

BM25_K1 = 1.2  # FTS5's bm25() constants
BM25_B = 0.75
RANK_FUNCTION = "hermes_rank"  # the SQL name of the auxiliary function: ``hermes_rank(messages_fts)``


class Ranker:
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


_rankers: weakref.WeakKeyDictionary[apsw.Connection, Ranker] = weakref.WeakKeyDictionary()


def ranker_on(db: apsw.Connection) -> Ranker:
    """The ranker registered on ``db`` as :data:`RANK_FUNCTION` (once: readers are pooled and reused)."""
    ranker = _rankers.get(db)
    if ranker is None:
        ranker = _rankers[db] = Ranker()
        db.register_fts5_function(RANK_FUNCTION, ranker)
    return ranker


def phrase_frequencies(db: apsw.Connection, parsed: fq.QUERY, sample: int) -> list[float | None]:
    """Per query phrase, in FTS5's order: its estimated document frequency, ``None`` when the query has one
    phrase that can match (its weight cannot change the order), 0 for phrases only a NOT refers to."""
    phrases = _phrases(parsed)
    if sum(positive for _, positive in phrases) <= 1:
        return [None if positive else 0.0 for _, positive in phrases]
    return [_document_frequency(db, phrase, sample) if positive else 0.0 for phrase, positive in phrases]


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


def _document_frequency(db: apsw.Connection, phrase: fq.PHRASE, sample: int) -> float:
    """How many messages hold ``phrase``: counted up to ``sample``, beyond that extrapolated from the id range
    its newest ``sample`` matches span (message ids grow with time, so the density holds on average)."""
    newest = db.execute(
        "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? ORDER BY rowid DESC LIMIT ?",
        (fq.to_query_string(phrase), sample),
    ).fetchall()
    if len(newest) < sample:
        return float(len(newest))
    last = int(cast(int, newest[-1][0]))
    highest = int(cast(int, db.execute("SELECT max(id) FROM messages").get or last))
    return sample * highest / max(1, highest - last + 1)
