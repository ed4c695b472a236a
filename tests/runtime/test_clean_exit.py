"""A clean stop folds the WAL back into the database file: ``state.db`` alone then holds everything (issue 18: a
copy of it without its ``-wal`` was an empty database)."""

from __future__ import annotations

import shutil
from pathlib import Path

from hermes_actors.store import Store
from hermes_actors.testing import open_fake_gateway


def test_a_stopped_gateway_leaves_everything_in_the_database_file(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with open_fake_gateway(path) as (gateway, fake):
        fake.push("hello")
        assert fake.pop().text == "echo: hello"
        assert gateway.wait_idle()
    wal = tmp_path / "state.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0, f"{wal.stat().st_size} bytes left in the WAL"
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(path, copy / "state.db")  # what an operator copies as a backup: the file alone
    with Store.open(copy / "state.db", readonly=True) as store:
        (session,) = store.list_sessions()
        assert [m.content for m in store.load_transcript(session.id)] == ["hello", "echo: hello"]
