"""Opening APSW connections with the settings every hermes-actors connection needs, and checking they can write.

One function per setting, each saying why. A connection has one owner thread; the writer and every reader open
their own. A writable open creates the database 0600 and takes group and other access away from an existing one
and its ``-wal``/``-shm`` (SQLite creates those with the database's mode), so transcripts stay private to their
owner whatever the umask. :func:`check_writable` is the cheap probe behind the daemon's start-up check and
``/health``: it raises :class:`StoreUnwritableError`, whose message names the problem and the fix.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import logging
import os
import pwd
import stat
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import apsw

from hermes_actors.errors import StoreError, StoreFault
from hermes_actors.store.tokenizer import register_tokenizer

__all__ = [
    "DEFAULT_BUSY_TIMEOUT_MS",
    "MIN_FREE_BYTES",
    "StoreUnwritableError",
    "Synchronous",
    "Table",
    "Transaction",
    "check_disk",
    "check_writable",
    "fault_of",
    "open_connection",
    "read_only_problem",
]

DEFAULT_BUSY_TIMEOUT_MS = 5000
DEFAULT_CHECKPOINT_PAGES = 10_000
DEFAULT_PAGE_SIZE = 4096  # 16384 saves 4% of the file but costs a fifth of small-commit speed (bench/README.md)
MIN_FREE_BYTES = 1024 * 1024  # below this a disk counts as full: a turn's commit needs tens of KB of WAL
PRIVATE_FILE = 0o600
PRIVATE_DIRECTORY = 0o700

_log = logging.getLogger(__name__)
_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


class StoreUnwritableError(StoreError):
    """The database cannot take writes: its disk is full or read-only, or the file is read-only for this user."""


def fault_of(exc: BaseException) -> StoreFault | None:
    """The :class:`StoreFault` an apsw exception amounts to (a full disk, a read-only file, a held lock), if any."""
    if isinstance(exc, apsw.FullError):
        return StoreFault.FULL
    if isinstance(exc, apsw.ReadOnlyError):
        return StoreFault.READ_ONLY
    if isinstance(exc, apsw.BusyError):
        return StoreFault.BUSY
    return None


class Synchronous(enum.StrEnum):
    """How hard a commit waits for the disk.

    ``NORMAL`` (the default) survives a killed process: WAL commits are durable once written to the OS.
    ``FULL`` also survives power loss, at an fsync per commit.
    """

    OFF = "OFF"
    NORMAL = "NORMAL"
    FULL = "FULL"


class Transaction:
    """``with Transaction(db):`` runs the block in one transaction; nested, in a savepoint.

    The outermost transaction of a writable connection starts with ``BEGIN IMMEDIATE``: it takes the write lock
    before its first read, waiting out the busy timeout for it. A deferred transaction would read a snapshot first
    and, when another process committed meanwhile, fail its first write at once with ``SQLITE_BUSY`` (a snapshot
    cannot be upgraded, and no busy timeout helps), which is how a lease grant racing another process's release
    failed a turn. A read-only connection begins an ordinary deferred transaction.

    Savepoints come from APSW's own connection context manager, typed to show that it never swallows an exception.
    With ``savepoint=False`` a nested block adds no savepoint and relies on the enclosing one: the store's methods
    use that, since the writer already gives every job its own savepoint, and a statement pair per method per turn
    is measurable.
    """

    __slots__ = ("_active", "_began", "_db", "_savepoint")

    def __init__(self, db: apsw.Connection, *, savepoint: bool = True) -> None:
        self._db = db
        self._savepoint = savepoint
        self._active = False
        self._began = False

    def __enter__(self) -> None:
        outermost = not self._db.in_transaction
        self._began = outermost and not self._db.readonly("main")
        self._active = not self._began and (self._savepoint or outermost)
        if self._began:
            self._db.execute("BEGIN IMMEDIATE")
        elif self._active:
            self._db.__enter__()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._began:
            try:
                if exc_type is None:
                    self._db.execute("COMMIT")
                    return
            except BaseException:
                with contextlib.suppress(apsw.Error):  # the COMMIT's own error is the one to report
                    if self._db.in_transaction:
                        self._db.execute("ROLLBACK")
                raise
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
        elif self._active:
            self._db.__exit__(exc_type, exc, tb)


class Table:
    """The base of the store's table classes (``store.inbox``, ``store.leases`` ...): a connection and a clock."""

    __slots__ = ("_clock", "_db")

    def __init__(self, db: apsw.Connection, clock: Callable[[], float]) -> None:
        self._db = db
        self._clock = clock


def _choose_page_size(connection: apsw.Connection, page_size: int) -> None:
    """Pick the page size of a new database (it is fixed once the first page is written, WAL included).

    Larger pages hold long messages with less overflow slack and make the FTS segments written at each commit
    fewer; see bench/README.md for the measured trade-off.
    """
    if connection.execute("PRAGMA page_count").get == 0:
        connection.execute(f"PRAGMA page_size = {int(page_size)}")


