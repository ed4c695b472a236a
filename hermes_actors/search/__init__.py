"""session_search: recall over the store, in the shape the arguments ask for.

- **scroll** (``session_id`` and ``around_message_id``): the messages within ``window`` (1..20, default 5) of one
  message, the anchor flagged, with counts of the messages before and after;
- **read** (``session_id`` alone): the whole session, or its first 20 and last 10 messages when it is longer than
  30, with the number left out between them;
- **browse** (no query): the most recently active conversations (lineage tips), newest first;
- **discovery** (``query``, FTS5 syntax): sessions whose title matches, then sessions whose user and assistant
  messages match (``role_filter`` changes which roles), at most ``limit`` (1..10, default 3) hits, one per
  lineage, never the caller's own lineage. Each hit carries the match's snippet, the ``window`` around it, the
  first and last three user/assistant messages outside that window (``bookend_start``/``bookend_end``) and how
  many messages lie before and after the window.

A lineage is a compression chain: the sessions whose :func:`~hermes_actors.store.lineage.lineage_root` is the same.
Discovery reports each lineage once, by its first hit in the requested order (for ``newest`` that is its newest
matching message, for ``relevance`` its best one), and skips the whole lineage of ``current_session_id``.

Nothing here raises for what a caller typed: a malformed query, an unknown session or message, a bad sort or
role comes back as a :class:`SearchResult` whose ``error`` names the problem and the fix (with a ``suggestion``
for a query), and out-of-range numbers are clamped.

The modules: :mod:`.api` (the entry point, scroll, read, browse), :mod:`.discovery` (and its bounds),
:mod:`.query` (checking a query, matching titles, marking snippets), :mod:`.rank` (bounded BM25),
:mod:`.transcript` (messages and sessions as results), :mod:`.lineages` and :mod:`.shapes` (the result Structs).
None of them runs SQL: they read through :class:`hermes_actors.store.search_reads.SearchReads` (the APSW store's
is :meth:`Store.search_reads <hermes_actors.store.Store.search_reads>`), and the parsed query is
:class:`hermes_actors.store.search_query.SearchQuery`.
"""

from __future__ import annotations

from hermes_actors.search.api import DEFAULT_LIMIT, DEFAULT_WINDOW, session_search
from hermes_actors.search.api import MAX_LIMIT as MAX_LIMIT
from hermes_actors.search.api import MAX_WINDOW as MAX_WINDOW
from hermes_actors.search.discovery import RELEVANCE_WINDOW
from hermes_actors.search.shapes import SearchHit, SearchMessage, SearchResult, SessionInfo, Shape, Sort

__all__ = [
    "DEFAULT_LIMIT",
    "DEFAULT_WINDOW",
    "RELEVANCE_WINDOW",
    "SearchHit",
    "SearchMessage",
    "SearchResult",
    "SessionInfo",
    "Shape",
    "Sort",
    "session_search",
]
