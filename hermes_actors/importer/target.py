"""Our store as the importer sees it: what is there already, and the writes an import makes.

The store's everyday methods create sessions as live and stamp times from the clock; an import must write sessions
with their original times, end reasons and counters, into sessions that may have ended. So the writes here use the
store's methods for rows written as they are (:meth:`Store.insert_session`, :meth:`Store.insert_messages`,
:meth:`Store.add_counts`), in the caller's transaction (:meth:`Target.transaction`).

What was imported is recorded in ``meta``, one entry per session (the *ledger*, :class:`Ledger`), in the same
transaction as the session's rows: the highest message id of the source imported into it and the highest
message id it had here afterwards. A later run uses it to import nothing twice, to append only what the
source added since, to notice messages written here since, and to leave alone a session that was deleted here
after it was imported. ``meta`` is used rather than a table of our own so the schema stays ``schema.sql``'s.

In a dry run nothing is written: the writes go to an in-memory overlay that the reads consult first, so the
dry run decides exactly as the real run would (titles taken by earlier sessions of the same run, routes to
sessions it would create). A dry run may have no store at all (an empty home).
"""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import time
from collections.abc import Callable, Sequence
from typing import Literal

import msgspec

from hermes_actors.store import SessionRecord, StoreInterface
from hermes_actors.store.records import MessageRow
from hermes_actors.titles import distinct_title

__all__ = ["LEDGER_PREFIX", "RAW_PREFIX", "Ledger", "MessageRow", "Target"]

LEDGER_PREFIX = "import-hermes:session:"
RAW_PREFIX = "import-hermes:raw:"

_TITLE_PROBES = 1000
_LEASE_TTL_S = 300.0  # longer than any batch; given back as soon as the batch's transaction has ended


class Ledger(msgspec.Struct, frozen=True, kw_only=True):
    """What an import put into one session here (stored in ``meta`` under ``LEDGER_PREFIX + session id``).

    ``part`` is ``transcript`` for a session of the source, ``compacted`` for the session holding the rows the
    source compacted away. ``last_source_message_id`` is the highest source message id examined for it (0:
    none); ``last_message_id`` the highest message id the session had here after the import (0: none).
    """

    source_session_id: str
    part: Literal["transcript", "compacted"]
    last_source_message_id: int
    last_message_id: int
    source_end_reason: str | None = None
    imported_at: float


_ledger_decoder = msgspec.json.Decoder(Ledger)


