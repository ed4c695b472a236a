"""The durable queues and small tables around the transcript: inbox, outbox, leases, timers, cursors, meta.

Each class wraps the store's connection and clock; ``Store`` exposes them as ``store.inbox``, ``store.outbox``,
``store.leases``, ``store.timers`` and ``store.kv``. Methods that write run in one transaction and nest inside
``Store.transaction()``, so a turn commits its inbox completion, transcript and outbox row together.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import apsw
import msgspec

from hermes_actors.errors import LeaseLostError
from hermes_actors.store.connection import Transaction

__all__ = [
    "HomeChannel",
    "HomeChannels",
    "Inbox",
    "InboxRow",
    "KeyValues",
    "Leases",
    "Memories",
    "Outbox",
    "OutboxRow",
    "TimerRow",
    "Timers",
]


class InboxRow(msgspec.Struct, frozen=True, kw_only=True):
    """A committed inbound message."""

    id: int
    platform: str
    account_id: str
    platform_message_id: str
    routing_key: str
    payload: bytes
    received_at: float
    state: str
    session_id: str | None = None
    owner: str | None = None  # the lease owner of the process that accepted (or since claimed) the row


class OutboxRow(msgspec.Struct, frozen=True, kw_only=True):
    """A reply waiting for delivery; ``attempts > 0`` means a send may already have reached the platform."""

    id: int
    session_id: str | None
    platform: str
    account_id: str
    chat_id: str | None
    thread_id: str | None
    payload: bytes
    created_at: float
    attempts: int
    next_attempt_at: float


class TimerRow(msgspec.Struct, frozen=True, kw_only=True):
    """A durable deadline."""

    name: str
    due_at: float
    payload: bytes | None = None


class _Table:
    __slots__ = ("_clock", "_db")

    def __init__(self, db: apsw.Connection, clock: Callable[[], float]) -> None:
        self._db = db
        self._clock = clock


_INBOX_COLUMNS = (
    "id, platform, account_id, platform_message_id, routing_key, payload, received_at, state, session_id, owner"
)
_OUTBOX_COLUMNS = (
    "id, session_id, platform, account_id, chat_id, thread_id, payload, created_at, attempts, next_attempt_at"
)


def _inbox_row(row: tuple[Any, ...]) -> InboxRow:
    return InboxRow(**dict(zip(InboxRow.__struct_fields__, row, strict=True)))


def _outbox_row(row: tuple[Any, ...]) -> OutboxRow:
    return OutboxRow(**dict(zip(OutboxRow.__struct_fields__, row, strict=True)))


class Inbox(_Table):
    """Durable inbound queue with dedupe on (platform, account, platform message id)."""

    def add(
        self,
        *,
        platform: str,
        account_id: str,
        platform_message_id: str,
        routing_key: str,
        payload: bytes,
        owner: str | None = None,
    ) -> int | None:
        """Commit an inbound message; return its row id, or ``None`` when it was seen before (a redelivery).

        ``owner`` is the lease owner of the accepting process: its turn is that process's to run, and another
        process's recovery leaves the row alone while that owner lives.
        """
        with Transaction(self._db, savepoint=False):
            self._db.execute(
                "INSERT INTO inbox (platform, account_id, platform_message_id, routing_key, payload, received_at, "
                "owner) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (platform, account_id, platform_message_id) "
                "DO NOTHING",
                (platform, account_id, platform_message_id, routing_key, payload, self._clock(), owner),
            )
            return self._db.last_insert_rowid() if self._db.changes() else None

    def complete(self, inbox_id: int, *, session_id: str | None, state: str = "done") -> bool:
        """Mark a pending row answered (``done``) or refused (``rejected``); return whether it was pending.

        A row another turn completed already is left as it is: a caller that expected it pending ran a turn twice.
        """
        with Transaction(self._db, savepoint=False):
            self._db.execute(
                "UPDATE inbox SET state = ?, session_id = ?, completed_at = ? WHERE id = ? AND state = 'pending'",
                (state, session_id, self._clock(), inbox_id),
            )
            return self._db.changes() > 0

    def claim(self, inbox_id: int, owner: str) -> None:
        """Make ``owner`` the process that runs the pending row's turn (recovery after its owner died)."""
        with Transaction(self._db, savepoint=False):
            self._db.execute("UPDATE inbox SET owner = ? WHERE id = ? AND state = 'pending'", (owner, inbox_id))

    def pending_among(self, inbox_ids: Sequence[int]) -> set[int]:
        """Return which of ``inbox_ids`` are still pending."""
        if not inbox_ids:
            return set()
        rows = self._db.execute(
            "SELECT id FROM inbox WHERE state = 'pending' AND id IN (SELECT value FROM json_each(?))",
            (msgspec.json.encode(list(inbox_ids)).decode(),),
        )
        return {int(inbox_id) for (inbox_id,) in rows}

    def pending(self) -> list[InboxRow]:
        """Return every row without a completed turn, oldest first."""
        rows = self._db.execute(f"SELECT {_INBOX_COLUMNS} FROM inbox WHERE state = 'pending' ORDER BY id")
        return [_inbox_row(r) for r in rows]

    def depth(self) -> int:
        """Count the rows without a completed turn."""
        row = self._db.execute("SELECT count(*) FROM inbox WHERE state = 'pending'").fetchone()
        return int(row[0]) if row else 0

    def get(self, inbox_id: int) -> InboxRow | None:
        """Return one row, or ``None``."""
        row = self._db.execute(f"SELECT {_INBOX_COLUMNS} FROM inbox WHERE id = ?", (inbox_id,)).fetchone()
        return _inbox_row(row) if row is not None else None

    def prune_completed(self, before: float, *, limit: int = -1) -> int:
        """Forget completed rows older than ``before`` (their dedupe window ends), at most ``limit`` (-1: all) of
        them; return how many."""
        with Transaction(self._db, savepoint=False):
            self._db.execute(
                "DELETE FROM inbox WHERE id IN "
                "(SELECT id FROM inbox WHERE completed_at IS NOT NULL AND completed_at < ? LIMIT ?)",
                (before, limit),
            )
            return self._db.changes()

    def payloads_since(self, platform: str, since: float) -> list[bytes]:
        """Return the payloads of ``platform``'s rows received at or after ``since`` (answered or not), oldest
        first."""
        rows = self._db.execute(
            "SELECT payload FROM inbox WHERE platform = ? AND received_at >= ? ORDER BY id", (platform, since)
        ).fetchall()
        return [payload for (payload,) in rows if isinstance(payload, bytes)]


