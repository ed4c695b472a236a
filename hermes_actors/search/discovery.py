"""Discovery: the sessions a query finds, one hit per lineage, at a cost that does not grow with the store.

Discovery never loads a session: hits are found by keyset pages over the full-text index (the caller's
lineage, and each lineage already reported, excluded by the store inside the page's query), and each hit is
built from LIMITed reads of its session's messages (:class:`~hermes_actors.store.search_reads.SearchReads`).
``relevance`` ranks the newest :data:`RELEVANCE_WINDOW` matching messages (all of them when fewer match;
otherwise the result's ``note`` says so) by BM25 (:mod:`hermes_actors.search.rank`, with document frequencies
counted among at most :data:`DF_SAMPLE` matches); ``newest``/``oldest`` walk the index in order. CJK queries of
three or more characters use the trigram index, which has no rank: there ``relevance`` means ``newest``. Title
hits come first, then message hits.

The bounds live here, read when a search runs, so a test can lower them.
"""

from __future__ import annotations

from collections.abc import Sequence

from hermes_actors.search.lineages import Lineages
from hermes_actors.search.query import Matcher, Range, as_result, highlight, refuse_query
from hermes_actors.search.rank import Ranker, phrase_frequencies
from hermes_actors.search.shapes import SearchHit, SearchResult, SessionInfo, Sort
from hermes_actors.search.transcript import bookends, cut, first_messages, messages_around, session_info
from hermes_actors.store import SessionFilter
from hermes_actors.store.fts import SNIPPET_TOKENS
from hermes_actors.store.search_query import SearchQuery
from hermes_actors.store.search_reads import IndexRefusedError, SearchReads

__all__ = ["DF_SAMPLE", "MAX_LIMIT", "RELEVANCE_WINDOW", "WINDOW_CHARS", "discover"]

MAX_LIMIT = 10
RELEVANCE_WINDOW = 1000  # relevance ranks among at most this many of the newest matching messages
DF_SAMPLE = 500  # a phrase's document frequency is counted up to this many matches, then extrapolated
WINDOW_CHARS = 300  # discovery cuts window messages to this many characters (scroll and read never cut)

_FIRST_PAGE = 100  # newest/oldest: the first keyset page; later pages grow fourfold up to RELEVANCE_WINDOW
_MAX_PAGES = MAX_LIMIT + 2  # every page after the first yields a new lineage, so this bound is never the limit


def discover(
    reads: SearchReads,
    query: str,
    parsed: SearchQuery,
    roles: tuple[str, ...],
    sort: Sort,
    limit: int,
    span: int,
    current: str | None,
    scope: SessionFilter,
) -> SearchResult:
    """Title hits, then message hits, for the checked query ``parsed``: at most ``limit``, one per lineage,
    never the lineage of session ``current``."""
    return _Discovery(reads, query, parsed, roles, sort, limit, span, current, scope).run()


