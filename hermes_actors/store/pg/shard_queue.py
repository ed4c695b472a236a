"""The inbox as the cluster reads it: rows tagged with their shard, pulled per shard, announced by ``NOTIFY``.

The ingress commits an inbound message with the shard of the session its routing key leads to
(:meth:`ShardQueue.add_routed`), and in the same statement notifies the shard's holder on a channel of the holder's
own (:func:`holder_channel`; ``hermes_inbox`` itself while the shard has had no holder): that host's
:class:`InboxListener` wakes at once, and no other host's (each woke for every message while they shared one channel,
and threw away the rows of shards it did not hold). A row added while its shard changes hands may notify the host
giving it up; the host taking it pulls the shard's pending rows once its term begins. A message's notification
carries its whole row (with the route it was added under) when that fits in a notification, so the holder hands it
over without reading it back; any other notification (a larger row, a moved row, a control row, on ``hermes_inbox``
to every host) carries only the shard, and the holder pulls the pending rows of the shards it holds
(:meth:`ShardQueue.pull`). A host also pulls when poked and periodically (the backstop for a lost notification:
``NOTIFY`` is not delivered to a listener that was not connected when it was sent).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Collection, Sequence
from typing import Any

import msgspec
import psycopg

from hermes_actors.store.inbox import INBOX_COLUMNS, inbox_insert, inbox_row
from hermes_actors.store.pg.db import store_error
from hermes_actors.store.pg.notices import wait_notices
from hermes_actors.store.pg.reset_scan import SHARD_SQL
from hermes_actors.store.records import InboxKind, InboxRow, InboxState
from hermes_actors.store.sql import SqlDb, SqlTable, notice_payload

__all__ = [
    "CHANNEL",
    "InboxListener",
    "Notices",
    "PendingRow",
    "ShardLag",
    "ShardQueue",
    "ShardRow",
    "holder_channel",
]

CHANNEL = "hermes_inbox"
_HOLDER_HEX = 16  # hex digits of md5(holder) in a holder's channel: the SQL of _ADD_ROUTED and holder_channel
_PENDING = InboxState.PENDING.value
_JOINED_COLUMNS = ", ".join(f"i.{column.strip()}" for column in INBOX_COLUMNS.split(","))
_ADD = inbox_insert("shard")
_NOTIFY = f"SELECT pg_notify('{CHANNEL}', ?)"
# The row and its notification in one statement (one round trip; alone, its own transaction): a redelivery adds no
# row, and the select list, evaluated per row added, notifies nobody.
_ADD_NOTIFIED = f"WITH added AS ({_ADD}) SELECT id, pg_notify('{CHANNEL}', ?) FROM added"
_ADD_ROUTED = (
    "WITH t AS (SELECT (SELECT session_id FROM routes WHERE routing_key = :key) AS route), "
    "added AS (INSERT INTO inbox (platform, account_id, platform_message_id, routing_key, payload, received_at, kind, "
    "shard) SELECT :platform, :account, :message, :key, :payload, :at, :kind, {shard} FROM t "
    "ON CONFLICT (platform, account_id, platform_message_id) DO NOTHING "
    "RETURNING id, shard, platform, account_id, platform_message_id, routing_key, payload, received_at, kind), "
    "told AS (SELECT a.id, a.shard, json_build_array(a.shard, a.id, t.route, a.platform, a.account_id, "
    "a.platform_message_id, a.routing_key, encode(a.payload, 'base64'), a.received_at, a.kind, "
    "CASE WHEN l.holder IS NOT NULL THEN l.epoch END)::text AS whole, "
    f"coalesce('{CHANNEL}_' || left(md5(l.holder), {_HOLDER_HEX}), '{CHANNEL}') AS channel "
    "FROM added a CROSS JOIN t LEFT JOIN shard_leases l ON l.shard = a.shard) "
    f"SELECT id, shard, pg_notify(channel, {notice_payload('whole', 'shard::text')}) FROM told"
).format(shard=SHARD_SQL.format(id="coalesce(nullif(t.route, ''), :key)"))

ShardRow = tuple[int, InboxRow, str | None]
"""A pending row as a host hands it over: its shard, the row, and the session its routing key led to when it was
read (``None``: no route)."""


class Notices(msgspec.Struct, frozen=True):
    """What :meth:`InboxListener.wait` gathered: rows that came whole with their notification, and the shards
    notified without a row (their holder pulls them)."""

    rows: list[ShardRow] = msgspec.field(default_factory=list)
    shards: set[int] = msgspec.field(default_factory=set)
    epochs: dict[int, int] = msgspec.field(default_factory=dict)  # inbox id -> its shard's holder's epoch when added


def holder_channel(holder: str) -> str:
    """The channel a message's notification goes to while ``holder`` holds its shard (:data:`_ADD_ROUTED`): a name
    of the holder's own, so no other host wakes for it."""
    return f"{CHANNEL}_{hashlib.md5(holder.encode()).hexdigest()[:_HOLDER_HEX]}"


