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
_BATCH = 1000  # rows per INSERT: 12 parameters each, well under PostgreSQL's 65,535
# A counted append's columns, each sent as one array (the statement's text is the same for any number of rows):
# name and element type, in the order of MESSAGE_INSERT's columns after session_ref.
_ARRAYS = (
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
_FENCED_ARRAYS = tuple(f":msg_{name}" for name, _ in _ARRAYS)


def _values(ref: int, row: MessageRow) -> tuple[Any, ...]:
    """The parameters of one message row (its search columns computed here)."""
    role, content, *rest = row
    indexed = index_text(content)
    return (ref, role, to_db(content), *rest, indexed.words, indexed.cjk, indexed.n_tokens)


def _columns(rows: Sequence[MessageRow]) -> list[list[Any]]:
    """The values of ``rows`` as one list per column of :data:`_ARRAYS`."""
    return [list(column) for column in zip(*(_values(0, row)[1:] for row in rows), strict=True)]


def _counted_insert(counted: str, arrays: Sequence[str]) -> str:
    """An ``INSERT`` of message rows into the session that the ``WITH`` query ``counted`` returned (its ``ref``; no
    row, no insert), the rows given as one array per column (``arrays``: their placeholders, in the order of
    :data:`_ARRAYS`), in their order (ids are drawn in it); returning their ids."""
    unnested = ", ".join(f"{placeholder}::{kind}[]" for placeholder, (_, kind) in zip(arrays, _ARRAYS, strict=True))
    names = ", ".join(name for name, _ in _ARRAYS)
    return (
        f"{MESSAGE_INSERT}, words, cjk, n_tokens) SELECT c.ref, {', '.join(f'v.{name}' for name, _ in _ARRAYS)} "
        f"FROM {counted} c, unnest({unnested}) WITH ORDINALITY AS v({names}, n) ORDER BY v.n RETURNING id"
    )


_APPEND = _counted_insert("counted", ["?"] * len(_ARRAYS))


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
        query whose ``ref`` the insert selects (no row, no insert: ``None``), each column of the rows one array."""
        if not rows:
            return counted_then_inserted(self._db, self, counts, params, rows)
        found = self._db.execute(f"WITH counted AS ({counts}) {_APPEND}", (*params, *_columns(rows)))
        if not found:
            return None
        return sorted(int(i) for (i,) in found)

    def fenced_append(self, name: str, counts: str, rows: Sequence[MessageRow]) -> tuple[str, dict[str, Any]]:
        """:meth:`append` as a fence's ``WITH`` queries (``{name}_counted``, the counters' update ``counts``, whose
        named parameters the caller gives, and ``name``, the insert) and the rows' parameters, named ``msg_*``."""
        query = f"{name}_counted AS ({counts}), {name} AS ({_counted_insert(f'{name}_counted', _FENCED_ARRAYS)})"
        return query, {f"msg_{column}": values for (column, _), values in zip(_ARRAYS, _columns(rows), strict=True)}

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
