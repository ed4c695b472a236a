"""The reads of the cluster's reset scan: live sessions of some shards whose reset can be due, and the background
processes that hold a reset off (``background_processes``, schema version 5).

:meth:`ResetScan.candidates` narrows by last activity first (the ``sessions_last_active`` index: a session active
after the caller's cutoff cannot be due under any policy), then by shard, computed in SQL exactly as
:func:`~hermes_actors.store.pg.shards.shard_of` computes it in Python (the first 8 bytes of the id's SHA-256, read
as an unsigned big-endian integer, modulo the shard count), so a host reads only its own shards' rows.

A shard host records there the background process its agent reports for a session (:meth:`ResetScan.hold`), so
whichever host holds the session's shard later, and finds its reset due, knows of it too; the reporter removes it
when its agent says the process ended (:meth:`ResetScan.release`).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from hermes_actors.store.records import SessionRecord
from hermes_actors.store.sessions import SESSION_COLUMNS, session_record
from hermes_actors.store.sql import SqlDb

__all__ = ["SHARD_SQL", "BackgroundHold", "ResetScan"]

SHARD_SQL = (
    "mod(('x' || left(encode(sha256(convert_to({id}, 'UTF8')), 'hex'), 16))::bit(64)::bigint::numeric "
    "+ CASE WHEN ('x' || left(encode(sha256(convert_to({id}, 'UTF8')), 'hex'), 16))::bit(64)::bigint < 0 "
    "THEN 18446744073709551616 ELSE 0 END, :shards)::integer"
)
"""``shard_of`` in SQL, over the text column or expression put in for ``{id}`` (the shard count: ``:shards``)."""


class BackgroundHold(msgspec.Struct, frozen=True, kw_only=True):
    """A recorded background process: its session, when it started (unix seconds), the host owner that reported it."""

    session_id: str
    started_at: float
    reporter: str


class ResetScan:
    """The reset scan's reads and the background processes recorded for it (see the module docstring)."""

    __slots__ = ("_db",)

    def __init__(self, db: SqlDb) -> None:
        self._db = db

    def candidates(self, shards: Sequence[int], shard_count: int, active_before: float) -> list[SessionRecord]:
        """The live sessions of ``shards`` (of ``shard_count``) last active at or before ``active_before``."""
        if not shards:
            return []
        rows = self._db.execute(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE ended_at IS NULL AND last_active_at <= :before "
            f"AND {SHARD_SQL.format(id='id')} = ANY(:wanted)",
            {"before": active_before, "shards": shard_count, "wanted": sorted(shards)},
        )
        return [session_record(row) for row in rows]

    def hold(self, session_id: str, started_at: float, reporter: str) -> None:
        """Record that ``reporter``'s agent runs a background process of ``session_id`` since ``started_at``."""
        self._db.execute(
            "INSERT INTO background_processes (session_id, started_at, reporter) SELECT id, ?, ? FROM sessions "
            "WHERE id = ? ON CONFLICT (session_id) DO UPDATE SET started_at = excluded.started_at, "
            "reporter = excluded.reporter",
            (started_at, reporter, session_id),
        )

    def release(self, session_id: str, reporter: str) -> bool:
        """Forget ``reporter``'s record of the background process of ``session_id``; whether there was one."""
        return (
            self._db.count(
                "DELETE FROM background_processes WHERE session_id = ? AND reporter = ?", (session_id, reporter)
            )
            > 0
        )

    def holds(self, session_ids: Sequence[str]) -> dict[str, BackgroundHold]:
        """The recorded background processes of ``session_ids``, by session id."""
        if not session_ids:
            return {}
        rows = self._db.execute(
            "SELECT session_id, started_at, reporter FROM background_processes WHERE session_id = ANY(?)",
            (list(session_ids),),
        )
        return {str(s): BackgroundHold(session_id=str(s), started_at=float(t), reporter=str(r)) for s, t, r in rows}
