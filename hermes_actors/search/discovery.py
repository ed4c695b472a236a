"""Discovery: the sessions a query finds, one hit per lineage, at a cost that does not grow with the store.

Discovery never loads a session: hits are found by keyset pages over the FTS index (the caller's lineage, and
each lineage already reported, excluded in SQL), and each hit is built from LIMITed queries on
``messages (session_ref, id)``. ``relevance`` ranks the newest :data:`RELEVANCE_WINDOW` matching messages (all
of them when fewer match; otherwise the result's ``note`` says so) by BM25 (:mod:`hermes_actors.search.rank`,
with document frequencies counted among at most :data:`DF_SAMPLE` matches); ``newest``/``oldest`` walk the
index in order. CJK queries of three or more characters use the trigram index, which has no rank: there
``relevance`` means ``newest``. Title hits come first, then message hits.

The bounds live here, read when a search runs, so a test can lower them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import apsw
import apsw.fts5query as fq
import msgspec

from hermes_actors.search.lineages import Lineages, json_list
from hermes_actors.search.query import Matcher, Range, as_result, highlight, refuse_query
from hermes_actors.search.rank import RANK_FUNCTION, phrase_frequencies, ranker_on
from hermes_actors.search.shapes import SearchHit, SearchResult, SessionInfo, Sort
from hermes_actors.search.transcript import (
    INFO_COLUMNS,
    bookends,
    count_messages,
    cut,
    first_messages,
    messages_around,
    session_info,
)
from hermes_actors.store import SessionFilter, Store
from hermes_actors.store.fts import SNIPPET_TOKENS, cjk_substrings, refuse_index_error

__all__ = ["DF_SAMPLE", "MAX_LIMIT", "RELEVANCE_WINDOW", "WINDOW_CHARS", "discover"]

MAX_LIMIT = 10
RELEVANCE_WINDOW = 1000  # relevance ranks among at most this many of the newest matching messages
DF_SAMPLE = 500  # a phrase's document frequency is counted up to this many matches, then extrapolated
WINDOW_CHARS = 300  # discovery cuts window messages to this many characters (scroll and read never cut)

_FIRST_PAGE = 100  # newest/oldest: the first keyset page; later pages grow fourfold up to RELEVANCE_WINDOW
_MAX_PAGES = MAX_LIMIT + 2  # every page after the first yields a new lineage, so this bound is never the limit


def discover(
    store: Store,
    query: str,
    parsed: fq.QUERY,
    roles: tuple[str, ...],
    sort: Sort,
    limit: int,
    span: int,
    current: str | None,
    scope: SessionFilter,
) -> SearchResult:
    """Title hits, then message hits, for the checked query ``parsed``: at most ``limit``, one per lineage,
    never the lineage of session ``current``."""
    return _Discovery(store, query, parsed, roles, sort, limit, span, current, scope).run()


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
        scope: SessionFilter,
    ) -> None:
        self.store = store
        self.db = store._connection
        self.query = query
        self.parsed = parsed
        self.roles = roles
        self.sort = sort
        self.limit = limit
        self.span = span
        self.scope = scope
        self.lineages = Lineages(store)
        self.taken: set[str] = set()
        self.excluded: set[int] = set()
        if current is not None:
            root = self.lineages.root_of_session(current)
            self.taken.add(root)
            self.excluded = self.lineages.members(root)
        self.hits: list[SearchHit] = []
        self.note: str | None = None
        self.matcher = Matcher(self.db, parsed)

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
                self._message_hits(cjk_substrings(self.parsed))
        except apsw.Error as exc:
            return as_result(refuse_index_error(self.query, exc))  # what the parser lets through but FTS5 refuses
        return SearchResult(shape="discovery", query=self.query, hits=self.hits, note=self.note)

    def _take(self, ref: int, root: str) -> None:
        self.taken.add(root)
        self.excluded |= self.lineages.members(root)
        self.excluded.add(ref)

    # -- titles ----------------------------------------------------------------------------------------------

    def _title_hits(self) -> None:
        params: list[Any] = []
        where = self.matcher.prefilter(params)
        condition, values = self.scope.sql()
        where += f" AND {condition}"
        params.extend(values)
        direction = "ASC" if self.sort == "oldest" else "DESC"
        sql = (
            f"SELECT {INFO_COLUMNS} FROM sessions WHERE title IS NOT NULL AND {where} "
            f"ORDER BY last_active_at {direction}, id {direction}"
        )
        for row in self.db.execute(sql, params):
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
        window = first_messages(self.db, ref, 2 * self.span + 1, chars=WINDOW_CHARS)
        _, end = bookends(self.db, ref, window)
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
            messages_after=count_messages(self.db, ref, ">", window[-1].id) if window else 0,
        )

    # -- messages --------------------------------------------------------------------------------------------

    def _candidate_sql(self, substrings: list[str] | None) -> tuple[str, list[Any]]:
        """SQL for one keyset page of matching messages: (message id, score or NULL, session ref), in rowid order."""
        descending = self.sort != "oldest"
        if substrings is None:
            table, rank = "messages_fts", f"{RANK_FUNCTION}(messages_fts)" if self.sort == "relevance" else "NULL"
            match, params = "messages_fts MATCH ?", [self.query]
        else:
            table, rank = "messages_fts_cjk", "NULL"
            match, params = (
                " AND ".join("messages_fts_cjk.content LIKE ?" for _ in substrings),
                [f"%{s}%" for s in substrings],
            )
        condition, values = self.scope.sql("s")
        scoped = condition != "1"
        join = " JOIN sessions AS s ON s.ref = m.session_ref" if scoped else ""
        source = f" AND {condition}" if scoped else ""
        keyset = f" AND {table}.rowid {'<' if descending else '>'} ?"
        sql = (
            f"SELECT {table}.rowid, {rank}, m.session_ref FROM {table} JOIN messages AS m ON m.id = {table}.rowid"
            f"{join} WHERE {match} AND m.role IN (SELECT value FROM json_each(?)){source}"
            f" AND m.session_ref NOT IN (SELECT value FROM json_each(?)){keyset}"
            f" ORDER BY {table}.rowid {'DESC' if descending else 'ASC'} LIMIT ?"
        )
        params.append(msgspec.json.encode(list(self.roles)).decode())
        if scoped:
            params.extend(values)
        return sql, params

    def _message_hits(self, substrings: list[str] | None) -> None:
        sql, params = self._candidate_sql(substrings)
        ranked = self.sort == "relevance" and substrings is None
        if ranked:
            ranker_on(self.db).prepare(phrase_frequencies(self.db, self.parsed, DF_SAMPLE))
        page = RELEVANCE_WINDOW if ranked else _FIRST_PAGE
        bound = 2**63 - 1 if self.sort != "oldest" else -(2**63)
        for number in range(_MAX_PAGES):
            rows = self.db.execute(sql, [*params, json_list(self.excluded), bound, page]).fetchall()
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

    def _message_hit(self, mid: int, ref: int, root: str) -> SearchHit:
        row = self.db.execute(f"SELECT {INFO_COLUMNS} FROM sessions WHERE ref = ?", (ref,)).fetchall()[0]
        _, info = session_info(row)
        window, before, after = messages_around(self.db, ref, mid, self.span, chars=WINDOW_CHARS)
        start, end = bookends(self.db, ref, window)
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
        spans = self.matcher.tokens(text)
        marks: set[Range] = set()
        self.matcher.matches([t for _, _, t in spans], marks)
        if not marks:
            return cut(text, WINDOW_CHARS)[0] or ""
        first = min(start for start, _ in marks)
        low = max(0, min(first - SNIPPET_TOKENS // 4, len(spans) - SNIPPET_TOKENS))
        high = min(len(spans), low + SNIPPET_TOKENS)
        return ("…" if low > 0 else "") + highlight(text, spans, marks, low, high) + ("…" if high < len(spans) else "")
