"""What both stores are made of: their tables over one database seam, and the interface methods that delegate to
them (:class:`SqlStore`).

:class:`~hermes_actors.store.Store` (SQLite) and :class:`~hermes_actors.store.pg.PostgresStore` each build a
:class:`SqlStore` over their :class:`~hermes_actors.store.sql.SqlDb` and add what really differs: opening and
closing, full-text search, sizes and maintenance. Each table is an attribute (``store.sessions``,
``store.transcript``, ``store.timers`` ...); the methods of the store interface are one line each over them, those
of :class:`~hermes_actors.store.interface.SessionDirectory` in :class:`~.directory.Directory`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from types import TracebackType
from typing import Self

from hermes_actors.store import export, prune
from hermes_actors.store.approvals import Approvals
from hermes_actors.store.attachments import Attachments
from hermes_actors.store.cursors import KeyValues
from hermes_actors.store.dead_letters import DeadLetters
from hermes_actors.store.delegate import delegate
from hermes_actors.store.deliveries import Deliveries
from hermes_actors.store.directory import Directory
from hermes_actors.store.homes import HomeChannels
from hermes_actors.store.inbox import Inbox
from hermes_actors.store.jobs import Jobs
from hermes_actors.store.memories import Memories
from hermes_actors.store.outbox_queue import Outbox
from hermes_actors.store.records import (
    MessageRow,
    SessionRecord,
    StoreStats,
)
from hermes_actors.store.responses import Responses
from hermes_actors.store.sql import SqlDb
from hermes_actors.store.timers import Timers
from hermes_actors.store.transcript import MessageRows, Transcript

__all__ = ["SqlStore"]


class SqlStore(Directory, abc.ABC):
    """The tables of a store over ``sql``, and the store interface's methods over them (those of the session
    directory come from :class:`~.directory.Directory`)."""

    def __init__(self, sql: SqlDb, clock: Callable[[], float], *, rows: MessageRows, media_dir: Path | None) -> None:
        self.attachments = Attachments(sql, clock, media_dir)
        super().__init__(sql, clock, self.attachments)
        self.transcript = Transcript(sql, clock, rows)
        self.timers = Timers(sql, clock)
        self.kv = KeyValues(sql, clock)
        self.homes = HomeChannels(sql, clock)
        self.memories = Memories(sql, clock)
        self.inbox = Inbox(sql, clock)
        self.outbox = Outbox(sql, clock)
        self.responses = Responses(sql, clock)
        self.dead_letters = DeadLetters(sql, clock)
        self.deliveries = Deliveries(sql, clock)
        self.jobs = Jobs(sql, clock)
        self.approvals = Approvals(sql, clock)

    @abc.abstractmethod
    def close(self) -> None:
        """Close the store; it is unusable afterwards."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def transaction(self) -> AbstractContextManager[None]:
        """Return a context manager running its block in one transaction (a savepoint when nested).

        An exception leaving the block rolls it back and propagates. Inside it, the store's methods add no
        savepoints of their own: a method that raises may leave part of its writes, so let its exception leave
        the block rather than catch it inside.
        """
        return self.sql.transaction()

    @abc.abstractmethod
    def schema_version(self) -> int:
        """The database's schema version (0: no tables of ours)."""

    @abc.abstractmethod
    def _database_bytes(self) -> int:
        """The size of the database, for :meth:`stats`."""

    # -- transcripts (see Transcript) ------------------------------------------------------------------------------

    append_messages = delegate("transcript", Transcript.append)
    appending_messages = delegate("transcript", Transcript.appending)
    freeze_prefix = delegate("transcript", Transcript.freeze_prefix)
    insert_messages = delegate("transcript", Transcript.insert)
    add_counts = delegate("transcript", Transcript.add_counts)
    last_message_id = delegate("transcript", Transcript.last_id)
    load_transcript = delegate("transcript", Transcript.load)

    def stats(self) -> StoreStats:
        """Return session and message totals, per-source counts and the database's size."""
        return self.transcript.stats(database_bytes=self._database_bytes(), schema_version=self.schema_version())

    # -- pruning and export (see prune and export) ---------------------------------------------------------------

    def prune_sessions(
        self,
        filter: prune.PruneFilter,
        *,
        dry_run: bool = False,
        vacuum: bool = False,
        progress: Callable[[int, int], None] | None = None,
        now: float | None = None,
        batch_size: int = prune.DEFAULT_BATCH_SIZE,
    ) -> prune.PruneResult:
        """Delete the ended sessions ``filter`` selects, oldest first (see :func:`.prune.prune_sessions`)."""
        return prune.prune_sessions(
            self, filter, dry_run=dry_run, vacuum=vacuum, progress=progress, now=now, batch_size=batch_size
        )

    def auto_prune(
        self,
        *,
        enabled: bool,
        retention_days: float = 90,
        vacuum_after_prune: bool = True,
        min_interval_hours: float = 24,
        now: float,
    ) -> prune.PruneResult | None:
        """Prune ended sessions past ``retention_days`` unless disabled or recently done (see
        :func:`.prune.auto_prune`)."""
        return prune.auto_prune(
            self,
            enabled=enabled,
            retention_days=retention_days,
            vacuum_after_prune=vacuum_after_prune,
            min_interval_hours=min_interval_hours,
            now=now,
        )

    def count_exports(self, *, source: str | None = None, session_id: str | None = None) -> int:
        """Return how many sessions :meth:`iter_exports` yields."""
        return export.count_exports(self, source=source, session_id=session_id)

    def iter_exports(
        self, *, source: str | None = None, session_id: str | None = None
    ) -> Iterator[export.SessionExport]:
        """Yield sessions with their transcripts and attachments (see :func:`.export.iter_exports`)."""
        return export.iter_exports(self, source=source, session_id=session_id)

    def insert_session_export(
        self, record: SessionRecord, messages: Sequence[tuple[MessageRow, Sequence[export.AttachmentRow]]]
    ) -> None:
        """Insert a session with its messages and their files as they are (an import; see
        :func:`.export.insert_session_export`)."""
        export.insert_session_export(self, record, messages)

    def child_session_ids(self, session_id: str) -> list[str]:
        """Return the sessions whose parent is ``session_id``."""
        return export.child_session_ids(self, session_id)
