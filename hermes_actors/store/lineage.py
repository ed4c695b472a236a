"""Compression lineages: the sessions that carry one conversation across compressions.

A session continues its parent (``parent_session_id``) when the parent ended with ``compression``; a child of a
parent that ended for any other reason starts a conversation of its own. When a compressed session has several
children, the newest (by ``started_at``) continues it. Each helper is one recursive query that stops at a
session it has already visited and after :data:`MAX_DEPTH` steps, so a corrupt parent cycle cannot hang it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import apsw

from hermes_actors.errors import SessionNotFoundError
from hermes_actors.store.records import EndReason

if TYPE_CHECKING:
    from hermes_actors.store.store import Store

__all__ = ["MAX_DEPTH", "chain_on", "lineage_chain", "lineage_root", "lineage_tip"]

MAX_DEPTH = 10_000

# ``seen`` is a JSON array of the ids visited so far: exact for any id text, unlike a joined string.
_UP = f"""
up(id, parent, depth, seen) AS (
    SELECT id, parent_session_id, 0, json_array(id) FROM sessions WHERE id = :id
    UNION ALL
    SELECT p.id, p.parent_session_id, up.depth + 1, json_insert(up.seen, '$[#]', p.id)
    FROM up JOIN sessions AS p ON p.id = up.parent
    WHERE p.end_reason = '{EndReason.COMPRESSION.value}' AND up.depth < {MAX_DEPTH}
        AND NOT EXISTS (SELECT 1 FROM json_each(up.seen) WHERE value = p.id)
)"""

_DOWN = f"""
down(id, depth, seen) AS (
    SELECT id, 0, json_array(id) FROM sessions WHERE id = :id
    UNION ALL
    SELECT c.id, down.depth + 1, json_insert(down.seen, '$[#]', c.id)
    FROM down
    JOIN sessions AS s ON s.id = down.id AND s.end_reason = '{EndReason.COMPRESSION.value}'
    JOIN sessions AS c ON c.id = (
        SELECT n.id FROM sessions AS n WHERE n.parent_session_id = s.id ORDER BY n.started_at DESC, n.id DESC LIMIT 1
    )
    WHERE down.depth < {MAX_DEPTH} AND NOT EXISTS (SELECT 1 FROM json_each(down.seen) WHERE value = c.id)
)"""

_ROOT = f"WITH RECURSIVE {_UP} SELECT id FROM up ORDER BY depth DESC LIMIT 1"
_TIP = f"WITH RECURSIVE {_DOWN} SELECT id FROM down ORDER BY depth DESC LIMIT 1"
_CHAIN = f"""WITH RECURSIVE {_UP}, {_DOWN}
SELECT id, -depth AS position FROM up
UNION ALL
SELECT id, depth AS position FROM down WHERE depth > 0
ORDER BY position"""


def _not_found(session_id: str) -> SessionNotFoundError:
    return SessionNotFoundError(f"no session has id {session_id!r}; list them with 'hermesctl sessions list'")


def _single(store: Store, sql: str, session_id: str) -> str:
    found = store._connection.execute(sql, {"id": session_id}).get
    if found is None:
        raise _not_found(session_id)
    return str(found)


def lineage_root(store: Store, session_id: str) -> str:
    """Return the first session of ``session_id``'s lineage (itself when its parent did not end by compression).

    Raises :class:`SessionNotFoundError` for an unknown id.
    """
    return _single(store, _ROOT, session_id)


def lineage_tip(store: Store, session_id: str) -> str:
    """Return the newest session continuing ``session_id`` through compressions (itself when none does).

    Raises :class:`SessionNotFoundError` for an unknown id.
    """
    return _single(store, _TIP, session_id)


def lineage_chain(store: Store, session_id: str) -> list[str]:
    """Return the lineage through ``session_id``, root first and tip last.

    Raises :class:`SessionNotFoundError` for an unknown id.
    """
    return chain_on(store._connection, session_id)


def chain_on(connection: apsw.Connection, session_id: str) -> list[str]:
    """:func:`lineage_chain` on a connection (for the store's own modules)."""
    rows = [str(sid) for sid, _ in connection.execute(_CHAIN, {"id": session_id})]
    chain = list(dict.fromkeys(rows))  # only a parent cycle repeats an id
    if not chain:
        raise _not_found(session_id)
    return chain