def _checkpoint_every(connection: apsw.Connection, pages: int) -> None:
    """Fold the WAL back into the database every ``pages`` pages rather than SQLite's 1,000.

    A turn's commit rewrites the same few pages (FTS segment structure, the session's row, index leaves); a
    checkpoint copies each page once however often it changed, so fewer, larger checkpoints write much less.
    Measured (bench/README.md): turn-sized commits went from 0.66 to 0.71 of the large-transaction ceiling. The
    price is a WAL of up to ``pages`` pages (40 MB at 4 KB) that readers consult and a crash replays.
    """
    connection.execute(f"PRAGMA wal_autocheckpoint = {int(pages)}")


def _use_wal(connection: apsw.Connection) -> None:
    """WAL lets readers read while the single writer commits, and makes commits one sequential append."""
    mode = connection.execute("PRAGMA journal_mode = WAL").get
    if str(mode).lower() != "wal":
        raise StoreError(f"could not switch {connection.filename!r} to WAL (got {mode!r}); use a local file")


def _enforce_foreign_keys(connection: apsw.Connection) -> None:
    """Foreign keys keep transcripts, routes and leases from pointing at deleted sessions; SQLite's default is off."""
    connection.execute("PRAGMA foreign_keys = ON")


def _set_busy_timeout(connection: apsw.Connection, milliseconds: int) -> None:
    """Wait for another process's write lock (a terminal chat, a checkpoint) instead of failing at once."""
    connection.set_busy_timeout(milliseconds)


def _set_synchronous(connection: apsw.Connection, level: Synchronous) -> None:
    """Choose durability against commit cost; see :class:`Synchronous`."""
    connection.execute(f"PRAGMA synchronous = {level.value}")


def _keep_temporaries_in_memory(connection: apsw.Connection) -> None:
    """Sorts for listings and FTS merges stay off the disk, which may be small or slow."""
    connection.execute("PRAGMA temp_store = MEMORY")


def _user() -> str:
    uid = os.geteuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} bytes"
    value, unit = (count / (1024 * 1024), "MB") if count >= 1024 * 1024 else (count / 1024, "KB")
    return f"{value:.1f}".removesuffix(".0") + f" {unit}"


def read_only_problem(path: Path) -> str:
    """Why ``path`` (a state file or directory) refuses this user's writes, and the fix, in one sentence."""
    user = _user()
    try:
        found = path.stat()
    except OSError as exc:
        return f"{path} cannot be written by user {user} ({exc.strerror or exc})"
    mode = stat.S_IMODE(found.st_mode)
    private = PRIVATE_DIRECTORY if stat.S_ISDIR(found.st_mode) else PRIVATE_FILE
    ours = found.st_uid == os.geteuid()
    if os.geteuid() == 0 or (ours and mode & stat.S_IWUSR) or os.access(path, os.W_OK):
        return (
            f"{path} is read-only for user {user} (its mode allows writing, so it is likely immutable: see lsattr); "
            "clear that with chattr -i"
        )
    owner = _owner(found.st_uid)
    fix = f"make it writable with chmod {private:o}"
    if owner != user:
        fix = f"give it to that user with chown {user} and chmod {private:o}"
    return f"{path} is read-only for user {user} (owner {owner}, mode {mode:04o}); {fix}"


def check_disk(directory: Path) -> None:
    """Raise :class:`StoreUnwritableError` if ``directory``'s filesystem is mounted read-only or nearly full.

    Full means less than :data:`MIN_FREE_BYTES` left for this user (root may use the blocks a filesystem keeps
    back for it). A disk that fills is seen here and not by a write probe: SQLite writes pages only at commit.
    """
    try:
        found = os.statvfs(directory)
    except OSError as exc:
        raise StoreUnwritableError(f"cannot check the disk holding {directory}: {exc.strerror or exc}") from exc
    if found.f_flag & os.ST_RDONLY:
        raise StoreUnwritableError(
            f"{directory} is on a read-only filesystem; remount it read-write (mount -o remount,rw)"
        )
    blocks = found.f_bfree if os.geteuid() == 0 else found.f_bavail
    free = blocks * found.f_frsize
    if free < MIN_FREE_BYTES:
        raise StoreUnwritableError(
            f"the disk holding {directory} is full ({_size(free)} free, hermesd needs {_size(MIN_FREE_BYTES)}); "
            "free space on it"
        )


