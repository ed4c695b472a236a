"""Copying a live database into one self-contained file, and checking the copy.

:func:`backup_database` uses SQLite's online backup API over a read transaction it opens first: every step copies
pages of that one snapshot, so the copy is consistent however much a running hermesd writes meanwhile, and it
never restarts (a backup step outside a transaction starts over whenever another process commits). In WAL mode a
reader never blocks the writer, so the daemon keeps committing throughout; the pause between steps only leaves it
disk and CPU. The price is a WAL that cannot be checkpointed past the snapshot until the copy ends.

The copy is written next to its destination as ``DEST.partial`` (0600) and renamed over ``DEST`` only once it is
complete, switched to rollback-journal mode (one file, never a ``-wal`` or ``-shm``) and checked with
``PRAGMA quick_check``: copying ``DEST`` alone is enough. hermesd switches a restored copy back to WAL as it opens
it; putting a copy back is :mod:`.restore`.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import apsw
import msgspec

from hermes_actors.errors import StoreError
from hermes_actors.store.connection import PRIVATE_FILE, fault_of, open_connection
from hermes_actors.store.migrations import schema_version

__all__ = [
    "DEFAULT_PAGES_PER_STEP",
    "DEFAULT_PAUSE_S",
    "BackupResult",
    "DatabaseSummary",
    "PageProgress",
    "backup_database",
    "check_destination",
    "file_error",
    "quick_check",
    "summarise",
    "write_copy",
]

PageProgress = Callable[[int, int], None]
"""Called after each step with the pages copied so far and the pages in all."""

DEFAULT_PAGES_PER_STEP = 1024
"""4 MB at the default 4 KB page: a step takes milliseconds, so the pause between steps comes often."""

DEFAULT_PAUSE_S = 0.002

_SIDE_FILES = ("", "-wal", "-shm", "-journal")


class DatabaseSummary(msgspec.Struct, frozen=True, kw_only=True):
    """A database file: where it is, its schema version, and its sessions and messages."""

    path: str
    schema_version: int
    sessions: int
    messages: int


class BackupResult(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`backup_database` wrote: the copy's summary, its size, and ``problems`` (one line each) that
    ``PRAGMA quick_check`` found in it (none: the copy is sound)."""

    copy: DatabaseSummary
    pages: int
    bytes: int
    problems: list[str]
    media_paths: list[str]  # the attachment files the copy names, relative to the media directory
    seconds: float


def file_error(path: Path, action: str, exc: apsw.Error | OSError) -> StoreError:
    """``cannot <action> <path>: <reason>``, with the fault (full, read-only, busy) an apsw error amounts to."""
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    fault = fault_of(exc) if isinstance(exc, apsw.Error) else None
    return StoreError(f"cannot {action} {path}: {reason}", fault=fault)


def check_destination(dest: Path, *, overwrite: bool) -> None:
    """Raise :class:`StoreError` naming the fix unless a backup may be written to ``dest``."""
    if dest.is_dir():
        raise StoreError(f"{dest} is a directory; name the backup file inside it, e.g. {dest / 'state.db'}")
    if dest.exists() and not overwrite:
        raise StoreError(f"{dest} already exists; choose another name, or pass --force to replace it")
    if not dest.parent.is_dir():
        raise StoreError(f"{dest.parent} does not exist; create that directory first")


@contextlib.contextmanager
def _snapshot(db: apsw.Connection) -> Iterator[None]:
    """Hold one read transaction around the block (unless the caller holds one), so every backup step reads the
    same snapshot."""
    if db.in_transaction:
        yield
        return
    db.execute("BEGIN")
    try:
        _ = db.execute("SELECT count(*) FROM sqlite_schema").get  # the snapshot starts at the first read
        yield
    finally:
        db.execute("COMMIT")


