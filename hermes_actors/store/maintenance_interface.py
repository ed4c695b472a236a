"""The store's :class:`Maintenance` protocol: opening, transactions, health checks, backup, compaction, pruning and
export, the part of :class:`~hermes_actors.store.interface.StoreInterface` an operator's commands use."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol, Self, runtime_checkable

from hermes_actors.store.records import MessageRow, OptimizeResult, SessionRecord

if TYPE_CHECKING:
    from pathlib import Path
    from types import TracebackType

    from hermes_actors.store.backup import BackupResult
    from hermes_actors.store.export import AttachmentRow, SessionExport
    from hermes_actors.store.prune import PruneFilter, PruneResult

__all__ = ["Maintenance"]


@runtime_checkable
class Maintenance(Protocol):
    """Opening, transactions, health checks, compaction, pruning and export."""

    @property
    def path(self) -> str:
        """Where the database lives."""
        ...

    def close(self) -> None:
        """Close the store."""
        ...

    def __enter__(self) -> Self:
        """The store itself, closed when the block ends."""
        ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Close the store."""
        ...

    def transaction(self) -> AbstractContextManager[None]:
        """A block run in one transaction (nested: a savepoint); the store's methods join it."""
        ...

    def schema_version(self) -> int:
        """The database's schema version."""
        ...

    def check_writable(self) -> None:
        """Raise :class:`StoreUnwritableError` unless the database takes a write now."""
        ...

    def check_integrity(self, *, progress: Callable[[str], None] | None = None) -> list[str]:
        """Integrity and foreign key problems, one line each; ``progress`` hears each phase as it starts."""
        ...

    def check_search_indexes(self, *, progress: Callable[[str], None] | None = None) -> list[str]:
        """Stale full-text indexes, one line each; ``progress`` hears each phase as it starts."""
        ...

    def optimize(self, *, progress: Callable[[str], None] | None = None) -> OptimizeResult:
        """Rebuild the search indexes, analyze, vacuum, checkpoint (:class:`StoreBusyError` names the step);
        ``progress`` hears each step as it starts."""
        ...

    def backup(
        self,
        dest: str | Path,
        *,
        overwrite: bool = False,
        progress: Callable[[int, int], None] | None = None,
        pages_per_step: int = ...,
        pause_s: float = ...,
    ) -> BackupResult:
        """Copy the database as of the call into the self-contained file ``dest`` while others keep writing,
        checked with quick_check; ``progress`` hears pages copied and pages in all after each step."""
        ...

    def free_bytes(self) -> int:
        """Bytes of free pages in the file."""
        ...

    def prune_sessions(
        self,
        filter: PruneFilter,
        *,
        dry_run: bool = False,
        vacuum: bool = False,
        progress: Callable[[int, int], None] | None = None,
        now: float | None = None,
        batch_size: int = ...,
    ) -> PruneResult:
        """Delete the ended sessions ``filter`` selects, oldest first, ``batch_size`` per transaction."""
        ...

    def auto_prune(
        self,
        *,
        enabled: bool,
        retention_days: float = 90,
        vacuum_after_prune: bool = True,
        min_interval_hours: float = 24,
        now: float,
    ) -> PruneResult | None:
        """Prune by retention unless disabled or the last run is recent (``None``: nothing was done)."""
        ...

    def count_exports(self, *, source: str | None = None, session_id: str | None = None) -> int:
        """How many sessions :meth:`iter_exports` yields."""
        ...

    def iter_exports(self, *, source: str | None = None, session_id: str | None = None) -> Iterator[SessionExport]:
        """Sessions with their transcripts and attachments, for ``sessions export``."""
        ...

    def insert_session_export(
        self, record: SessionRecord, messages: Sequence[tuple[MessageRow, Sequence[AttachmentRow]]]
    ) -> None:
        """Insert a session with its messages and their files as they are, for ``sessions import``."""
        ...

    def child_session_ids(self, session_id: str) -> list[str]:
        """The sessions whose parent is ``session_id``."""
        ...