def _notified_row(payload: str) -> tuple[ShardRow, int | None]:
    """The row a message's notification carries (:data:`_ADD_ROUTED`'s ``json_build_array``), and the epoch of the
    term its shard's holder held when it was added (``None``: no one held it)."""
    shard, inbox_id, route, platform, account, message, key, data, received_at, kind, epoch = msgspec.json.decode(
        payload
    )
    row = InboxRow(
        id=int(inbox_id),
        platform=platform,
        account_id=account,
        platform_message_id=message,
        routing_key=key,
        payload=base64.b64decode(data),
        received_at=float(received_at),
        state=InboxState.PENDING,
        session_id=None,
        owner=None,
        kind=InboxKind(kind),
    )
    return (int(shard), row, route), None if epoch is None else int(epoch)


class ShardLag(msgspec.Struct, frozen=True, kw_only=True):
    """The pending rows of one shard: how many, and the receipt time of the oldest (unix seconds)."""

    shard: int
    pending: int
    oldest_received_at: float


class PendingRow(msgspec.Struct, frozen=True, kw_only=True):
    """A pending inbox row as the cluster's status shows it: id, shard, platform (empty for a control row), receipt
    time (unix seconds) and kind."""

    inbox_id: int
    shard: int | None
    platform: str
    received_at: float
    kind: InboxKind = InboxKind.MESSAGE


