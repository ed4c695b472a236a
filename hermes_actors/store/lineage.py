"""Compression lineages: the sessions that carry one conversation across compressions.

A session continues its parent (``parent_session_id``) when the parent ended with ``compression``; a child of a
parent that ended for any other reason starts a conversation of its own. When a compressed session has several
children, the newest (by ``started_at``) continues it. Each walk is one recursive query that carries the ids it has
visited, stops at one it has seen and after :data:`MAX_DEPTH` steps, so a corrupt parent cycle cannot hang it.

The walks are written once; only how they carry the visited ids differs: a JSON array in SQLite, an array in
PostgreSQL.
"""

from __future__ import annotations

from typing import Protocol

from hermes_actors.errors import SessionNotFoundError
from hermes_actors.store.records import EndReason
from hermes_actors.store.sql import Dialect, SqlDb

__all__ = ["MAX_DEPTH", "Seamed", "chain_on", "lineage_chain", "lineage_root", "lineage_tip", "root_on", "tip_on"]

MAX_DEPTH = 10_000

_COMPRESSION = EndReason.COMPRESSION.value


class Seamed(Protocol):
    """Anything that holds the database seam: either store."""

    @property
    def sql(self) -> SqlDb:
        """The database."""
        ...


class _Walks:
    """The three statements of one dialect: root, tip and chain."""

    __slots__ = ("chain", "root", "tip")

    def __init__(self, start: str, add: str, seen: str) -> None:
        # ``start``: the visited ids holding ``id``; ``add``: ``{walk}.seen`` with ``{id}`` added; ``seen``: whether
        # ``{id}`` is among ``{walk}.seen``.
        up = f"""
up(id, parent, depth, seen) AS (
    SELECT id, parent_session_id, 0, {start} FROM sessions WHERE id = :id
    UNION ALL
    SELECT p.id, p.parent_session_id, up.depth + 1, {add.format(walk="up", id="p.id")}
    FROM up JOIN sessions AS p ON p.id = up.parent
    WHERE p.end_reason = '{_COMPRESSION}' AND up.depth < {MAX_DEPTH} AND NOT {seen.format(walk="up", id="p.id")}
)"""
        down = f"""
down(id, depth, seen) AS (
    SELECT id, 0, {start} FROM sessions WHERE id = :id
    UNION ALL
    SELECT c.id, down.depth + 1, {add.format(walk="down", id="c.id")}
    FROM down
    JOIN sessions AS s ON s.id = down.id AND s.end_reason = '{_COMPRESSION}'
    JOIN sessions AS c ON c.id = (
        SELECT n.id FROM sessions AS n WHERE n.parent_session_id = s.id ORDER BY n.started_at DESC, n.id DESC LIMIT 1
    )
    WHERE down.depth < {MAX_DEPTH} AND NOT {seen.format(walk="down", id="c.id")}
)"""
        self.root = f"WITH RECURSIVE {up} SELECT id FROM up ORDER BY depth DESC LIMIT 1"
        self.tip = f"WITH RECURSIVE {down} SELECT id FROM down ORDER BY depth DESC LIMIT 1"
        self.chain = f"""WITH RECURSIVE {up}, {down}
SELECT id, position FROM (
    SELECT id, -depth AS position FROM up
    UNION ALL
    SELECT id, depth AS position FROM down WHERE depth > 0
) AS walked
ORDER BY position"""


# A JSON array, not a joined string, in SQLite: exact for any id text.
_WALKS = {
    Dialect.SQLITE: _Walks(
        "json_array(id)",
        "json_insert({walk}.seen, '$[#]', {id})",
        "EXISTS (SELECT 1 FROM json_each({walk}.seen) WHERE value = {id})",
    ),
    Dialect.POSTGRES: _Walks("ARRAY[id]", "{walk}.seen || {id}", "{id} = ANY({walk}.seen)"),
}


def _not_found(session_id: str) -> SessionNotFoundError:
    return SessionNotFoundError(f"no session has id {session_id!r}; list them with 'hermesctl sessions list'")


def _single(db: SqlDb, sql: str, session_id: str) -> str:
    found = db.value(sql, {"id": session_id})
    if found is None:
        raise _not_found(session_id)
    return str(found)


def root_on(db: SqlDb, session_id: str) -> str:
    """The first session of ``session_id``'s lineage (itself when its parent did not end by compression);
    :class:`SessionNotFoundError` for an unknown id."""
    return _single(db, _WALKS[db.dialect].root, session_id)


def tip_on(db: SqlDb, session_id: str) -> str:
    """The newest session continuing ``session_id`` through compressions (itself when none does);
    :class:`SessionNotFoundError` for an unknown id."""
    return _single(db, _WALKS[db.dialect].tip, session_id)


def chain_on(db: SqlDb, session_id: str) -> list[str]:
    """The lineage through ``session_id``, root first and tip last; :class:`SessionNotFoundError` for an unknown
    id."""
    rows = db.execute(_WALKS[db.dialect].chain, {"id": session_id})
    chain = list(dict.fromkeys(str(sid) for sid, _ in rows))  # only a parent cycle repeats an id
    if not chain:
        raise _not_found(session_id)
    return chain


def lineage_root(store: Seamed, session_id: str) -> str:
    """:func:`root_on` the database of ``store``."""
    return root_on(store.sql, session_id)


def lineage_tip(store: Seamed, session_id: str) -> str:
    """:func:`tip_on` the database of ``store``."""
    return tip_on(store.sql, session_id)


def lineage_chain(store: Seamed, session_id: str) -> list[str]:
    """:func:`chain_on` the database of ``store``."""
    return chain_on(store.sql, session_id)