def check_writable(connection: apsw.Connection) -> None:
    """Raise :class:`StoreUnwritableError` naming the problem and the fix unless the database can take a write now.

    Cheap enough for every ``/health`` request: :func:`check_disk` on the database's directory, then a write that
    matches no row. SQLite still opens a write transaction for it, so a file opened read-only (its mode, an
    immutable attribute) or a write lock held past the busy timeout fails it; no page changes, so nothing reaches
    the disk and an enclosing transaction commits nothing more. Run it where the connection's owner runs.
    """
    path = Path(connection.filename)
    check_disk(path.parent)
    try:
        connection.execute("UPDATE meta SET value = value WHERE 0")
    except apsw.ReadOnlyError as exc:
        raise StoreUnwritableError(read_only_problem(path)) from exc
    except apsw.BusyError as exc:
        raise StoreUnwritableError(
            f"{path} is locked by another process's write; wait for it, or stop the process that holds it"
        ) from exc
    except apsw.Error as exc:
        raise StoreUnwritableError(f"{path} refuses writes ({exc}); run 'hermesctl db check'") from exc


def _is_file_name(path: str) -> bool:
    return bool(path) and path != ":memory:" and not path.startswith("file:")


def _make_private(path: Path) -> None:
    """Create ``path`` 0600 when missing and take group/other access from it and its ``-wal``/``-shm``.

    SQLite creates a new database 0644 less the umask, and its ``-wal`` and ``-shm`` with the database's mode: an
    empty file made here first is a valid empty database, and fixes the mode of all three. An older install's
    files are tightened here too; only files this user owns are changed (another's cannot be, and are not ours to).
    """
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))
    except FileExistsError:
        pass
    except OSError:
        return  # no directory, or not ours to create in: SQLite's own open reports that
    for name in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        try:
            found = name.stat()
            if found.st_uid == os.geteuid() and found.st_mode & 0o077:
                name.chmod(stat.S_IMODE(found.st_mode) & PRIVATE_DIRECTORY)
        except FileNotFoundError:
            continue
        except OSError as exc:
            _log.warning("cannot make %s private to its owner: %s", name, exc.strerror or exc)


def _open_failure(path: Path, connection: apsw.Connection | None, exc: apsw.Error) -> StoreError:
    """The error for a failed open: a full disk or a file size limit is named as such, not as a disk I/O error."""
    code = connection.system_errno if connection is not None else 0
    if isinstance(exc, apsw.FullError) or code in _DISK_FULL:
        try:
            check_disk(path.parent)
        except StoreUnwritableError as full:
            return full
        return StoreUnwritableError(
            f"cannot open database {path}: {os.strerror(code or errno.ENOSPC)}; free space on its disk "
            "(or raise the user's disk quota)"
        )
    if code == errno.EFBIG:
        return StoreUnwritableError(
            f"cannot open database {path}: it may not grow past this process's file size limit; raise the limit "
            "(ulimit -f unlimited)"
        )
    return StoreError(f"cannot open database {str(path)!r}: {exc}", fault=fault_of(exc))


def open_connection(
    path: str | Path,
    *,
    readonly: bool = False,
    synchronous: Synchronous | str = Synchronous.NORMAL,
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    page_size: int = DEFAULT_PAGE_SIZE,
    checkpoint_pages: int = DEFAULT_CHECKPOINT_PAGES,
) -> apsw.Connection:
    """Open ``path`` with WAL, foreign keys, a busy timeout and the ``hermes_words`` tokenizer.

    A writable connection creates the file (0600) when missing, and raises :class:`StoreUnwritableError` for a
    file SQLite could open only read-only. Migrations are not applied here; see
    :func:`hermes_actors.store.migrations.migrate`.
    """
    try:
        level = Synchronous(str(synchronous).upper())
    except ValueError:
        choices = ", ".join(s.value for s in Synchronous)
        raise StoreError(f"synchronous must be one of {choices}, not {synchronous!r}") from None
    flags = apsw.SQLITE_OPEN_READONLY if readonly else apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    if not readonly and _is_file_name(str(path)):
        _make_private(Path(path))
    connection: apsw.Connection | None = None
    try:
        connection = apsw.Connection(str(path), flags=flags)
        if not readonly and _is_file_name(str(path)) and connection.readonly("main"):
            connection.close()
            check_disk(Path(path).parent)  # a read-only mount says so; otherwise it is the file
            raise StoreUnwritableError(read_only_problem(Path(path)))
        _set_busy_timeout(connection, busy_timeout_ms)
        register_tokenizer(connection)
        if not readonly:
            _choose_page_size(connection, page_size)
            _use_wal(connection)
            _checkpoint_every(connection, checkpoint_pages)
        _enforce_foreign_keys(connection)
        _set_synchronous(connection, level)
        _keep_temporaries_in_memory(connection)
    except apsw.Error as exc:
        failure = _open_failure(Path(path), connection, exc)
        if connection is not None:
            connection.close()
        raise failure from exc
    return connection