class Outbox(_Table):
    """Replies committed with their turn, delivered afterwards."""

    def prune_finished(self, before: float, *, limit: int = -1) -> int:
        """Forget replies sent or given up before ``before``, at most ``limit`` (-1: all) of them; return how many."""
        with Transaction(self._db, savepoint=False):
            self._db.execute(
                "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox WHERE (sent_at IS NOT NULL AND sent_at < ?) "
                "OR (abandoned_at IS NOT NULL AND abandoned_at < ?) LIMIT ?)",
                (before, before, limit),
            )
            return self._db.changes()

    def add(
        self,
        *,
        session_id: str | None,
        platform: str,
        account_id: str,
        chat_id: str | None,
        thread_id: str | None,
        payload: bytes,
    ) -> int:
        """Queue a reply; return its row id."""
        with Transaction(self._db, savepoint=False):
            self._db.execute(
                "INSERT INTO outbox (session_id, platform, account_id, chat_id, thread_id, payload, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (session_id, platform, account_id, chat_id, thread_id, payload, self._clock()),
            )
            return self._db.last_insert_rowid()

    def backlog(self) -> int:
        """Count the replies neither sent nor given up."""
        row = self._db.execute("SELECT count(*) FROM outbox WHERE sent_at IS NULL AND abandoned_at IS NULL").fetchone()
        return int(row[0]) if row else 0

    def unsent(self, platform: str | None = None, *, limit: int = 1000) -> list[OutboxRow]:
        """Return undelivered rows in id order (per chat, that is the order to send them in)."""
        where = "sent_at IS NULL AND abandoned_at IS NULL" + (" AND platform = ?" if platform is not None else "")
        params: tuple[Any, ...] = (platform, limit) if platform is not None else (limit,)
        rows = self._db.execute(f"SELECT {_OUTBOX_COLUMNS} FROM outbox WHERE {where} ORDER BY id LIMIT ?", params)
        return [_outbox_row(r) for r in rows]

    def begin_attempt(self, outbox_id: int) -> int:
        """Count a send attempt before it is made; return the attempt number (1 for the first)."""
        with Transaction(self._db, savepoint=False):
            self._db.execute("UPDATE outbox SET attempts = attempts + 1 WHERE id = ?", (outbox_id,))
            return int(self._db.execute("SELECT attempts FROM outbox WHERE id = ?", (outbox_id,)).get or 0)

    def begin_attempts(self, outbox_ids: list[int]) -> None:
        """Count a send attempt of each row, before the sends are made (one write for a batch)."""
        with Transaction(self._db, savepoint=False):
            self._db.executemany("UPDATE outbox SET attempts = attempts + 1 WHERE id = ?", [(i,) for i in outbox_ids])

    def mark_sent(self, outbox_id: int, platform_message_id: str | None) -> None:
        """Record delivery."""
        self.mark_sent_many([(outbox_id, platform_message_id)])

    def mark_sent_many(self, sent: list[tuple[int, str | None]]) -> None:
        """Record the delivery of several rows: (row id, platform message id) pairs."""
        now = self._clock()
        with Transaction(self._db, savepoint=False):
            self._db.executemany(
                "UPDATE outbox SET sent_at = ?, platform_message_id = ?, last_error = NULL WHERE id = ?",
                [(now, platform_id, outbox_id) for outbox_id, platform_id in sent],
            )

    def abandon(self, outbox_id: int, reason: str) -> None:
        """Give a reply up: it is never sent (a handoff whose delivery failed)."""
        with Transaction(self._db, savepoint=False):
            self._db.execute(
                "UPDATE outbox SET abandoned_at = ?, last_error = ? WHERE id = ?", (self._clock(), reason, outbox_id)
            )

    def mark_failed(self, outbox_id: int, error: str, retry_at: float) -> None:
        """Record a failed attempt and when to try again."""
        with Transaction(self._db, savepoint=False):
            self._db.execute(
                "UPDATE outbox SET last_error = ?, next_attempt_at = ? WHERE id = ?", (error, retry_at, outbox_id)
            )


