"""Message rows on PostgreSQL: what differs from SQLite's (:class:`~hermes_actors.store.transcript.MessageRows`).

Each message is written with its search columns (:func:`~hermes_actors.store.pg.text.index_text`), computed here
in Python: the ``words`` and ``cjk`` tsvectors and the token count. Its content is stored with NUL as a stand-in
(:func:`~hermes_actors.store.pg.text.to_db`) and turned back on every read. A turn's messages go in with the update
of their session's counters, in one statement (:meth:`PgMessageRows.append`): one round trip where two were.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hermes_actors.store.pg.text import from_db, index_text, to_db
from hermes_actors.store.records import MessageRow
from hermes_actors.store.sql import SqlDb
from hermes_actors.store.transcript import MESSAGE_INSERT, counted_then_inserted

__all__ = ["PgMessageRows"]

_INSERT = f"{MESSAGE_INSERT}, words, cjk, n_tokens) VALUES "
_ROW = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?::tsvector, ?::tsvector, ?)"
# A row of the VALUES list a counted append selects from: its place, then its columns typed (a VALUES list in a
# SELECT is not typed by the table it fills).
_TYPED_ROW = (
    "({n}, ?::text, ?::text, ?::text, ?::text, ?::text, ?::bigint, ?::float8, ?::text, "
    "?::tsvector, ?::tsvector, ?::int)"
)
_TYPED_NAMES = (
    "n, role, content, tool_calls, tool_name, tool_call_id, token_count, created_at, message, words, cjk, tokens"
)
_BATCH = 1000  # rows per INSERT: 12 parameters each, well under PostgreSQL's 65,535


def _values(ref: int, row: MessageRow) -> tuple[Any, ...]:
    """The parameters of one message row (its search columns computed here)."""
    role, content, *rest = row
    indexed = index_text(content)
    return (ref, role, to_db(content), *rest, indexed.words, indexed.cjk, indexed.n_tokens)


class PgMessageRows:
    """PostgreSQL's message rows: with their search columns, many per statement."""

    __slots__ = ("_db",)

    def __init__(self, db: SqlDb) -> None:
        self._db = db

    @property
    def read_content(self) -> Callable[[Any], str | None]:
        """:func:`~hermes_actors.store.pg.text.from_db`."""
        return from_db

    def append(self, counts: str, params: Sequence[Any], rows: Sequence[MessageRow]) -> list[int] | None:
        """The counters' update (``counts``) and the rows' insert in one statement: the update as a ``WITH``
        query whose ``ref`` the insert selects (no row, no insert: ``None``), the rows in their order (ids are drawn
        in it)."""
        if not rows or len(rows) > _BATCH:
            return counted_then_inserted(self._db, self, counts, params, rows)
        values = [value for row in rows for value in _values(0, row)[1:]]
        listed = ", ".join(_TYPED_ROW.format(n=n) for n in range(len(rows)))
        found = self._db.execute(
            f"WITH counted AS ({counts}) {MESSAGE_INSERT}, words, cjk, n_tokens) "
            f"SELECT counted.ref, v.role, v.content, v.tool_calls, v.tool_name, v.tool_call_id, v.token_count, "
            f"v.created_at, v.message, v.words, v.cjk, v.tokens FROM counted, (VALUES {listed}) AS v({_TYPED_NAMES}) "
            "ORDER BY v.n RETURNING id",
            (*params, *values),
        )
        if not found:
            return None
        return sorted(int(i) for (i,) in found)

    def insert(self, ref: int, rows: Sequence[MessageRow]) -> list[int]:
        """Insert ``rows``, :data:`_BATCH` per statement; their ids, in order (identity values are drawn in the
        order of the VALUES list)."""
        ids: list[int] = []
        for start in range(0, len(rows), _BATCH):
            batch = rows[start : start + _BATCH]
            values = [value for row in batch for value in _values(ref, row)]
            found = self._db.execute(_INSERT + ", ".join([_ROW] * len(batch)) + " RETURNING id", values)
            ids.extend(sorted(int(i) for (i,) in found))
        return ids