class ShardQueue(SqlTable):
    """The inbox's rows by shard (``inbox.shard``, schema version 3)."""

    __slots__ = ("_shards_text",)

    def __init__(self, db: SqlDb, clock: Callable[[], float]) -> None:
        super().__init__(db, clock)
        self._shards_text: tuple[tuple[int, ...], str] = ((), "{}")  # the last shards pulled, as an array literal

    def _array(self, shards: Sequence[int]) -> str:
        """``shards`` sorted as a PostgreSQL array literal, kept for the next pull (a host pulls the same shards
        over and over: dumping 128 numbers one by one took about 50 µs a pull, as long as the server's run of it)."""
        key = tuple(sorted(shards))
        last, text = self._shards_text
        if key != last:
            text = "{" + ",".join(map(str, key)) + "}"
            self._shards_text = (key, text)
        return text

    def add(
        self,
        shard: int,
        *,
        platform: str,
        account_id: str,
        platform_message_id: str,
        routing_key: str,
        payload: bytes,
        kind: InboxKind = InboxKind.MESSAGE,
    ) -> int | None:
        """Commit an inbound message (or a control row of ``kind``) to ``shard`` and notify its holder; the row id,
        or ``None`` for a redelivery (nothing added, nobody notified)."""
        found = self._db.value(
            _ADD_NOTIFIED,
            (
                platform,
                account_id,
                platform_message_id,
                routing_key,
                payload,
                self._clock(),
                kind.value,
                shard,
                str(shard),
            ),
        )
        return None if found is None else int(found)

    def add_routed(
        self,
        shards: int,
        *,
        platform: str,
        account_id: str,
        platform_message_id: str,
        routing_key: str,
        payload: bytes,
    ) -> tuple[int, int] | None:
        """Commit an inbound message to the shard its routing key leads to now
        (:func:`~hermes_actors.store.pg.shards.shard_for_key` over ``shards``, computed by the statement from the
        key's route) and notify its holder, in one statement: the row id and shard, or ``None`` for a redelivery
        (nothing added, nobody notified). The notification carries the whole row and its route when it fits
        (:class:`Notices`)."""
        rows = self._db.execute(
            _ADD_ROUTED,
            {
                "key": routing_key,
                "platform": platform,
                "account": account_id,
                "message": platform_message_id,
                "payload": payload,
                "at": self._clock(),
                "kind": InboxKind.MESSAGE.value,
                "shards": shards,
            },
            keyed=True,
        )
        return (int(rows[0][0]), int(rows[0][1])) if rows else None

    def pending(self, shards: Sequence[int], *, limit: int = 500) -> list[tuple[int, InboxRow]]:
        """The oldest pending rows of ``shards`` (up to ``limit``), in id order, each with its shard."""
        if not shards:
            return []
        rows = self._db.execute(
            f"SELECT shard, {INBOX_COLUMNS} FROM inbox WHERE state = ? AND shard = ANY(?) ORDER BY id LIMIT ?",
            (_PENDING, sorted(shards), limit),
        )
        return [(int(row[0]), inbox_row(row[1:])) for row in rows]

    def pending_ids(self, shards: Sequence[int], *, limit: int = 500) -> list[int]:
        """The ids of the oldest pending rows of ``shards`` (up to ``limit``), in order: read from the index alone,
        so a host woken per message learns which rows are new without reading every pending payload again."""
        if not shards:
            return []
        rows = self._db.execute(
            "SELECT id FROM inbox WHERE state = ? AND shard = ANY(?) ORDER BY id LIMIT ?",
            (_PENDING, sorted(shards), limit),
        )
        return [int(inbox_id) for (inbox_id,) in rows]

    def pull(
        self, shards: Sequence[int], *, known: Collection[int] = (), limit: int = 500
    ) -> tuple[list[int], list[ShardRow]]:
        """The ids of the oldest pending rows of ``shards`` (up to ``limit``), in order, and those of them not in
        ``known`` read whole, each with its shard and the session its routing key leads to now (``None``: no
        route), in one statement (one round trip)."""
        if not shards:
            return [], []
        rows = self._db.execute(  # 'pending' a literal: a generic plan sees the partial index's predicate
            f"SELECT p.id, w.* FROM (SELECT id FROM inbox WHERE state = '{_PENDING}' AND shard = ANY(?::int[]) "
            f"ORDER BY id LIMIT ?) p LEFT JOIN LATERAL (SELECT i.shard, r.session_id, {_JOINED_COLUMNS} FROM inbox i "
            "LEFT JOIN routes r ON r.routing_key = i.routing_key WHERE i.id = p.id AND NOT p.id = ANY(?)) w ON true "
            "ORDER BY p.id",
            (self._array(shards), limit, sorted(known)),
            keyed=True,
        )
        ids = [int(row[0]) for row in rows]
        whole = [
            (int(row[1]), inbox_row(row[3:]), None if row[2] is None else str(row[2]))
            for row in rows
            if row[1] is not None
        ]
        return ids, whole

    def reshard(self, inbox_id: int, shard: int) -> bool:
        """Move a pending row to ``shard`` (its routing key now leads to a session there) and notify; whether it
        was pending."""
        with self._db.transaction(savepoint=False):
            moved = self._db.count(
                "UPDATE inbox SET shard = ?, owner = NULL WHERE id = ? AND state = ?", (shard, inbox_id, _PENDING)
            )
            if moved:
                self._db.execute(_NOTIFY, (str(shard),))
        return moved > 0

    def take(self, inbox_id: int, owner: str) -> bool:
        """Mark a pending row as being worked on by ``owner`` (a host applying an operator's change); whether it
        was pending. A row taken by no one can still be withdrawn (:meth:`withdraw`)."""
        return self._db.count("UPDATE inbox SET owner = ? WHERE id = ? AND state = ?", (owner, inbox_id, _PENDING)) > 0

    def withdraw(self, inbox_id: int) -> bool:
        """Refuse a pending row no host has taken (its sender gave up waiting); whether it was withdrawn."""
        return (
            self._db.count(
                "UPDATE inbox SET state = ?, completed_at = ? WHERE id = ? AND state = ? AND owner IS NULL",
                (InboxState.REJECTED.value, self._clock(), inbox_id, _PENDING),
            )
            > 0
        )

    def record(self, inbox_id: int, payload: bytes) -> None:
        """Replace a row's payload (a host records an operator change's outcome in it, in the transaction that
        completes the row)."""
        self._db.execute("UPDATE inbox SET payload = ? WHERE id = ?", (payload, inbox_id))

    def oldest(self, *, limit: int) -> list[PendingRow]:
        """The ``limit`` oldest pending rows (by id: the order they were taken in), oldest first."""
        rows = self._db.execute(
            "SELECT id, shard, platform, received_at, kind FROM inbox WHERE state = ? ORDER BY id LIMIT ?",
            (_PENDING, limit),
        )
        return [
            PendingRow(
                inbox_id=int(i),
                shard=None if s is None else int(s),
                platform=str(p),
                received_at=float(t),
                kind=InboxKind(k),
            )
            for i, s, p, t, k in rows
        ]

    def pending_before(self, received_at: float) -> int:
        """How many rows received before ``received_at`` (unix seconds) are still pending."""
        return int(
            self._db.value("SELECT count(*) FROM inbox WHERE state = ? AND received_at < ?", (_PENDING, received_at))
        )

    def lag(self) -> list[ShardLag]:
        """Every shard with pending rows: how many and since when, in shard order."""
        rows = self._db.execute(
            "SELECT shard, count(*), min(received_at) FROM inbox WHERE state = ? AND shard IS NOT NULL "
            "GROUP BY shard ORDER BY shard",
            (_PENDING,),
        )
        return [ShardLag(shard=int(s), pending=int(n), oldest_received_at=float(t)) for s, n, t in rows]


