"""Lineages (compression chains) as sets of session refs, so a search can skip a whole lineage.

Browse and discovery both report a lineage once and never the caller's own. Both hand the store the refs of
every session to skip (:meth:`~hermes_actors.store.search_reads.SearchReads.match_page` and ``lineage_tips``
leave them out in their own query), so a search skips what it has already reported without loading it; roots
are cached for one search because every hit asks for one.
"""

from __future__ import annotations

from hermes_actors.store.search_reads import SearchReads

__all__ = ["Lineages"]


class Lineages:
    """Lineage roots and members, cached for one search."""

    def __init__(self, reads: SearchReads) -> None:
        self._reads = reads
        self._roots: dict[int, str] = {}

    def root(self, ref: int) -> str:
        """The root session id of the lineage of session ``ref``."""
        found = self._roots.get(ref)
        if found is None:
            found = self._roots[ref] = self._reads.lineage_root_of_ref(ref)
        return found

    def members(self, root: str) -> set[int]:
        """The refs of every session in the lineage rooted at ``root``."""
        return self._reads.lineage_members(root)

    def root_of_session(self, session_id: str) -> str:
        """The root of ``session_id``'s lineage; the id itself when it is not stored (yet)."""
        root = self._reads.lineage_root(session_id)
        return session_id if root is None else root
