"""Copying a live database into one self-contained file, checking a copy, and putting a copy back in place.

:func:`backup_database` uses SQLite's online backup API over a read transaction it opens first: every step copies
pages of that one snapshot, so the copy is consistent however much a running hermesd writes meanwhile, and it
never restarts (a backup step outside a transaction starts over whenever another process commits). In WAL mode a
reader never blocks the writer, so the daemon keeps committing throughout; the pause between steps only leaves it
disk and CPU. The price is a WAL that cannot be checkpointed past the snapshot until the copy ends.

The copy is written next to its destination as ``DEST.partial`` (0600) and renamed over ``DEST`` only once it is
complete, switched to rollback-journal mode (one file, never a ``-wal`` or ``-shm``) and checked with
``PRAGMA quick_check``: copying ``DEST`` alone is enough. hermesd switches a restored copy back to WAL as it opens
it. :func:`inspect_database` tells whether a file is one of our databases this build can open;
:func:`restore_database` copies one over a home's database, keeping the old one aside under a timestamped name.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import apsw
import msgspec

from hermes_actors.errors import SchemaVersionError, StoreError
from hermes_actors.store.connection import PRIVATE_FILE, fault_of, open_connection
from hermes_actors.store.migrations import SCHEMA_VERSION, schema_version

__all__ = [
    "DEFAULT_PAGES_PER_STEP",
    "DEFAULT_PAUSE_S",
    "BackupResult",
    "DatabaseSummary",
    "PageProgress",
    "RestoreResult",
    "backup_database",
    "check_destination",
    "inspect_database",
    "restore_database",
]

PageProgress = Callable[[int, int], None]
"""Called after each step with the pages copied so far and the pages in all."""

DEFAULT_PAGES_PER_STEP = 1024
"""4 MB at the default 4 KB page: a step takes milliseconds, so the pause between steps comes often."""

DEFAULT_PAUSE_S = 0.002

_OUR_TABLES = frozenset({"sessions", "messages", "meta"})
_SIDE_FILES = ("", "-wal", "-shm", "-journal")


class DatabaseSummary(msgspec.Struct, frozen=True, kw_only=True):
    """A database file as :func:`inspect_database` found it: its schema version, sessions and messages."""

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


class RestoreResult(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`restore_database` did: the database now in place and where the previous files went."""

    restored: DatabaseSummary
    moved_aside: list[tuple[str, str]]  # (old path, new path) of state.db and its -wal, those that were there


def _file_error(path: Path, action: str, exc: apsw.Error | OSError) -> StoreError:
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


def _summary(db: apsw.Connection, path: Path) -> DatabaseSummary:
    return DatabaseSummary(
        path=str(path),
        schema_version=schema_version(db),
        sessions=int(db.execute("SELECT count(*) FROM sessions").get),
        messages=int(db.execute("SELECT count(*) FROM messages").get),
    )


def _quick_check(db: apsw.Connection) -> list[str]:
    return [str(row[0]) for row in db.execute("PRAGMA quick_check") if row[0] != "ok"]


def _media_paths(db: apsw.Connection) -> list[str]:
    """The attachment files a database names inside its media directory (stored relative to it)."""
    rows = db.execute("SELECT DISTINCT path FROM attachments WHERE path IS NOT NULL ORDER BY path")
    return [str(path) for (path,) in rows if not os.path.isabs(str(path))]