class Leases(_Table):
    """Cross-process ownership of sessions: one row per owned session, renewed by heartbeat, expiring.

    Every take-over (a new owner, or the same owner after its row was gone) gets a new ``epoch`` from a counter
    that only grows, so a turn computed under one tenure cannot commit under another: see :meth:`fence`.
    """

    def grant(self, session_id: str, owner: str, ttl_s: float) -> int | str:
        """Take or renew the lease; return its epoch, or the current holder's owner string when it is held."""
        now = self._clock()
        with Transaction(self._db, savepoint=False):
            held = self._db.execute(
                "SELECT owner, epoch, expires_at FROM leases WHERE session_id = ?", (session_id,)
            ).fetchone()
            if held is not None and held[0] == owner:
                self._db.execute(
                    "UPDATE leases SET expires_at = ? WHERE session_id = ?", (max(now + ttl_s, held[2]), session_id)
                )
                return int(held[1])
            if held is not None and held[2] >= now:
                return str(held[0])
            epoch = self._next_epoch()
            self._db.execute(
                "INSERT INTO leases (session_id, owner, acquired_at, expires_at, epoch) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner, acquired_at = excluded.acquired_at, "
                "expires_at = excluded.expires_at, epoch = excluded.epoch",
                (session_id, owner, now, now + ttl_s, epoch),
            )
            return epoch

    def _next_epoch(self) -> int:
        row = self._db.execute(
            "INSERT INTO meta (key, value) VALUES ('lease_epoch', '1') ON CONFLICT (key) DO UPDATE "
            "SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT) RETURNING value"
        ).get
        return int(str(row))

    def acquire(self, session_id: str, owner: str, ttl_s: float) -> str | None:
        """Take or renew the lease; return ``None`` on success or the current holder's owner string."""
        granted = self.grant(session_id, owner, ttl_s)
        return granted if isinstance(granted, str) else None

    def fence(self, session_id: str, owner: str, epoch: int, ttl_s: float) -> None:
        """Check, inside the caller's transaction, that ``owner`` still holds the lease at ``epoch``, and extend it.

        Raises :class:`LeaseLostError` otherwise (the lease expired and another process took it, even if it has
        given it up since): the caller's transaction must roll back, its work was computed from a stale history.
        """
        with Transaction(self._db, savepoint=False):
            self._db.execute(
                "UPDATE leases SET expires_at = max(expires_at, ?) WHERE session_id = ? AND owner = ? AND epoch = ?",
                (self._clock() + ttl_s, session_id, owner, epoch),
            )
            if self._db.changes() == 0:
                raise LeaseLostError(
                    f"this process no longer holds the lease of session {session_id} (epoch {epoch}): another "
                    "process took it over; the turn is rolled back and runs again under a new lease"
                )

    def epoch_of(self, session_id: str, owner: str) -> int | None:
        """Return the epoch of ``owner``'s lease on ``session_id``, or ``None`` when it does not hold it."""
        row = self._db.execute(
            "SELECT epoch FROM leases WHERE session_id = ? AND owner = ?", (session_id, owner)
        ).fetchone()
        return None if row is None else int(row[0])

    def heartbeat(self, owner: str, ttl_s: float) -> int:
        """Extend every lease ``owner`` holds; return how many."""
        with Transaction(self._db, savepoint=False):
            self._db.execute("UPDATE leases SET expires_at = ? WHERE owner = ?", (self._clock() + ttl_s, owner))
            return self._db.changes()

    def release(self, session_id: str, owner: str) -> bool:
        """Give the lease up; return whether ``owner`` held it."""
        with Transaction(self._db, savepoint=False):
            self._db.execute("DELETE FROM leases WHERE session_id = ? AND owner = ?", (session_id, owner))
            return self._db.changes() > 0

    def release_all(self, owner: str) -> int:
        """Give up every lease ``owner`` holds (clean shutdown)."""
        with Transaction(self._db, savepoint=False):
            self._db.execute("DELETE FROM leases WHERE owner = ?", (owner,))
            return self._db.changes()

    def holder(self, session_id: str) -> str | None:
        """Return the owner of a lease that has not expired, or ``None``."""
        row = self._db.execute(
            "SELECT owner FROM leases WHERE session_id = ? AND expires_at >= ?", (session_id, self._clock())
        ).get
        return None if row is None else str(row)


