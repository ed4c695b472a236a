"""What :mod:`hermes_actors.search` reads from the store: :class:`SearchReads`, and the rows and hooks it uses.

session_search is written against this interface only; ``Store.search_reads()`` gives the APSW store's
implementation. Every read is bounded: a LIMITed query on ``messages (session_ref, id)``,
a count, a keyset page over a full-text index, or a lineage walk, so that no search loads a whole session or
scans the store. Sessions are named by their integer ``ref`` between the calls of one search (the key messages
carry) and by their id in what a caller sees.

Ranking stays with the caller: a :class:`RankFunction` (BM25 in :mod:`hermes_actors.search.rank`) is called by
the words index once per matching row of a ranked page and sees that row through :class:`RankedRow`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Protocol, TypeVar

import apsw

from hermes_actors.errors import StoreError
from hermes_actors.store.fts import refuse_index_error
from hermes_actors.store.records import FtsResult, SessionFilter
from hermes_actors.store.search_query import SearchQuery, Token

__all__ = [
    "Candidate",
    "IndexRefusedError",
    "MessageRow",
    "RankFunction",
    "RankedRow",
    "SearchReads",
    "SessionRow",
]


SessionRow = tuple[int, str, str, float, float, str | None, float | None, str | None, int, str | None]
"""What a search shows of a session: (ref, id, source, started_at, last_active_at, title, ended_at, end_reason,
message_count, parent_session_id). A plain tuple, as SQLite returns it: a search reads many."""

MessageRow = tuple[int, str, str | None, float, str | None]
"""What a search shows of a message: (id, role, content, created_at, tool_name), a plain tuple."""

Candidate = tuple[int, float | None, int]
"""A message that matches a query: (message id, score or ``None`` when the page is not ranked, session ref)."""


class IndexRefusedError(StoreError):
    """The full-text index refused a query its parser let through (FTS5 checks some things only when it runs)."""

    def __init__(self, cause: apsw.Error) -> None:
        super().__init__(str(cause))
        self.cause = cause

    def refusal(self, query: str) -> FtsResult:
        """The envelope refusing ``query`` for this reason, in the words ``fts_query`` uses."""
        return refuse_index_error(query, self.cause)


class RankedRow(Protocol):
    """What a rank function sees of one matching row: FTS5's extension API, the part BM25 needs."""

    @property
    def row_count(self) -> int:
        """Rows in the index."""

    @property
    def phrase_count(self) -> int:
        """Phrases in the query being run, numbered from 0 in the query's order."""

    def column_size(self, col: int = -1) -> int:
        """Tokens in this row."""

    def column_total_size(self, col: int = -1) -> int:
        """Tokens in the whole index."""

    def phrase_locations(self, phrase: int) -> list[list[int]]:
        """Per column, the token offsets where ``phrase`` matches in this row."""


class RankFunction(Protocol):
    """Scores one matching row of a ranked page (higher is better)."""

    def __call__(self, row: RankedRow, /, *args: object) -> float:
        """The score of ``row``."""


RankT = TypeVar("RankT", bound=RankFunction)