class InboxListener:
    """A connection of its own that ``LISTEN``s on :data:`CHANNEL` and, for a host, on ``holder``'s own channel
    (:func:`holder_channel`); :meth:`wait` returns what was notified. A connection that broke (a server restart) is
    replaced at the next :meth:`wait`; what was notified meanwhile is lost, which the periodic pull covers."""

    def __init__(self, dsn: str, *, holder: str | None = None) -> None:
        self._dsn = dsn
        self._closed = False
        self._channels = [CHANNEL] if holder is None else [CHANNEL, holder_channel(holder)]
        self.connections = 0  # how many times it has connected: a new one may have missed notifications
        self._connection: psycopg.Connection[Any] = self._connect()

    def _connect(self) -> psycopg.Connection[Any]:
        connection: psycopg.Connection[Any] = psycopg.connect(self._dsn, autocommit=True, connect_timeout=10)
        for channel in self._channels:  # the names are identifiers as they are (letters, digits, underscores)
            connection.execute(f"LISTEN {channel}".encode())
        self.connections += 1
        return connection

    def wait(self, timeout_s: float, *, wanted: Callable[[int], bool] | None = None) -> Notices:
        """What was notified within ``timeout_s`` (nothing when nothing was); gathers what else is already queued.
        A row of a shard ``wanted`` refuses (another host's) is left out undecoded. A lost connection is a
        :class:`StoreError` (the next call connects again)."""
        notices = Notices()
        try:
            if self._connection.closed and not self._closed:
                self._connection = self._connect()
            for _, payload in wait_notices(self._connection, timeout_s):
                _gather(notices, payload, wanted)
        except psycopg.Error as exc:
            raise store_error(exc, f"LISTEN {CHANNEL}") from exc
        return notices

    def close(self) -> None:
        """Close the connection (a waiting :meth:`wait` returns)."""
        self._closed = True
        self._connection.close()


def _gather(notices: Notices, payload: str, wanted: Callable[[int], bool] | None) -> None:
    if payload.startswith("["):
        if wanted is None or wanted(int(payload[1 : payload.index(",")])):  # the shard leads the row
            row, epoch = _notified_row(payload)
            notices.rows.append(row)
            if epoch is not None:
                notices.epochs[row[1].id] = epoch
    else:
        notices.shards.add(int(payload))
