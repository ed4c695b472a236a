"""Message rows on PostgreSQL: what differs from SQLite's (:class:`~hermes_actors.store.transcript.MessageRows`).

Each message is written with its search columns (:func:`~hermes_actors.store.pg.text.index_text`), computed here
in Python: the ``words`` and ``cjk`` tsvectors and the token count. Its content is stored with NUL as a stand-in
(:func:`~hermes_actors.store.pg.text.to_db`) and turned back on every read. A turn's messages go in with the update
of their session's counters, in one statement (:meth:`PgMessageRows.append`): one round trip where two were.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from hermes_actors.store.pg.text import from_db, index_text, to_db
from hermes_actors.store.records import MessageRow
from hermes_actors.store.sql import SqlDb
from hermes_actors.store.transcript import MESSAGE_INSERT, counted_then_inserted

__all__ = ["PgMessageRows"]

_INSERT = f"{MESSAGE_INSERT}, words, cjk, n_tokens) VALUES "
_ROW = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?::tsvector, ?::tsvector, ?)"
_BATCH = 1000  # rows per INSERT: 12 parameters each, well under PostgreSQL's 65,535
# A counted append's columns after session_ref, in MESSAGE_INSERT's order, with their types: a VALUES list in a
# SELECT is not typed by the table it fills. Each value is its own parameter: psycopg dumps a scalar in C, and a
# list (one array per column) cost 25 times as much (66 µs against 2.8 µs for a turn's two rows).
_COLUMNS = (
    ("role", "text"),
    ("content", "text"),
    ("tool_calls", "text"),
    ("tool_name", "text"),
    ("tool_call_id", "text"),
    ("token_count", "bigint"),
    ("created_at", "float8"),
    ("message", "text"),
    ("words", "tsvector"),
    ("cjk", "tsvector"),
    ("tokens", "int"),
)
_NAMES = ", ".join(name for name, _ in _COLUMNS)


def _values(ref: int, row: MessageRow) -> tuple[Any, ...]:
    """The parameters of one message row (its search columns computed here)."""
    role, content, *rest = row
    indexed = index_text(content)
    return (ref, role, to_db(content), *rest, indexed.words, indexed.cjk, indexed.n_tokens)


@functools.lru_cache(maxsize=_BATCH)
def _row_names(n: int) -> tuple[str, ...]:
    """The parameter names of the ``n``-th row of a fenced append (``msg{n}_{column}``), built once."""
    return tuple(f"msg{n}_{column}" for column, _ in _COLUMNS)


@functools.lru_cache(maxsize=32)  # a turn has a few messages: a few texts, each built once
def _counted_insert(counted: str, rows: int, named: bool) -> str:
    """An ``INSERT`` of ``rows`` message rows into the session the ``WITH`` query ``counted`` returned (its ``ref``;
    no row, no insert), from a typed ``VALUES`` list, in their order (ids are drawn in it); returning their ids. Its
    parameters are ``?`` or (``named``) ``:msg{n}_{column}``."""
    listed = ", ".join(
        f"({n}, " + ", ".join(f"{f':msg{n}_{name}' if named else '?'}::{kind}" for name, kind in _COLUMNS) + ")"
        for n in range(rows)
    )
    return (
        f"{MESSAGE_INSERT}, words, cjk, n_tokens) SELECT c.ref, {', '.join(f'v.{name}' for name, _ in _COLUMNS)} "
        f"FROM {counted} c, (VALUES {listed}) AS v(n, {_NAMES}) ORDER BY v.n RETURNING id"
    )


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
        query whose ``ref`` the insert selects (no row, no insert: ``None``)."""
        if not rows or len(rows) > _BATCH:
            return counted_then_inserted(self._db, self, counts, params, rows)
        values = [value for row in rows for value in _values(0, row)[1:]]
        insert = _counted_insert("counted", len(rows), named=False)
        found = self._db.execute(f"WITH counted AS ({counts}) {insert}", (*params, *values))
        if not found:
            return None
        return sorted(int(i) for (i,) in found)

    def fenced_append(self, name: str, counts: str, rows: Sequence[MessageRow]) -> tuple[str, dict[str, Any]]:
        """:meth:`append` as a fence's ``WITH`` queries (``{name}_counted``, the counters' update ``counts``, whose
        named parameters the caller gives, and ``name``, the insert) and the rows' parameters, named
        ``msg{n}_{column}``."""
        insert = _counted_insert(f"{name}_counted", len(rows), named=True)
        params: dict[str, Any] = {}
        for n, row in enumerate(rows):
            params.update(zip(_row_names(n), _values(0, row)[1:], strict=True))
        return f"{name}_counted AS ({counts}), {name} AS ({insert})", params

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