class SearchReads(Protocol):
    """The store as session_search reads it. Nothing here writes; call everything inside :meth:`snapshot`."""

    def snapshot(self) -> AbstractContextManager[object]:
        """A context in which every read sees the same state of the store (one read transaction)."""

    # -- the query and its words ------------------------------------------------------------------------------

    def parse_query(self, text: str, *, echo_chars: int | None = None) -> SearchQuery | FtsResult:
        """``text`` checked and parsed for discovery, or the envelope refusing it (never raises for input)."""

    def tokenize(self, text: str) -> list[Token]:
        """The tokens of ``text`` as the messages index sees a document (case and diacritics folded)."""

    # -- sessions ---------------------------------------------------------------------------------------------

    def session(self, session_id: str, scope: SessionFilter) -> SessionRow | None:
        """The session with exactly this id, if ``scope`` lets it be seen."""

    def resolve_session(self, reference: str, scope: SessionFilter) -> SessionRow:
        """The session a user typed (exact id, unique id prefix, title) among those ``scope`` lets be seen.

        Raises :class:`~hermes_actors.errors.SessionNotFoundError` or
        :class:`~hermes_actors.errors.AmbiguousSessionError`, whose text names the problem.
        """

    def session_by_ref(self, ref: int) -> SessionRow:
        """The session ``ref`` (one a read of this search returned)."""

    def lineage_tips(self, count: int, *, oldest_first: bool, skip: set[int], scope: SessionFilter) -> list[SessionRow]:
        """Up to ``count`` sessions that no session continues through compression, most recently active first
        (``oldest_first``: least recently), leaving out the sessions in ``skip`` and those ``scope`` hides."""

    def titled_sessions(self, query: SearchQuery, *, oldest_first: bool, scope: SessionFilter) -> Iterator[SessionRow]:
        """Sessions with a title that may match ``query``, most recently active first (``oldest_first``: least).

        A cheap superset, filtered by words compared without folding case beyond ASCII: the caller decides
        by evaluating ``query`` on the title's tokens. Read lazily; stop whenever enough are found.
        """

    # -- lineages ---------------------------------------------------------------------------------------------

    def lineage_root(self, session_id: str) -> str | None:
        """The first session of ``session_id``'s lineage; ``None`` when no session has that id."""

    def lineage_root_of_ref(self, ref: int) -> str:
        """The first session of the lineage of session ``ref``."""

    def lineage_members(self, root: str) -> set[int]:
        """The refs of every session in the lineage that starts at session ``root``."""

    # -- messages of one session, oldest first ----------------------------------------------------------------

    def first_messages(self, ref: int, count: int) -> list[MessageRow]:
        """The first ``count`` messages of session ``ref``."""

    def last_messages(self, ref: int, count: int) -> list[MessageRow]:
        """The last ``count`` messages of session ``ref``."""

    def messages_before(self, ref: int, message_id: int, count: int) -> list[MessageRow]:
        """The last ``count`` messages of session ``ref`` before message ``message_id``."""

    def messages_from(self, ref: int, message_id: int, count: int) -> list[MessageRow]:
        """The first ``count`` messages of session ``ref`` from message ``message_id`` on (it included)."""

    def conversation_head(self, ref: int, before_id: int, count: int) -> list[MessageRow]:
        """The first ``count`` user or assistant messages with text of session ``ref`` before ``before_id``."""

    def conversation_tail(self, ref: int, after_id: int, count: int) -> list[MessageRow]:
        """The last ``count`` user or assistant messages with text of session ``ref`` after ``after_id``."""

    def count_messages(self, ref: int) -> int:
        """How many messages session ``ref`` holds."""

    def count_before(self, ref: int, message_id: int) -> int:
        """How many messages of session ``ref`` come before message ``message_id``."""

    def count_after(self, ref: int, message_id: int) -> int:
        """How many messages of session ``ref`` come after message ``message_id``."""

    def first_user_text(self, ref: int) -> str | None:
        """The content of the first user message with text of session ``ref``."""

    # -- single messages --------------------------------------------------------------------------------------

    def message_session(self, message_id: int) -> int | None:
        """The ref of the session holding message ``message_id`` (a signed 64-bit integer); ``None`` if none."""

    def message_content(self, message_id: int) -> str | None:
        """The content of message ``message_id``."""

    # -- the full-text index ----------------------------------------------------------------------------------

    def match_page(
        self,
        query: SearchQuery,
        *,
        roles: Sequence[str],
        scope: SessionFilter,
        ranked: bool,
        oldest_first: bool,
        excluded: set[int],
        beyond: int | None,
        size: int,
    ) -> list[Candidate]:
        """One keyset page of the messages matching ``query``, newest first (``oldest_first``: oldest).

        Up to ``size`` messages with one of ``roles``, in sessions ``scope`` lets be seen and not in
        ``excluded`` (session refs), with ids beyond ``beyond`` in the page's order (from the start when
        ``None``). With ``ranked`` (word index queries only) each carries the score of the rank function
        :meth:`rank_function` returned. Raises :class:`IndexRefusedError` when the index refuses the query.
        """

    def phrase_sample(self, match: str, sample: int) -> tuple[int, int]:
        """How many of the newest ``sample`` messages match ``match`` (one phrase as FTS5 text), and the id of
        the oldest of those (0 when none). Raises :class:`IndexRefusedError` when the index refuses it."""

    def newest_message_id(self) -> int | None:
        """The highest message id in the store; ``None`` when it holds no message."""

    def rank_function(self, kind: type[RankT]) -> RankT:
        """The rank function :meth:`match_page` uses, an instance of ``kind`` made on first use and kept: one
        per connection, so state set on it before a page is what that page's scores see."""