class Timers(_Table):
    """Durable deadlines, named so that setting one again replaces it."""

    def set(self, name: str, due_at: float, payload: bytes | None = None) -> None:
        """Create or move the deadline ``name``."""
        with Transaction(self._db, savepoint=False):
            self._db.execute(
                "INSERT INTO timers (name, due_at, payload) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE "
                "SET due_at = excluded.due_at, payload = excluded.payload",
                (name, due_at, payload),
            )

    def cancel(self, name: str) -> bool:
        """Remove the deadline; return whether it existed."""
        with Transaction(self._db, savepoint=False):
            self._db.execute("DELETE FROM timers WHERE name = ?", (name,))
            return self._db.changes() > 0

    def apply(self, changes: Mapping[str, tuple[float, bytes | None] | None]) -> None:
        """Set each named deadline to its ``(due_at, payload)``, or remove it where the change is ``None``."""
        upserts = [(name, change[0], change[1]) for name, change in changes.items() if change is not None]
        removals = [(name,) for name, change in changes.items() if change is None]
        with Transaction(self._db, savepoint=False):
            if upserts:
                self._db.executemany(
                    "INSERT INTO timers (name, due_at, payload) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE "
                    "SET due_at = excluded.due_at, payload = excluded.payload",
                    upserts,
                )
            if removals:
                self._db.executemany("DELETE FROM timers WHERE name = ?", removals)

    def all(self) -> list[TimerRow]:
        """Return every deadline, earliest first."""
        rows = self._db.execute("SELECT name, due_at, payload FROM timers ORDER BY due_at, name")
        return [TimerRow(name=str(n), due_at=float(d), payload=p) for n, d, p in rows]