class Target:
    """Reads and writes of an import against ``store`` (``None``: an empty store, dry runs only)."""

    def __init__(self, store: StoreInterface | None, *, dry_run: bool, clock: Callable[[], float] = time.time) -> None:
        if store is None and not dry_run:
            raise ValueError("a real import needs a store; pass dry_run=True to plan against an empty one")
        self._store = store
        self.dry_run = dry_run
        self._clock = clock
        self._sessions: dict[str, bool] = {}  # overlay: id -> ended
        self._titles: dict[str, str] = {}
        self._routes: dict[str, str] = {}
        self._ledgers: dict[str, Ledger] = {}
        self._tails: dict[str, int] = {}
        self._principals: dict[str, tuple[str, str | None, str | None]] = {}
        # Leases are held as a process of this host ("host:pid:start-ms"): one left by a killed import is taken
        # over at once by hermesd, and by a shard host in any case.
        self._owner = f"{socket.gethostname()}:{os.getpid()}:{int(time.time() * 1000)}"
        self._held = False

    def transaction(self) -> contextlib.AbstractContextManager[None]:
        """One transaction of the store, or nothing in a dry run."""
        if self.dry_run or self._store is None:
            return contextlib.nullcontext()
        return self._store.transaction()

    # -- reads -------------------------------------------------------------------------------------------------

    def ledger(self, session_id: str) -> Ledger | None:
        """Return what an earlier import recorded for ``session_id``, or ``None``."""
        if session_id in self._ledgers:
            return self._ledgers[session_id]
        value = None if self._store is None else self._store.kv.get_meta(LEDGER_PREFIX + session_id)
        return None if value is None else _ledger_decoder.decode(str(value))

    def session_ended(self, session_id: str) -> bool | None:
        """Return whether the session has ended here, or ``None`` when there is no such session."""
        if session_id in self._sessions:
            return self._sessions[session_id]
        record = None if self._store is None else self._store.find_session(session_id)
        return None if record is None else record.ended_at is not None

    def title_holder(self, title: str) -> str | None:
        """Return the id of the session holding ``title`` here, or ``None``."""
        if title in self._titles:
            return self._titles[title]
        return None if self._store is None else self._store.title_holder(title)

    def free_distinct_title(self, title: str) -> str:
        """Return ``"title (N)"`` for the lowest N no session holds (never ``"#N"``: that is lineage numbering)."""
        for number in range(2, _TITLE_PROBES + 2):
            candidate = distinct_title(title, number)
            if self.title_holder(candidate) is None:
                return candidate
        raise RuntimeError(f"no free title like {title!r} in {_TITLE_PROBES} tries")

    def local_tail(self, session_id: str) -> int:
        """Return the highest message id of the session here (0: none)."""
        if session_id in self._tails:
            return self._tails[session_id]
        return 0 if self._store is None else self._store.last_message_id(session_id)

    def principal(self, session_id: str) -> tuple[str, str | None, str | None] | None:
        """Return the (platform, workspace, account) ``session_id`` belongs to here, or ``None`` without it."""
        if session_id in self._principals:
            return self._principals[session_id]
        record = None if self._store is None else self._store.find_session(session_id)
        return None if record is None else (record.source, record.scope_id, record.account_id)

    def route(self, routing_key: str) -> str | None:
        """Return the session ``routing_key`` reaches here, or ``None``."""
        if routing_key in self._routes:
            return self._routes[routing_key]
        return None if self._store is None else self._store.get_route(routing_key)

    # -- leases ------------------------------------------------------------------------------------------------

    def hold(self, session_id: str) -> str | None:
        """Keep every process from running ``session_id``'s turns while the caller's transaction changes it: take
        its lease (given back by :meth:`release`). Return the owner of a live lease that stands in the way (the
        session is open in hermesd, a terminal chat or a shard host), else ``None``. A dry run only looks.

        On PostgreSQL the grant holds the lease's lock until the transaction commits, so a shard host taking the
        session meanwhile waits and then reads what the import wrote."""
        if self._store is None:
            return None
        if self.dry_run:
            return self._store.leases.holder(session_id)
        holder = self._store.leases.acquire(session_id, self._owner, _LEASE_TTL_S)
        self._held = self._held or holder is None
        return holder

    def release(self) -> None:
        """Give back every lease :meth:`hold` took (once the transaction that used them has ended)."""
        if self._held and self._store is not None:
            self._store.leases.release_all(self._owner)
            self._held = False

    # -- writes ------------------------------------------------------------------------------------------------

    def _writes(self) -> StoreInterface | None:
        """The store to write to, ``None`` in a dry run."""
        return None if self.dry_run else self._store

    def insert_session(self, record: SessionRecord) -> None:
        """Insert ``record`` as it is (times, end, counters), its title already checked to be free."""
        store = self._writes()
        if store is not None:
            store.insert_session(record)
        if self.dry_run:
            self._sessions[record.id] = record.ended_at is not None
            if record.title is not None:
                self._titles[record.title] = record.id

    def append(self, session_id: str, rows: Sequence[MessageRow]) -> int:
        """Append message rows to the session (in this order); return its highest message id afterwards."""
        store = self._writes()
        if store is None:
            self._tails[session_id] = self.local_tail(session_id) + len(rows)
            return self._tails[session_id]
        store.insert_messages(session_id, rows)
        return self.local_tail(session_id)

    def add_to_session(
        self,
        session_id: str,
        *,
        messages: int,
        tool_calls: int,
        last_active_at: float,
        tokens: tuple[int, int] | None = None,
    ) -> None:
        """Count appended messages on the session; ``tokens`` replaces its (input, output) token counts."""
        store = self._writes()
        if store is not None:
            store.add_counts(
                session_id, messages=messages, tool_calls=tool_calls, last_active_at=last_active_at, tokens=tokens
            )

    def end_session(self, session_id: str, ended_at: float, reason: str) -> None:
        """End a live session with ``reason`` at ``ended_at`` (a session that has ended keeps its first reason)."""
        store = self._writes()
        if store is not None:
            store.end_session(session_id, reason, at=ended_at)
        if self.dry_run:
            self._sessions[session_id] = True

    def set_principal(self, session_id: str, principal: tuple[str, str | None, str | None]) -> None:
        """Give ``session_id`` the (platform, workspace, account) its live adapter uses."""
        store = self._writes()
        if store is not None:
            source, scope_id, account_id = principal
            store.set_principal(session_id, source=source, scope_id=scope_id, account_id=account_id)
        if self.dry_run:
            self._principals[session_id] = principal

    def set_route(self, routing_key: str, session_id: str, updated_at: float | None) -> None:
        """Point ``routing_key`` at ``session_id``, dated ``updated_at`` (the source's time) or now."""
        store = self._writes()
        if store is not None:
            store.set_route(routing_key, session_id, at=self._clock() if updated_at is None else updated_at)
        if self.dry_run:
            self._routes[routing_key] = session_id

    def _set_meta(self, key: str, value: str) -> None:
        store = self._writes()
        if store is not None:
            store.kv.set_meta(key, value)

    def set_ledger(self, session_id: str, ledger: Ledger) -> None:
        """Record what an import put into ``session_id``."""
        self._set_meta(LEDGER_PREFIX + session_id, msgspec.json.encode(ledger).decode())
        if self.dry_run:
            self._ledgers[session_id] = ledger

    def keep_raw(self, key: str, raw: bytes) -> str:
        """Keep the original bytes of a repaired value in ``meta`` (base64) under ``RAW_PREFIX + key``."""
        meta_key = RAW_PREFIX + key
        self._set_meta(meta_key, base64.b64encode(raw).decode("ascii"))
        return meta_key

    def now(self) -> float:
        """The clock's time."""
        return self._clock()
