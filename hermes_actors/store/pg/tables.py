"""The small tables of the PostgreSQL store: leases, timers, meta and poll cursors, home channels, memories and
attachments (``store.leases``, ``store.timers``, ``store.kv``, ``store.homes``, ``store.memories``,
``store.attachments``), with the rules of their SQLite counterparts.

Leases are the exception to "times come from the injected clock": every expiry is written and compared in the
database's clock (``clock_timestamp()``), so hosts whose clocks disagree still agree on who holds a session. A
``skew`` (seconds, 0 in production) is added to it, for tests that move time forward without waiting.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from hermes_actors.errors import LeaseLostError
from hermes_actors.messages import Attachment
from hermes_actors.store.pg.db import Database
from hermes_actors.store.pg.queues import PgTable
from hermes_actors.store.records import AttachmentRecord, HomeChannel, TimerRow

__all__ = ["Attachments", "PgHomeChannels", "PgKeyValues", "PgLeases", "PgMemories", "PgTimers"]

_log = logging.getLogger(__name__)
_NOW = "(extract(epoch FROM clock_timestamp())::double precision + %(skew)s)"


class PgLeases:
    """Cross-process ownership of sessions with fencing epochs, expiring by the database clock.

    ``shard_check`` (cluster mode, :meth:`PostgresStore.fence_shards`) runs first in :meth:`grant` and
    :meth:`fence`: a session's lease is taken and a turn's commit made only under its shard's lease. When it
    answers ``False`` (the fault test's switch: fencing off) :meth:`fence` checks no epoch either.
    """

    __slots__ = ("_db", "_skew", "shard_check")

    def __init__(self, db: Database, skew: Callable[[], float]) -> None:
        self._db = db
        self._skew = skew
        self.shard_check: Callable[[str], bool] | None = None

    def grant(self, session_id: str, owner: str, ttl_s: float) -> int | str:
        """Take or renew the lease: its epoch, or the current holder's owner string when it is held."""
        args = {"id": session_id, "owner": owner, "ttl": ttl_s, "skew": self._skew()}
        with self._db.transaction(savepoint=False):
            if self.shard_check is not None:
                self.shard_check(session_id)
            self._db.execute("SELECT pg_advisory_xact_lock(hashtext('lease:' || %(id)s))", args)
            rows = self._db.execute(
                f"SELECT owner, epoch, expires_at >= {_NOW} FROM leases WHERE session_id = %(id)s FOR UPDATE", args
            )
            if rows and rows[0][0] == owner:
                self._db.execute(
                    f"UPDATE leases SET expires_at = greatest(expires_at, {_NOW} + %(ttl)s) WHERE session_id = %(id)s",
                    args,
                )
                return int(rows[0][1])
            if rows and rows[0][2]:
                return str(rows[0][0])
            epoch = self._next_epoch()
            self._db.execute(
                f"INSERT INTO leases (session_id, owner, acquired_at, expires_at, epoch) VALUES (%(id)s, %(owner)s, "
                f"{_NOW}, {_NOW} + %(ttl)s, %(epoch)s) ON CONFLICT (session_id) DO UPDATE SET owner = excluded.owner, "
                "acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, epoch = excluded.epoch",
                {**args, "epoch": epoch},
            )
            return epoch

    def _next_epoch(self) -> int:
        return int(
            self._db.value(
                "INSERT INTO meta (key, value) VALUES ('lease_epoch', '1') ON CONFLICT (key) DO UPDATE "
                "SET value = (meta.value::bigint + 1)::text RETURNING value"
            )
        )

    def acquire(self, session_id: str, owner: str, ttl_s: float) -> str | None:
        """Take or renew the lease: ``None``, or the current holder's owner string."""
        granted = self.grant(session_id, owner, ttl_s)
        return granted if isinstance(granted, str) else None

    def fence(self, session_id: str, owner: str, epoch: int, ttl_s: float) -> None:
        """Check inside the caller's transaction that ``owner`` still holds the lease at ``epoch``, and extend it
        (:class:`LeaseLostError` otherwise)."""
        if self.shard_check is not None and not self.shard_check(session_id):
            return
        changed = self._db.count(
            f"UPDATE leases SET expires_at = greatest(expires_at, {_NOW} + %(ttl)s) "
            "WHERE session_id = %(id)s AND owner = %(owner)s AND epoch = %(epoch)s",
            {"id": session_id, "owner": owner, "epoch": epoch, "ttl": ttl_s, "skew": self._skew()},
        )
        if changed == 0:
            raise LeaseLostError(
                f"this process no longer holds the lease of session {session_id} (epoch {epoch}): another "
                "process took it over; the turn is rolled back and runs again under a new lease"
            )

    def epoch_of(self, session_id: str, owner: str) -> int | None:
        """The epoch of ``owner``'s lease on ``session_id``, or ``None``."""
        found = self._db.value("SELECT epoch FROM leases WHERE session_id = %s AND owner = %s", (session_id, owner))
        return None if found is None else int(found)

    def heartbeat(self, owner: str, ttl_s: float) -> int:
        """Extend every lease ``owner`` holds; how many."""
        return self._db.count(
            f"UPDATE leases SET expires_at = {_NOW} + %(ttl)s WHERE owner = %(owner)s",
            {"owner": owner, "ttl": ttl_s, "skew": self._skew()},
        )

    def release(self, session_id: str, owner: str) -> bool:
        """Give the lease up; whether ``owner`` held it."""
        return self._db.count("DELETE FROM leases WHERE session_id = %s AND owner = %s", (session_id, owner)) > 0

    def release_all(self, owner: str) -> int:
        """Give up every lease ``owner`` holds."""
        return self._db.count("DELETE FROM leases WHERE owner = %s", (owner,))

    def owners(self) -> list[str]:
        """Every owner holding at least one lease, expired or not."""
        return [str(owner) for (owner,) in self._db.execute("SELECT DISTINCT owner FROM leases ORDER BY owner")]

    def holder(self, session_id: str) -> str | None:
        """The owner of a lease that has not expired (by the database clock), or ``None``."""
        found = self._db.value(
            f"SELECT owner FROM leases WHERE session_id = %(id)s AND expires_at >= {_NOW}",
            {"id": session_id, "skew": self._skew()},
        )
        return None if found is None else str(found)


_UPSERT_TIMER = (
    "INSERT INTO timers (name, due_at, payload) VALUES (%s, %s, %s) ON CONFLICT (name) DO UPDATE "
    "SET due_at = excluded.due_at, payload = excluded.payload"
)


class PgTimers(PgTable):
    """Durable deadlines, named so that setting one again replaces it."""

    def set(self, name: str, due_at: float, payload: bytes | None = None) -> None:
        """Create or move the deadline ``name``."""
        self._db.execute(_UPSERT_TIMER, (name, due_at, payload))

    def cancel(self, name: str) -> bool:
        """Remove the deadline; whether it existed."""
        return self._db.count("DELETE FROM timers WHERE name = %s", (name,)) > 0

    def apply(self, changes: Mapping[str, tuple[float, bytes | None] | None]) -> None:
        """Set each named deadline to its ``(due_at, payload)``, or remove it where the change is ``None``."""
        upserts = [(name, change[0], change[1]) for name, change in changes.items() if change is not None]
        removals = [name for name, change in changes.items() if change is None]
        with self._db.transaction(savepoint=False):
            self._db.executemany(_UPSERT_TIMER, upserts)
            if removals:
                self._db.execute("DELETE FROM timers WHERE name = ANY(%s)", (removals,))

    def all(self) -> list[TimerRow]:
        """Every deadline, earliest first."""
        rows = self._db.execute("SELECT name, due_at, payload FROM timers ORDER BY due_at, name")
        return [TimerRow(name=str(n), due_at=float(d), payload=None if p is None else bytes(p)) for n, d, p in rows]


class PgKeyValues(PgTable):
    """Small durable values: ``meta`` entries and platform poll cursors."""

    def get_meta(self, key: str) -> str | None:
        """A meta value, or ``None``."""
        found = self._db.value("SELECT value FROM meta WHERE key = %s", (key,))
        return None if found is None else str(found)

    def set_meta(self, key: str, value: str) -> None:
        """Set a meta value."""
        self._db.execute(
            "INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def get_cursor(self, platform: str, account_id: str = "") -> str | None:
        """A platform's poll cursor, or ``None``."""
        found = self._db.value(
            "SELECT cursor FROM poll_cursors WHERE platform = %s AND account_id = %s", (platform, account_id)
        )
        return None if found is None else str(found)

    def set_cursor(self, platform: str, cursor: str, account_id: str = "") -> None:
        """Store a poll cursor (in the transaction of the inbox rows it covers)."""
        self._db.execute(
            "INSERT INTO poll_cursors (platform, account_id, cursor, updated_at) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (platform, account_id) DO UPDATE SET cursor = excluded.cursor, "
            "updated_at = excluded.updated_at",
            (platform, account_id, cursor, self._clock()),
        )


class PgHomeChannels(PgTable):
    """The ``/sethome`` table."""

    def set(self, home: HomeChannel) -> None:
        """Make ``home`` the home channel of its platform account."""
        self._db.execute(
            "INSERT INTO home_channels (platform, account_id, chat_id, thread_id, chat_type, scope_id, set_by, set_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (platform, account_id) DO UPDATE SET "
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
        """The home channel of a platform account (any account of the platform when ``None``)."""
        where = "platform = %s" + ("" if account_id is None else " AND account_id = %s")
        params = (platform,) if account_id is None else (platform, account_id)
        rows = self._db.execute(
            "SELECT account_id, chat_id, thread_id, chat_type, scope_id, set_by FROM home_channels "
            f"WHERE {where} ORDER BY set_at DESC LIMIT 1",
            params,
        )
        if not rows:
            return None
        account, chat_id, thread_id, chat_type, scope_id, set_by = rows[0]
        return HomeChannel(
            platform=platform,
            account_id=str(account),
            chat_id=str(chat_id),
            thread_id=thread_id,
            chat_type=chat_type,
            scope_id=scope_id,
            set_by=set_by,
        )


class PgMemories(PgTable):
    """Notes the agent kept about a user, given to that user's later sessions."""

    def add(self, user_key: str, contents: list[str], *, source_session_id: str | None) -> int:
        """Store notes about ``user_key``; how many."""
        now = self._clock()
        with self._db.transaction(savepoint=False):
            self._db.executemany(
                "INSERT INTO memories (user_key, content, source_session_id, created_at) VALUES (%s, %s, %s, %s)",
                [(user_key, content, source_session_id, now) for content in contents],
            )
        return len(contents)

    def for_user(self, user_key: str, *, limit: int = 50) -> list[str]:
        """The newest ``limit`` notes about ``user_key``, oldest first."""
        rows = self._db.execute(
            "SELECT content FROM (SELECT id, content FROM memories WHERE user_key = %s ORDER BY id DESC LIMIT %s) AS m "
            "ORDER BY id",
            (user_key, limit),
        )
        return [str(content) for (content,) in rows]


class Attachments(PgTable):
    """The ``attachments`` table. A PostgreSQL store has no media directory of its own unless it is given one
    (``media_dir``): files are then removed as the SQLite store removes them, once no row names them."""

    __slots__ = ("_media_dir",)

    def __init__(self, db: Database, clock: Callable[[], float], media_dir: Path | None = None) -> None:
        super().__init__(db, clock)
        self._media_dir = media_dir

    @property
    def media_dir(self) -> Path | None:
        """Where the attachments' files live (``None``: the store manages no files)."""
        return self._media_dir

    def add(self, message_id: int, attachment: Attachment, *, at: float | None = None) -> int:
        """Record ``attachment`` as a file of message ``message_id``; the row id."""
        return int(
            self._db.value(
                "INSERT INTO attachments (message_id, kind, mime_type, size, path, sha256, source_url, name, error, "
                "created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
                (
                    message_id,
                    attachment.kind,
                    attachment.mime_type,
                    attachment.size,
                    self._stored_path(attachment.path),
                    attachment.sha256,
                    attachment.source_url,
                    attachment.name,
                    attachment.error,
                    self._clock() if at is None else at,
                ),
            )
        )

    def _stored_path(self, path: str | None) -> str | None:
        if path is None or self._media_dir is None:
            return path
        try:
            return Path(path).resolve().relative_to(self._media_dir).as_posix()
        except ValueError:
            return path

    def for_session(self, session_id: str) -> list[AttachmentRecord]:
        """Every attachment of the session's messages, in message order."""
        rows = self._db.execute(
            f"SELECT {', '.join('a.' + c for c in AttachmentRecord.__struct_fields__)} FROM attachments a "
            "JOIN messages m ON m.id = a.message_id "
            "WHERE m.session_ref = (SELECT ref FROM sessions WHERE id = %s) ORDER BY a.message_id, a.id",
            (session_id,),
        )
        return [AttachmentRecord(**dict(zip(AttachmentRecord.__struct_fields__, r, strict=True))) for r in rows]

    def delete_for_sessions(self, refs_sql: str, params: Iterable[Any]) -> set[str]:
        """Delete the attachment rows of the sessions whose ``ref`` is in ``refs_sql``; the paths they named."""
        rows = self._db.execute(
            "DELETE FROM attachments WHERE message_id IN "
            f"(SELECT id FROM messages WHERE session_ref IN ({refs_sql})) RETURNING path",
            tuple(params),
        )
        return {str(path) for (path,) in rows if path is not None}

    def remove_unreferenced(self, paths: Iterable[str]) -> int:
        """Delete the files among ``paths`` that no row names; how many (nothing inside an open transaction)."""
        if self._db.in_transaction or self._media_dir is None:
            return 0
        removed = 0
        for path in sorted(set(paths)):
            relative = PurePosixPath(path)
            if relative.is_absolute() or ".." in relative.parts or not relative.parts:
                continue
            if self._db.value("SELECT 1 FROM attachments WHERE path = %s LIMIT 1", (path,)) is not None:
                continue
            target = self._media_dir.joinpath(*relative.parts)
            try:
                target.unlink()
            except FileNotFoundError:
                continue
            except OSError as exc:
                _log.warning("attachments: could not remove %s (%s); remove it by hand", target, exc)
                continue
            removed += 1
            if target.parent != self._media_dir:
                with contextlib.suppress(OSError):
                    target.parent.rmdir()
        return removed