class KeyValues(_Table):
    """Small durable values: ``meta`` entries and platform poll cursors."""

    def get_meta(self, key: str) -> str | None:
        """Return a meta value, or ``None``."""
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).get
        return None if row is None else str(row)

    def set_meta(self, key: str, value: str) -> None:
        """Set a meta value."""
        with Transaction(self._db, savepoint=False):
            self._db.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    def get_cursor(self, platform: str, account_id: str = "") -> str | None:
        """Return a platform's poll cursor (Telegram offset, iLink sync buffer), or ``None``."""
        row = self._db.execute(
            "SELECT cursor FROM poll_cursors WHERE platform = ? AND account_id = ?", (platform, account_id)
        ).get
        return None if row is None else str(row)

    def set_cursor(self, platform: str, cursor: str, account_id: str = "") -> None:
        """Store a poll cursor; call it in the transaction that commits the inbox rows it covers."""
        with Transaction(self._db, savepoint=False):
            self._db.execute(
                "INSERT INTO poll_cursors (platform, account_id, cursor, updated_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (platform, account_id) DO UPDATE SET cursor = excluded.cursor, "
                "updated_at = excluded.updated_at",
                (platform, account_id, cursor, self._clock()),
            )


class HomeChannel(msgspec.Struct, frozen=True, kw_only=True):
    """Where handoff and notifications go on one platform account (``/sethome``)."""

    platform: str
    account_id: str
    chat_id: str
    thread_id: str | None = None
    chat_type: str | None = None
    set_by: str | None = None
    scope_id: str | None = None


class HomeChannels(_Table):
    """The ``/sethome`` table."""

    def set(self, home: HomeChannel) -> None:
        """Make ``home`` the home channel of its platform account."""
        with Transaction(self._db, savepoint=False):
            self._db.execute(
                "INSERT INTO home_channels (platform, account_id, chat_id, thread_id, chat_type, scope_id, set_by, "
                "set_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (platform, account_id) DO UPDATE SET "
                "chat_id = excluded.chat_id, thread_id = excluded.thread_id, chat_type = excluded.chat_type, "
                "scope_id = excluded.scope_id, set_by = excluded.set_by, set_at = excluded.set_at",
                (
                    home.platform,
                    home.account_id,
                    home.chat_id,
                    home.thread_id,
                    home.chat_type,
                    home.scope_id,
                    home.set_by,
                    self._clock(),
                ),
            )

    def get(self, platform: str, account_id: str | None = None) -> HomeChannel | None:
        """Return the home channel of a platform account (any account of the platform when ``None``)."""
        where = "platform = ?" + ("" if account_id is None else " AND account_id = ?")
        params = (platform,) if account_id is None else (platform, account_id)
        row = self._db.execute(
            "SELECT account_id, chat_id, thread_id, chat_type, scope_id, set_by FROM home_channels "
            f"WHERE {where} ORDER BY set_at DESC LIMIT 1",
            params,
        ).fetchone()
        if row is None:
            return None
        account, chat_id, thread_id, chat_type, scope_id, set_by = row
        return HomeChannel(
            platform=platform,
            account_id=str(account),
            chat_id=str(chat_id),
            thread_id=thread_id,
            chat_type=chat_type,
            scope_id=scope_id,
            set_by=set_by,
        )


class Memories(_Table):
    """Notes the agent kept about a user (save-memory turns), given to that user's later sessions."""

    def add(self, user_key: str, contents: list[str], *, source_session_id: str | None) -> int:
        """Store notes about ``user_key``; return how many."""
        with Transaction(self._db, savepoint=False):
            now = self._clock()
            self._db.executemany(
                "INSERT INTO memories (user_key, content, source_session_id, created_at) VALUES (?, ?, ?, ?)",
                [(user_key, content, source_session_id, now) for content in contents],
            )
        return len(contents)

    def for_user(self, user_key: str, *, limit: int = 50) -> list[str]:
        """Return the newest ``limit`` notes about ``user_key``, oldest first."""
        rows = self._db.execute(
            "SELECT content FROM (SELECT id, content FROM memories WHERE user_key = ? ORDER BY id DESC LIMIT ?) "
            "ORDER BY id",
            (user_key, limit),
        )
        return [str(content) for (content,) in rows]