def _write_copy(
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
    partial = dest.with_name(dest.name + ".partial")
    started = time.monotonic()
    try:
        pages = _write_copy(source, partial, max(1, pages_per_step), pause_s, progress or (lambda done, total: None))
        checker = open_connection(partial, readonly=True)
        try:
            summary, problems, media = _summary(checker, dest), _quick_check(checker), _media_paths(checker)
        finally:
            checker.close()
        os.replace(partial, dest)
    except apsw.Error as exc:
        partial.unlink(missing_ok=True)
        raise _file_error(dest, "write the backup", exc) from exc
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise _file_error(dest, "write the backup", exc) from exc
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


def _probe(path: Path) -> None:
    """Raise :class:`StoreError` unless ``path`` is an SQLite database (read before any setting is applied)."""
    try:
        probe = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    except apsw.Error as exc:
        raise _file_error(path, "open", exc) from exc
    try:
        probe.execute("SELECT count(*) FROM sqlite_schema").get  # noqa: B018 (the read is the probe)
    except apsw.NotADBError as exc:
        raise StoreError(f"{path} is not an SQLite database; name a file 'hermesctl db backup' wrote") from exc
    except apsw.Error as exc:
        raise _file_error(path, "read", exc) from exc
    finally:
        probe.close()


def inspect_database(path: str | Path) -> DatabaseSummary:
    """Summarise ``path`` if it is a sound hermes-actors database this build can open; otherwise raise
    :class:`StoreError` (:class:`SchemaVersionError` for a newer one) saying what it is instead."""
    path = Path(path)
    if not path.is_file():
        raise StoreError(f"{path} is {'a directory' if path.is_dir() else 'missing'}; name a backup file")
    _probe(path)
    try:
        db = open_connection(path, readonly=True)
    except StoreError as exc:
        raise StoreError(f"{path} cannot be opened as a database: {exc}") from exc
    try:
        found = schema_version(db)
        tables = {str(name) for (name,) in db.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
        if found > SCHEMA_VERSION:
            raise SchemaVersionError(str(path), found, SCHEMA_VERSION)
        if found == 0 or not _OUR_TABLES.issubset(tables):
            what = "has no tables" if not tables else "is another program's database"
            raise StoreError(
                f"{path} {what}, not a hermes-actors database (a copy of state.db taken without its -wal looks "
                "like this); name a file 'hermesctl db backup' wrote"
            )
        problems = _quick_check(db)
        if problems:
            raise StoreError(f"{path} is damaged (quick_check: {'; '.join(problems[:3])}); restore another backup")
        return _summary(db, path)
    except apsw.Error as exc:
        raise _file_error(path, "read", exc) from exc
    finally:
        db.close()


def restore_database(
    source: str | Path, target: str | Path, *, stamp: str, progress: PageProgress | None = None
) -> RestoreResult:
    """Put a copy of the database ``source`` at ``target`` (0600), first moving ``target`` and its ``-wal`` (when
    it holds anything) aside to ``<target>.before-restore-<stamp>`` and that name's ``-wal``; the old ``-shm`` is
    removed (SQLite rebuilds it), so nothing of the old database stays paired with the new one.

    ``source`` is checked with :func:`inspect_database` first, and copied through the backup API (so a WAL beside
    it counts) into a new file beside ``target``; only a complete copy replaces ``target``. No process may have
    ``target`` open: the caller makes sure hermesd is stopped.
    """
    source, target = Path(source), Path(target)
    summary = inspect_database(source)
    partial = target.with_name(target.name + ".restoring")
    aside = target.with_name(f"{target.name}.before-restore-{stamp}")
    for again in range(2, 100):  # two restores within a second: never rename over an earlier one
        if not any(Path(f"{aside}{suffix}").exists() for suffix in ("", "-wal", "-shm")):
            break
        aside = target.with_name(f"{target.name}.before-restore-{stamp}-{again}")
    moved: list[tuple[str, str]] = []
    try:
        reader = open_connection(source, readonly=True)
        try:
            _write_copy(reader, partial, DEFAULT_PAGES_PER_STEP, 0.0, progress or (lambda done, total: None))
        finally:
            reader.close()
        for suffix in ("", "-wal"):
            old = Path(f"{target}{suffix}")
            if old.exists() and (suffix == "" or old.stat().st_size > 0):
                new = Path(f"{aside}{suffix}")
                os.rename(old, new)
                moved.append((str(old), str(new)))
        for suffix in ("-wal", "-shm"):  # an empty WAL holds nothing, the -shm is rebuilt: neither may stay
            Path(f"{target}{suffix}").unlink(missing_ok=True)
        os.replace(partial, target)
    except (apsw.Error, OSError) as exc:
        partial.unlink(missing_ok=True)
        for before, after in reversed(moved):  # put back what was moved: the home is as it was
            os.rename(after, before)
        raise _file_error(target, "restore", exc) from exc
    return RestoreResult(restored=msgspec.structs.replace(summary, path=str(target)), moved_aside=moved)
