"""``wait_notices`` (``store/pg/notices.py``): a listening connection's notifications read from libpq, in order,
nothing within the timeout when none came, and a lost connection closed and raised."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from hermes_actors.store.pg.notices import wait_notices


@pytest.fixture
def listening(postgres_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(postgres_dsn, autocommit=True) as connection:
        connection.execute("LISTEN one")
        connection.execute("LISTEN two")
        yield connection


def _notify(dsn: str, *notices: tuple[str, str]) -> None:
    with psycopg.connect(dsn, autocommit=True) as sender, sender.transaction():
        for channel, payload in notices:
            sender.execute("SELECT pg_notify(%s, %s)", (channel, payload))


def test_notices_come_in_the_order_sent_with_their_channels(
    listening: psycopg.Connection[Any], postgres_dsn: str
) -> None:
    sent = [("one", "a"), ("two", "b"), ("one", "ç"), ("two", "[1,2]")]
    _notify(postgres_dsn, *sent)
    found: list[tuple[str, str]] = []
    deadline = time.monotonic() + 5
    while len(found) < len(sent) and time.monotonic() < deadline:
        found.extend(wait_notices(listening, 1.0))
    assert found == sent


def test_a_wait_returns_when_a_notice_arrives_and_empty_after_its_timeout(
    listening: psycopg.Connection[Any], postgres_dsn: str
) -> None:
    started = time.monotonic()
    assert wait_notices(listening, 0.2) == []
    assert 0.15 <= time.monotonic() - started < 2.0
    later = threading.Timer(0.3, _notify, (postgres_dsn, ("two", "late")))
    later.start()
    started = time.monotonic()
    assert wait_notices(listening, 10.0) == [("two", "late")]
    assert time.monotonic() - started < 5.0
    later.join()


def test_a_lost_connection_raises_and_is_closed(listening: psycopg.Connection[Any], postgres_dsn: str) -> None:
    with psycopg.connect(postgres_dsn, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s, 5000)", (listening.info.backend_pid,))
    with pytest.raises(psycopg.Error):
        _read_on(listening)
    assert listening.closed


def _read_on(connection: psycopg.Connection[Any]) -> None:
    for _ in range(50):  # the termination's message may come first, the end of the stream after it
        wait_notices(connection, 0.1)
