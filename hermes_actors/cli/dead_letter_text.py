"""What ``hermesctl messages`` and ``hermesctl events`` share: the store they read (a home's, or a cluster's with
``--dsn``), asking for a dead letter's replay, and how a time or a reason is printed."""

from __future__ import annotations

from contextlib import AbstractContextManager

from hermes_actors.cli.ctl_daemon import home_settings
from hermes_actors.cli.formatting import format_timestamp, one_line, truncate
from hermes_actors.cli.options import open_store, open_writable, resolve_home
from hermes_actors.daemon.control import connect
from hermes_actors.daemon.home import socket_path
from hermes_actors.store import StoreInterface
from hermes_actors.store.dead_letters import DeadLetterRow

__all__ = ["REASON_WIDTH", "ask_replay", "at", "open_sql_reads", "reason", "replay_note"]

REASON_WIDTH = 72


def open_sql_reads(home: str | None, dsn: str | None) -> AbstractContextManager[StoreInterface]:
    """The store a listing reads: the PostgreSQL store at ``dsn`` when given, else the home's."""
    if dsn is None:
        return open_store(home)
    from hermes_actors.store.pg import PostgresStore

    return PostgresStore.open(dsn, pool_size=1, migrate_schema=False)


def at(timestamp: float | None) -> str:
    """A time as ``2026-11-02 14:03:05`` (local), or ``-``."""
    return "-" if timestamp is None else format_timestamp(timestamp)


def reason(text: str | None, width: int = REASON_WIDTH) -> str:
    """A reason or an error on one line, cut to ``width`` columns (safe for the terminal)."""
    return truncate(one_line(text or ""), width) or "-"


def ask_replay(home: str | None, *, inbox_id: int | None = None, outbox_id: int | None = None) -> list[DeadLetterRow]:
    """Ask for the open dead letters of a message or of an outbox row to be replayed; return them (none: nothing
    of it is dead-lettered). An outbox row given up without a dead letter (before they were kept) gets one first."""
    with open_writable(home) as store, store.transaction():
        if outbox_id is not None and not store.dead_letters.of_outbox(outbox_id):
            row = store.deliveries.get(outbox_id)
            if row is not None and row.abandoned_at is not None:
                why = row.last_error or "given up"
                store.dead_letters.add(platform=row.platform, reason=why, outbox_id=outbox_id)
        return store.dead_letters.request_replay(inbox_id=inbox_id, outbox_id=outbox_id)


def replay_note(home: str | None) -> str:
    """When the replay asked for happens: at once in the running ``hermesd``, else at its next start."""
    root = resolve_home(home)
    client = connect(socket_path(root, home_settings(root)))
    if client is None:
        return "hermesd is not running on this home: it replays them when it next starts"
    client.close()
    return "the running hermesd replays them within a few seconds"