class _Discovery:
    """One discovery search: title hits, then message hits, one per lineage."""

    def __init__(
        self,
        reads: SearchReads,
        query: str,
        parsed: SearchQuery,
        roles: tuple[str, ...],
        sort: Sort,
        limit: int,
        span: int,
        current: str | None,
        scope: SessionFilter,
    ) -> None:
        self.reads = reads
        self.query = query
        self.parsed = parsed
        self.roles = roles
        self.sort = sort
        self.limit = limit
        self.span = span
        self.scope = scope
        self.lineages = Lineages(reads)
        self.taken: set[str] = set()
        self.excluded: set[int] = set()
        if current is not None:
            root = self.lineages.root_of_session(current)
            self.taken.add(root)
            self.excluded = self.lineages.members(root)
        self.hits: list[SearchHit] = []
        self.note: str | None = None
        self.matcher = Matcher(reads, parsed)

    def run(self) -> SearchResult:
        if not self.matcher.has_words():
            return refuse_query(
                self.query,
                "the query has no words to search for (only punctuation or spaces); give at least one word",
                suggest=False,
            )
        try:
            self._title_hits()
            if len(self.hits) < self.limit:
                self._message_hits()
        except IndexRefusedError as exc:
            return as_result(exc.refusal(self.query))  # what the parser lets through but the index refuses
        return SearchResult(shape="discovery", query=self.query, hits=self.hits, note=self.note)

    def _take(self, ref: int, root: str) -> None:
        self.taken.add(root)
        self.excluded |= self.lineages.members(root)
        self.excluded.add(ref)

    # -- titles ----------------------------------------------------------------------------------------------

    def _title_hits(self) -> None:
        for row in self.reads.titled_sessions(self.parsed, oldest_first=self.sort == "oldest", scope=self.scope):
            ref, info = session_info(row)
            if ref in self.excluded:
                continue
            title = info.title or ""
            spans = self.matcher.tokens(title)
            marks: set[Range] = set()
            if not self.matcher.matches([t for _, _, t in spans], marks):
                continue
            root = self.lineages.root(ref)
            if root in self.taken:
                continue
            self._take(ref, root)
            self.hits.append(self._title_hit(ref, info, root, highlight(title, spans, marks, 0, len(spans))))
            if len(self.hits) == self.limit:
                return

    def _title_hit(self, ref: int, info: SessionInfo, root: str, snippet: str) -> SearchHit:
        window = first_messages(self.reads, ref, 2 * self.span + 1, chars=WINDOW_CHARS)
        start, end = bookends(self.reads, ref, window)  # nothing comes before the session's first messages
        return SearchHit(
            session_id=info.session_id,
            title=info.title,
            when=info.started_at,
            source=info.source,
            last_active_at=info.last_active_at,
            matched="title",
            snippet=snippet,
            lineage_root=None if root == info.session_id else root,
            match_message_id=None,
            role=None,
            messages=window,
            bookend_start=start,
            bookend_end=end,
            messages_before=0,
            messages_after=self.reads.count_after(ref, window[-1].id) if window else 0,
        )

    # -- messages --------------------------------------------------------------------------------------------

    def _message_hits(self) -> None:
        """Message hits from keyset pages over the index: ranked by BM25 for ``relevance`` (one page of at most
        RELEVANCE_WINDOW, the newest), else in the page order, later pages only filling up the limit."""
        ranked = self.sort == "relevance" and self.parsed.substrings is None
        if ranked:
            self.reads.rank_function(Ranker).prepare(phrase_frequencies(self.reads, self.parsed, DF_SAMPLE))
        page = RELEVANCE_WINDOW if ranked else _FIRST_PAGE
        bound: int | None = None
        for number in range(_MAX_PAGES):
            rows = self.reads.match_page(
                self.parsed,
                roles=self.roles,
                scope=self.scope,
                ranked=ranked,
                oldest_first=self.sort == "oldest",
                excluded=self.excluded,
                beyond=bound,
                size=page,
            )
            order: Sequence[int] = range(len(rows))
            if ranked:
                order = sorted(order, key=lambda i: -(rows[i][1] or 0.0))
            for index in order:
                mid, _, ref = rows[index]
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
            bound = rows[-1][0]
            page = min(page * 4, RELEVANCE_WINDOW)

    def _message_hit(self, mid: int, ref: int, root: str) -> SearchHit:
        _, info = session_info(self.reads.session_by_ref(ref))
        window, before, after = messages_around(self.reads, ref, mid, self.span, chars=WINDOW_CHARS)
        start, end = bookends(self.reads, ref, window)
        return SearchHit(
            session_id=info.session_id,
            title=info.title,
            when=info.started_at,
            source=info.source,
            last_active_at=info.last_active_at,
            matched="message",
            snippet=self._snippet(self.reads.message_content(mid)),
            lineage_root=None if root == info.session_id else root,
            match_message_id=mid,
            role=next((m.role for m in window if m.anchor), None),
            messages=window,
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
        spans = self.matcher.tokens(text)
        marks: set[Range] = set()
        self.matcher.matches([t for _, _, t in spans], marks)
        if not marks:
            return cut(text, WINDOW_CHARS)[0] or ""
        first = min(start for start, _ in marks)
        low = max(0, min(first - SNIPPET_TOKENS // 4, len(spans) - SNIPPET_TOKENS))
        high = min(len(spans), low + SNIPPET_TOKENS)
        return ("…" if low > 0 else "") + highlight(text, spans, marks, low, high) + ("…" if high < len(spans) else "")
