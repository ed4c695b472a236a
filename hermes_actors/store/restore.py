"""Putting a backup back: checking that a file is one of our databases, and copying it over a home's database.

:func:`inspect_database` tells whether a file is a sound hermes-actors database this build can open, and what it
is instead. :func:`read_replaced` reads what a restore would replace without ever failing (a damaged database is
the usual reason to restore). :func:`restore_database` copies a backup into place through the backup API (so a
WAL beside the backup counts), keeping the database it replaces under a timestamped name.
"""

from __future__ import annotations

import os
from pathlib import Path

import apsw
import msgspec

from hermes_actors.errors import SchemaVersionError, StoreError
from hermes_actors.store.backup import (
    DEFAULT_PAGES_PER_STEP,
    DatabaseSummary,
    PageProgress,
    file_error,
    quick_check,
    summarise,
    write_copy,
)
from hermes_actors.store.connection import open_connection
from hermes_actors.store.migrations import SCHEMA_VERSION, schema_version

__all__ = ["ReplacedDatabase", "RestoreResult", "inspect_database", "read_replaced", "restore_database"]

_OUR_TABLES = frozenset({"sessions", "messages", "meta"})


class RestoreResult(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`restore_database` did: the database now in place and where the previous files went."""

    restored: DatabaseSummary
    moved_aside: list[tuple[str, str]]  # (old path, new path) of state.db and its -wal, those that were there


class ReplacedDatabase(msgspec.Struct, frozen=True, kw_only=True):
    """The database a restore would replace, as far as it could be read: its totals and the owners of its session
    leases, or ``problem`` saying why it could not be read."""

    sessions: int | None = None
    messages: int | None = None
    lease_owners: list[str] = msgspec.field(default_factory=list)
    problem: str | None = None


def _probe(path: Path) -> None:
    """Raise :class:`StoreError` unless ``path`` is an SQLite database (read before any setting is applied)."""
    try:
        probe = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    except apsw.Error as exc:
        raise file_error(path, "open", exc) from exc
    try:
        _ = probe.execute("SELECT count(*) FROM sqlite_schema").get  # the first read is the probe
    except apsw.NotADBError as exc:
        raise StoreError(f"{path} is not an SQLite database; name a file 'hermesctl db backup' wrote") from exc
    except apsw.Error as exc:
        raise file_error(path, "read", exc) from exc
    finally:
        probe.close()


def read_replaced(path: str | Path) -> ReplacedDatabase:
    """What :func:`restore_database` would replace at ``path``; never raises for a damaged or foreign file."""
    path = Path(path)
    try:
        _probe(path)
        db = open_connection(path, readonly=True)
    except StoreError as exc:
        return ReplacedDatabase(problem=str(exc))
    try:
        return ReplacedDatabase(
            sessions=int(db.execute("SELECT count(*) FROM sessions").get),
            messages=int(db.execute("SELECT count(*) FROM messages").get),
            lease_owners=[str(owner) for (owner,) in db.execute("SELECT DISTINCT owner FROM leases")],
        )
    except apsw.Error as exc:
        return ReplacedDatabase(problem=f"{path} cannot be read: {exc}")
    finally:
        db.close()


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
        problems = quick_check(db)
        if problems:
            raise StoreError(f"{path} is damaged (quick_check: {'; '.join(problems[:3])}); restore another backup")
        return summarise(db, path)
    except apsw.Error as exc:
        raise file_error(path, "read", exc) from exc
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
            write_copy(reader, partial, DEFAULT_PAGES_PER_STEP, 0.0, progress or (lambda done, total: None))
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
        raise file_error(target, "restore", exc) from exc
    return RestoreResult(restored=msgspec.structs.replace(summary, path=str(target)), moved_aside=moved)
