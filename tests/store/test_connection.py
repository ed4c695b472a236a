"""Connections keep the database private to its owner, and say plainly when it cannot be written."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from hermes_actors.store import Store
from hermes_actors.store.connection import (
    MIN_FREE_BYTES,
    StoreUnwritableError,
    check_disk,
    check_writable,
    open_connection,
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """Run the test under umask 000, the loosest an operator can set."""
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.mark.usefixtures("open_umask")
def test_a_new_database_and_its_wal_and_shm_are_0600_even_under_umask_000(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with Store.open(path) as store:
        store._connection.execute("INSERT INTO meta (key, value) VALUES ('k', 'v')")
        names = [path, tmp_path / "state.db-wal", tmp_path / "state.db-shm"]
        assert {name.name: _mode(name) for name in names} == {name.name: 0o600 for name in names}


def test_a_writable_open_tightens_an_older_installs_files_and_a_reader_leaves_them(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    holder = Store.open(path)  # keeps the -wal and -shm in place, as a running older daemon would
    try:
        holder._connection.execute("INSERT INTO meta (key, value) VALUES ('k', 'v')")
        names = [path, tmp_path / "state.db-wal", tmp_path / "state.db-shm"]
        for name in names:
            name.chmod(0o644)
        open_connection(path, readonly=True).close()
        assert [_mode(name) for name in names] == [0o644] * 3
        open_connection(path).close()
        assert [_mode(name) for name in names] == [0o600] * 3
    finally:
        holder.close()


def test_check_writable_passes_on_a_healthy_store_and_commits_nothing(sqlite_store: Store) -> None:
    wal = Path(sqlite_store.path + "-wal")
    sqlite_store._connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    check_writable(sqlite_store._connection)
    with sqlite_store.transaction():
        check_writable(sqlite_store._connection)
    assert wal.stat().st_size == 0


class _Disk:
    """What ``os.statvfs`` says about a disk: ``free`` bytes, read-only or not."""

    def __init__(self, free: int, *, read_only: bool = False) -> None:
        self.f_frsize = 4096
        self.f_bfree = self.f_bavail = free // 4096
        self.f_flag = os.ST_RDONLY if read_only else 0


def _fake_disk(monkeypatch: pytest.MonkeyPatch, disk: _Disk) -> None:
    def statvfs(path: Any) -> _Disk:
        return disk

    monkeypatch.setattr(os, "statvfs", statvfs)


def test_a_nearly_full_disk_is_named_with_what_is_free_and_what_is_needed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_disk(monkeypatch, _Disk(12 * 1024))
    with pytest.raises(StoreUnwritableError) as raised:
        check_disk(tmp_path)
    assert (
        str(raised.value) == f"the disk holding {tmp_path} is full (12 KB free, hermesd needs 1 MB); free space on it"
    )


def test_a_read_only_mount_is_named_with_the_fix(sqlite_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_disk(monkeypatch, _Disk(10 * MIN_FREE_BYTES, read_only=True))
    with pytest.raises(StoreUnwritableError) as raised:
        check_writable(sqlite_store._connection)
    directory = Path(sqlite_store.path).parent
    assert str(raised.value) == f"{directory} is on a read-only filesystem; remount it read-write (mount -o remount,rw)"


@pytest.mark.slow
def test_a_write_lock_held_elsewhere_fails_the_probe_after_the_busy_timeout(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    Store.open(path).close()
    other = apsw.Connection(str(path))
    other.execute("BEGIN IMMEDIATE")
    try:
        with Store.open(path, busy_timeout_ms=10) as store, pytest.raises(StoreUnwritableError) as raised:
            check_writable(store._connection)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert str(raised.value) == (
        f"{path} is locked by another process's write; wait for it, or stop the process that holds it"
    )


def test_a_writable_stores_transaction_holds_the_write_lock_from_its_first_read(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with Store.open(path) as store:
        store.kv.set_cursor("telegram", "1", "main")
        other = apsw.Connection(str(path))
        try:
            with store.transaction():
                assert store.kv.get_cursor("telegram", "main") == "1"  # a read first, as a lease grant does
                # Another process cannot commit between that read and this transaction's write (a deferred
                # transaction would then fail its write at once with SQLITE_BUSY): it waits instead.
                with pytest.raises(apsw.BusyError):
                    other.execute("BEGIN IMMEDIATE")
                store.kv.set_cursor("telegram", "2", "main")
            other.execute("BEGIN IMMEDIATE")  # free once it committed
            other.execute("ROLLBACK")
        finally:
            other.close()


def test_a_read_only_stores_transaction_takes_no_write_lock(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    Store.open(path).close()
    with Store.open(path, readonly=True) as reader, reader.transaction():
        other = apsw.Connection(str(path))
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
        finally:
            other.close()


# A process whose files may not grow past 8000 bytes (RLIMIT_FSIZE): SQLite's 32 KB -shm cannot be made.
SMALL_FILE_LIMIT = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (8000, 8000))
from hermes_actors.store.connection import open_connection
open_connection(sys.argv[1])
"""


def test_a_file_size_limit_is_named_instead_of_a_disk_io_error(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    Store.open(path).close()
    done = subprocess.run(
        [sys.executable, "-c", SMALL_FILE_LIMIT, str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        f"hermes_actors.store.connection.StoreUnwritableError: cannot open database {path}: it may not grow past "
        "this process's file size limit; raise the limit (ulimit -f unlimited)"
    )
