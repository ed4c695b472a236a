"""PostgreSQL's ``NOTIFY`` as the wire between a shard host running a turn and the process whose client waits on it.

In cluster mode the turn of an API request runs in whichever shard host holds its session's shard, while the
request waits in a ``hermesd --cluster`` replica. Two channels carry what the replica needs:

- :data:`EVENTS_CHANNEL` (``hermes_turn``): the running turn's events (its start, each text delta, each tool call),
  sent by the host with :class:`EventPublisher` as they happen, on a connection of their own (outside any turn's
  transaction, so they arrive while the turn runs). A payload is at most :data:`MAX_PAYLOAD` bytes (PostgreSQL's
  limit is 8,000): the caller splits longer text.
- :data:`OUTBOX_CHANNEL` (``hermes_outbox``): sent in the transaction that queues a reply
  (:meth:`~hermes_actors.store.outbox_queue.Outbox.add`), with the platform and, when it fits, the reply's row
  (:func:`reply_notice`): a replica hands the reply to the request waiting on it without reading it back, and
  looks in the outbox for the replies its requests wait for when a notice came without its row.

``NOTIFY`` reaches only listeners connected when it is sent and is not stored, so a listener also looks in the
outbox periodically.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Sequence
from typing import Any

import msgspec
import psycopg

from hermes_actors.store.pg.notices import wait_notices

__all__ = [
    "EVENTS_CHANNEL",
    "MAX_PAYLOAD",
    "OUTBOX_CHANNEL",
    "EventPublisher",
    "NotifiedReply",
    "RelayListener",
    "reply_notice",
]

EVENTS_CHANNEL = "hermes_turn"
OUTBOX_CHANNEL = "hermes_outbox"
MAX_PAYLOAD = 7000
"""The largest payload :class:`EventPublisher` sends, in bytes (PostgreSQL refuses 8,000 and more)."""


class NotifiedReply(msgspec.Struct, frozen=True):
    """A queued reply as its notice carries it: the outbox row's id, payload and time queued."""

    id: int
    payload: bytes
    created_at: float


def reply_notice(payload: str) -> tuple[str, NotifiedReply | None]:
    """The platform of a :data:`OUTBOX_CHANNEL` notice and the reply it carries (``None``: only the platform came,
    the row was too large)."""
    if not payload.startswith("["):
        return payload, None
    platform, outbox_id, data, created_at = msgspec.json.decode(payload)
    return platform, NotifiedReply(int(outbox_id), base64.b64decode(data), float(created_at))


class EventPublisher:
    """Sends payloads on :data:`EVENTS_CHANNEL` from a connection of its own, in order; a connection that broke (a
    server restart) is replaced at the next :meth:`publish`."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._lock = threading.Lock()
        self._connection: psycopg.Connection[Any] = psycopg.connect(dsn, autocommit=True, connect_timeout=10)

    def publish(self, payloads: Sequence[str]) -> None:
        """Send ``payloads`` in one statement, its own transaction (delivered together, in this order; one round
        trip). Identical payloads in one transaction are delivered once, so each must differ (the relay numbers its
        events)."""
        if not payloads:
            return
        too_long = [p for p in payloads if len(p.encode("utf-8")) > MAX_PAYLOAD]
        if too_long:
            raise ValueError(f"a turn event of {len(too_long[0].encode())} bytes is over {MAX_PAYLOAD}; split it")
        with self._lock:
            if self._connection.broken:
                self._connection = psycopg.connect(self._dsn, autocommit=True, connect_timeout=10)
            self._connection.execute(  # autocommit: one statement, one transaction, no BEGIN and COMMIT to send
                "SELECT pg_notify(%s, p) FROM unnest(%s::text[]) WITH ORDINALITY AS e(p, n) ORDER BY n",
                (EVENTS_CHANNEL, list(payloads)),
            )

    def close(self) -> None:
        with self._lock:
            self._connection.close()


class RelayListener:
    """A connection of its own listening on ``channels`` (by default both: the relayed turn events and the queued
    replies); :meth:`wait` returns (channel, payload) pairs in the order PostgreSQL delivered them. A connection that
    broke raises from :meth:`wait`: its owner opens another."""

    def __init__(self, dsn: str, channels: Sequence[str] = (EVENTS_CHANNEL, OUTBOX_CHANNEL)) -> None:
        self._connection: psycopg.Connection[Any] = psycopg.connect(dsn, autocommit=True, connect_timeout=10)
        for channel in channels:
            self._connection.execute(f"LISTEN {channel}".encode())

    def wait(self, timeout_s: float) -> list[tuple[str, str]]:
        """What was notified within ``timeout_s`` (empty when nothing was), with what else is already queued."""
        return wait_notices(self._connection, timeout_s)

    def close(self) -> None:
        """Close the connection (a waiting :meth:`wait` returns or raises)."""
        self._connection.close()
