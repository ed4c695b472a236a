"""Lineages (compression chains) as sets of session refs, for skipping a lineage in SQL.

Browse and discovery both report a lineage once and never the caller's own. Both exclude a lineage by the refs of
all its sessions (``NOT IN (SELECT value FROM json_each(?))``), so a search skips what it has already reported
without loading it; roots are cached for one search because every hit asks for one.
"""

from __future__ import annotations

from hermes_actors.errors import HermesError
from hermes_actors.store import Store
from hermes_actors.store.lineage import lineage_root
from hermes_actors.store.records import EndReason

__all__ = ["Lineages", "json_list"]

# Every session whose lineage root is :root: down through every session that ended by compression. UNION (not
# UNION ALL) stops at rows already seen, so a corrupt parent cycle ends.
_MEMBERS = f"""
WITH RECURSIVE down(id, ref) AS (
    SELECT id, ref FROM sessions WHERE id = :root
    UNION
    SELECT c.id, c.ref FROM down
    JOIN sessions AS p ON p.id = down.id AND p.end_reason = '{EndReason.COMPRESSION.value}'
    JOIN sessions AS c ON c.parent_session_id = p.id
)
SELECT ref FROM down LIMIT 100000"""


class Lineages:
    """Lineage roots and members, cached for one search."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._roots: dict[int, str] = {}

    def root(self, ref: int) -> str:
        """The root session id of the lineage of session ``ref``."""
        found = self._roots.get(ref)
        if found is None:
            sid = str(self._store._connection.execute("SELECT id FROM sessions WHERE ref = ?", (ref,)).get)
            found = self._roots[ref] = lineage_root(self._store, sid)
        return found

    def members(self, root: str) -> set[int]:
        """The refs of every session in the lineage rooted at ``root``."""
        return {int(ref) for (ref,) in self._store._connection.execute(_MEMBERS, {"root": root})}

    def root_of_session(self, session_id: str) -> str:
        """The root of ``session_id``'s lineage; the id itself when it is not stored (yet)."""
        try:
            return lineage_root(self._store, session_id)
        except HermesError:
            return session_id


def json_list(values: set[int]) -> str:
    """``values`` as a JSON array, sorted, for ``json_each``."""
    return "[" + ",".join(str(v) for v in sorted(values)) + "]"
