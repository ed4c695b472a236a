"""Our store as the importer sees it: what is there already, and the writes an import makes.

The store's own methods create sessions as live and stamp times from the clock; an import must write sessions
with their original times, end reasons and counters, into sessions that may have ended. So the writes here are
raw SQL against ``schema.sql``'s tables, in the caller's transaction (:meth:`Target.transaction`).

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
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

import msgspec

from hermes_actors.store import SessionRecord, Store
from hermes_actors.titles import lineage_base, next_lineage_title

__all__ = ["LEDGER_PREFIX", "RAW_PREFIX", "Ledger", "MessageRow", "Target"]

LEDGER_PREFIX = "import-hermes:session:"
RAW_PREFIX = "import-hermes:raw:"

# (role, content, tool_calls, tool_name, tool_call_id, token_count, created_at, platform_message_id)
MessageRow = tuple[str, str | None, str | None, str | None, str | None, int | None, float, str | None]

_SESSION_COLUMNS = ", ".join(SessionRecord.__struct_fields__)
_SESSION_PLACEHOLDERS = ", ".join("?" * len(SessionRecord.__struct_fields__))
_LINEAGE_PROBES = 1000


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

    def __init__(self, store: Store | None, *, dry_run: bool, clock: Callable[[], float] = time.time) -> None:
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

    def transaction(self) -> contextlib.AbstractContextManager[None]:
        """One transaction of the store, or nothing in a dry run."""
        if self.dry_run or self._store is None:
            return contextlib.nullcontext()
        return self._store.transaction()

    def _rows(self, sql: str, params: Sequence[Any]) -> Iterator[tuple[Any, ...]]:
        if self._store is not None:
            yield from self._store.connection.execute(sql, params)

    def _value(self, sql: str, params: Sequence[Any]) -> Any:
        return next((row[0] for row in self._rows(sql, params)), None)

    # -- reads -------------------------------------------------------------------------------------------------

    def ledger(self, session_id: str) -> Ledger | None:
        """Return what an earlier import recorded for ``session_id``, or ``None``."""
        if session_id in self._ledgers:
            return self._ledgers[session_id]
        value = self._value("SELECT value FROM meta WHERE key = ?", (LEDGER_PREFIX + session_id,))
        return None if value is None else _ledger_decoder.decode(str(value))

    def session_ended(self, session_id: str) -> bool | None:
        """Return whether the session has ended here, or ``None`` when there is no such session."""
        if session_id in self._sessions:
            return self._sessions[session_id]
        ended = self._value("SELECT ended_at IS NOT NULL FROM sessions WHERE id = ?", (session_id,))
        return None if ended is None else bool(ended)

    def title_holder(self, title: str) -> str | None:
        """Return the id of the session holding ``title`` here, or ``None``."""
        if title in self._titles:
            return self._titles[title]
        holder = self._value("SELECT id FROM sessions WHERE title = ?", (title,))
        return None if holder is None else str(holder)

    def free_lineage_title(self, title: str) -> str:
        """Return the next lineage title after ``title`` (``"t #N"``) that no session holds."""
        base = lineage_base(title)
        taken = [
            str(t)
            for (t,) in self._rows(
                "SELECT title FROM sessions WHERE title = ? OR (title >= ? AND title < ?)",
                (base, base + " #", base + " $"),
            )
        ]
        taken += [t for t in self._titles if lineage_base(t) == base]
        for _ in range(_LINEAGE_PROBES):
            candidate = next_lineage_title(title, taken)
            if self.title_holder(candidate) is None:
                return candidate
            taken.append(candidate)  # a base cut to fit 100 characters can meet another lineage's titles
        raise RuntimeError(f"no free lineage title after {title!r} in {_LINEAGE_PROBES} tries")

    def local_tail(self, session_id: str) -> int:
        """Return the highest message id of the session here (0: none)."""
        if session_id in self._tails:
            return self._tails[session_id]
        tail = self._value(
            "SELECT max(id) FROM messages WHERE session_ref = (SELECT ref FROM sessions WHERE id = ?)", (session_id,)
        )
        return int(tail or 0)

    def route(self, routing_key: str) -> str | None:
        """Return the session ``routing_key`` reaches here, or ``None``."""
        if routing_key in self._routes:
            return self._routes[routing_key]
        found = self._value("SELECT session_id FROM routes WHERE routing_key = ?", (routing_key,))
        return None if found is None else str(found)

    # -- writes ------------------------------------------------------------------------------------------------

    def _execute(self, sql: str, params: Sequence[Any]) -> None:
        if not self.dry_run and self._store is not None:
            self._store.connection.execute(sql, params)

    def insert_session(self, record: SessionRecord) -> None:
        """Insert ``record`` as it is (times, end, counters), its title already checked to be free."""
        self._execute(
            f"INSERT INTO sessions ({_SESSION_COLUMNS}) VALUES ({_SESSION_PLACEHOLDERS})",
            msgspec.structs.astuple(record),
        )
        if self.dry_run:
            self._sessions[record.id] = record.ended_at is not None
            if record.title is not None:
                self._titles[record.title] = record.id

    def append(self, session_id: str, rows: Sequence[MessageRow]) -> int:
        """Append message rows to the session (in this order); return its highest message id afterwards."""
        if self.dry_run or self._store is None:
            self._tails[session_id] = self.local_tail(session_id) + len(rows)
            return self._tails[session_id]
        if rows:
            db = self._store.connection
            ref = db.execute("SELECT ref FROM sessions WHERE id = ?", (session_id,)).get
            db.executemany(
                "INSERT INTO messages (session_ref, role, content, tool_calls, tool_name, tool_call_id, "
                "token_count, created_at, platform_message_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(ref, *row) for row in rows],
            )
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
        self._execute(
            "UPDATE sessions SET message_count = message_count + ?, tool_call_count = tool_call_count + ?, "
            "last_active_at = max(last_active_at, ?), input_tokens = coalesce(?, input_tokens), "
            "output_tokens = coalesce(?, output_tokens) WHERE id = ?",
            (messages, tool_calls, last_active_at, *(tokens or (None, None)), session_id),
        )

    def end_session(self, session_id: str, ended_at: float, reason: str) -> None:
        """End a live session with ``reason`` at ``ended_at`` (a session that has ended keeps its first reason)."""
        self._execute(
            "UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL",
            (ended_at, reason, session_id),
        )
        if self.dry_run:
            self._sessions[session_id] = True

    def set_route(self, routing_key: str, session_id: str, updated_at: float | None) -> None:
        """Point ``routing_key`` at ``session_id``, dated ``updated_at`` (the source's time) or now."""
        self._execute(
            "INSERT INTO routes (routing_key, session_id, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT (routing_key) DO UPDATE SET session_id = excluded.session_id, "
            "updated_at = excluded.updated_at",
            (routing_key, session_id, self._clock() if updated_at is None else updated_at),
        )
        if self.dry_run:
            self._routes[routing_key] = session_id

    def _set_meta(self, key: str, value: str) -> None:
        self._execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

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