def _copy_pages(
    source: apsw.Connection, target: apsw.Connection, pages_per_step: int, pause_s: float, progress: PageProgress
) -> int:
    with _snapshot(source):
        copy = target.backup("main", source, "main")
        try:
            while not copy.step(pages_per_step):
                progress(copy.page_count - copy.remaining, copy.page_count)
                time.sleep(pause_s)
            progress(copy.page_count, copy.page_count)
            return int(copy.page_count)
        finally:
            copy.finish()


def summarise(db: apsw.Connection, path: Path) -> DatabaseSummary:
    """The summary of the database open on ``db``, under the name ``path``."""
    return DatabaseSummary(
        path=str(path),
        schema_version=schema_version(db),
        sessions=int(db.execute("SELECT count(*) FROM sessions").get),
        messages=int(db.execute("SELECT count(*) FROM messages").get),
    )


def quick_check(db: apsw.Connection) -> list[str]:
    """SQLite's ``quick_check``: one line per problem (none: sound). It skips the index-content comparison that
    makes ``integrity_check`` slow, and still reads every page."""
    return [str(row[0]) for row in db.execute("PRAGMA quick_check") if row[0] != "ok"]


def _media_paths(db: apsw.Connection) -> list[str]:
    """The attachment files a database names inside its media directory (stored relative to it)."""
    rows = db.execute("SELECT DISTINCT path FROM attachments WHERE path IS NOT NULL ORDER BY path")
    return [str(path) for (path,) in rows if not os.path.isabs(str(path))]


def write_copy(
    source: apsw.Connection, partial: Path, pages_per_step: int, pause_s: float, progress: PageProgress
) -> int:
    """Copy ``source`` into the new file ``partial`` and make it a single rollback-journal file; its page count."""
    for suffix in _SIDE_FILES:  # left by an interrupted run
        Path(f"{partial}{suffix}").unlink(missing_ok=True)
    os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))
    target = apsw.Connection(str(partial))
    try:
        pages = _copy_pages(source, target, pages_per_step, pause_s, progress)
    finally:
        target.close()
    # The copied header says WAL; reopened, the switch rewrites it, and a rollback-journal file needs no -wal.
    reopened = apsw.Connection(str(partial))
    try:
        reopened.execute("PRAGMA journal_mode = DELETE")
    finally:
        reopened.close()
    return pages


def backup_database(
    source: apsw.Connection,
    dest: str | Path,
    *,
    overwrite: bool = False,
    pages_per_step: int = DEFAULT_PAGES_PER_STEP,
    pause_s: float = DEFAULT_PAUSE_S,
    progress: PageProgress | None = None,
) -> BackupResult:
    """Copy the database of ``source`` into the file ``dest`` (see the module's docstring); ``progress`` hears of
    each step. Raises :class:`StoreError` naming the fix for a directory, an existing file (unless
    ``overwrite``) or a missing parent directory; a failed copy leaves ``dest`` as it was."""
    dest = Path(dest)
    check_destination(dest, overwrite=overwrite)
    if dest.resolve() in {Path(f"{source.filename}{suffix}").resolve() for suffix in ("", "-wal", "-shm")}:
        raise StoreError(f"{dest} is the database being backed up; name a file outside the home")
    partial = dest.with_name(dest.name + ".partial")
    started = time.monotonic()
    try:
        pages = write_copy(source, partial, max(1, pages_per_step), pause_s, progress or (lambda done, total: None))
        checker = open_connection(partial, readonly=True)
        try:
            summary, problems, media = summarise(checker, dest), quick_check(checker), _media_paths(checker)
        finally:
            checker.close()
        os.replace(partial, dest)
    except (apsw.Error, OSError) as exc:
        partial.unlink(missing_ok=True)
        raise file_error(dest, "write the backup", exc) from exc
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return BackupResult(
        copy=summary,
        pages=pages,
        bytes=dest.stat().st_size,
        problems=problems,
        media_paths=media,
        seconds=time.monotonic() - started,
    )
