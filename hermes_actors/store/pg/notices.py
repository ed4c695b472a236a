"""Waiting for ``NOTIFY`` on a listening connection, read straight from libpq.

psycopg's ``Connection.notifies()`` builds a generator and its waiting machinery on every call, and a listener calls
it twice per wake-up (one notice, then whatever else is queued): about 60 µs of CPU per notice, where polling the
socket, ``PQconsumeInput`` and ``PQnotifies`` take about 30. Every shard host reads every inbox notice and a replica
every reply notice, so :func:`wait_notices` does the latter. A connection whose read fails is closed, so its owner
connects again.
"""

from __future__ import annotations

import select
from typing import Any

import psycopg

__all__ = ["wait_notices"]


def wait_notices(connection: psycopg.Connection[Any], timeout_s: float) -> list[tuple[str, str]]:
    """The (channel, payload) pairs notified to ``connection`` (which only listens), in the order PostgreSQL sent
    them: those already received, else those that arrive within ``timeout_s`` (empty when none does). Raises
    ``psycopg.Error`` when the connection is closed or broken (and closes it)."""
    pgconn = connection.pgconn
    encoding = connection.info.encoding
    try:
        found = _queued(pgconn, encoding)
        if not found:
            poller = select.poll()
            poller.register(pgconn.socket, select.POLLIN)
            if poller.poll(max(0, int(timeout_s * 1000))):
                pgconn.consume_input()  # reads what arrived; a lost connection raises here
                found = _queued(pgconn, encoding)
    except psycopg.Error:
        connection.close()
        raise
    return found


def _queued(pgconn: Any, encoding: str) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    notice = pgconn.notifies()
    while notice is not None:
        found.append((notice.relname.decode(encoding), notice.extra.decode(encoding)))
        notice = pgconn.notifies()
    return found
