"""BM25 relevance for discovery, with document frequencies that cost a bounded number of rows to find.

FTS5's own ``bm25()`` counts every document holding each query term, so each common word in a query ("the",
"error") cost tens of milliseconds on a million messages. Here a rank function (:class:`Ranker`, which the store
calls once per matching row of a ranked page: :meth:`~hermes_actors.store.search_reads.SearchReads.rank_function`)
scores a row by BM25 with FTS5's constants from its per-row term counts, and a phrase's document frequency is
counted among its newest ``sample`` matches and, past that, extrapolated from how far back they reach
(:func:`phrase_frequencies`). Discovery bounds which rows get scored; this module only scores them.
"""

from __future__ import annotations

import math

from hermes_actors.store.search_query import And, ColumnFilter, Near, Not, Or, Phrase, Query, SearchQuery
from hermes_actors.store.search_reads import RankedRow, SearchReads

__all__ = ["BM25_B", "BM25_K1", "Ranker", "phrase_frequencies"]

BM25_K1 = 1.2  # FTS5's bm25() constants
BM25_B = 0.75


class Ranker:
    """The rank function of ranked pages: a row's BM25 score (higher is better); the store keeps one per connection.

    :meth:`prepare` sets each query phrase's document frequency before a query runs (``None``: weight 1, for a
    query with one phrase, where weights cannot change the order; ``0``: a phrase only a NOT refers to). The
    index size and average length come from the index on the first row.
    """

    def __init__(self) -> None:
        self._frequencies: list[float | None] = []
        self._weights: list[float] | None = None
        self._average = 1.0

    def prepare(self, frequencies: list[float | None]) -> None:
        """Weigh the query's phrases by these document frequencies (see :func:`phrase_frequencies`)."""
        self._frequencies = frequencies
        self._weights = None

    def __call__(self, api: RankedRow, /, *args: object) -> float:
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


def phrase_frequencies(reads: SearchReads, query: SearchQuery, sample: int) -> list[float | None]:
    """Per query phrase, in FTS5's order: its estimated document frequency, ``None`` when the query has one
    phrase that can match (its weight cannot change the order), 0 for phrases only a NOT refers to."""
    phrases = _phrases(query.root)
    if sum(positive for _, positive in phrases) <= 1:
        return [None if positive else 0.0 for _, positive in phrases]
    return [_document_frequency(reads, phrase, sample) if positive else 0.0 for phrase, positive in phrases]


def _phrases(node: Query, positive: bool = True) -> list[tuple[Phrase, bool]]:
    """The query's phrases in the order FTS5 numbers them, each with whether a match can contain it."""
    match node:
        case Phrase():
            return [(node, positive)]
        case And(queries=children) | Or(queries=children):
            return [pair for child in children for pair in _phrases(child, positive)]
        case Not(match=matched, no_match=refused):
            return _phrases(matched, positive) + _phrases(refused, False)
        case Near(phrases=phrases):
            return [(phrase, positive) for phrase in phrases]
        case ColumnFilter(include=include, query=inner):
            return _phrases(inner, positive and include)


def _document_frequency(reads: SearchReads, phrase: Phrase, sample: int) -> float:
    """How many messages hold ``phrase``: counted up to ``sample``, beyond that extrapolated from the id range
    its newest ``sample`` matches span (message ids grow with time, so the density holds on average)."""
    found, last = reads.phrase_sample(phrase.match, sample)
    if found < sample:
        return float(found)
    highest = reads.newest_message_id() or last
    return sample * highest / max(1, highest - last + 1)
