"""Reading the reference system's ``state.db`` (schema version 22), read-only, as one snapshot.

The file is opened with ``SQLITE_OPEN_READONLY`` and ``query_only``, so nothing can write to it, and every read
happens inside one read transaction: with the reference system still running (WAL), the import sees one
consistent moment of it, and the other system's writers are never blocked (a WAL reader only holds back
checkpoints). Text columns are read as bytes and decoded by :func:`.content.decode_text`, so a value that is not
UTF-8 is repaired and reported instead of stopping the import. Rows come back as typed Structs; JSON written by
the other system (``origin_json``, routing entries) is decoded with the standard library, which accepts the
lone-surrogate escapes it may contain (msgspec refuses them).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import apsw

from hermes_actors.errors import HermesError
from hermes_actors.importer.source_records import (
    HermesMessage,
    HermesRoute,
    HermesSession,
    Repair,
    SessionStub,
    int_value,
    json_value,
    origin_value,
    route_value,
    timestamp_value,
)
from hermes_actors.store.content import decode_text

__all__ = [
    "HERMES_SCHEMA_VERSION",
    "HermesMessage",
    "HermesRoute",
    "HermesSession",
    "HermesSource",
    "Repair",
    "SessionStub",
    "SourceDatabaseError",
]

HERMES_SCHEMA_VERSION = 22

_SESSION_TEXT = (
    "id",
    "source",
    "user_id",
    "session_key",
    "chat_id",
    "chat_type",
    "thread_id",
    "display_name",
    "origin_json",
    "model",
    "system_prompt",
    "parent_session_id",
    "end_reason",
    "title",
)
_SESSION_NUMBERS = ("started_at", "ended_at", "input_tokens", "output_tokens")
_MESSAGE_TEXT = ("role", "content", "tool_call_id", "tool_calls", "tool_name", "platform_message_id")
_MESSAGE_NUMBERS = ("id", "timestamp", "token_count", "active", "compacted")
# What the import reads; every other column is reported as not carried over when it holds values.
_CARRIED = {
    "sessions": {*_SESSION_TEXT, *_SESSION_NUMBERS, "message_count", "tool_call_count"},
    "messages": {*_MESSAGE_TEXT, *_MESSAGE_NUMBERS, "session_id"},
}
_REQUIRED_TABLES = ("sessions", "messages", "gateway_routing")
_ROUTING_COLUMNS = ("scope", "session_key", "entry_json", "updated_at")
_SESSIONS_JSON = ("sessions.json", os.path.join("sessions", "sessions.json"))


class SourceDatabaseError(HermesError):
    """The reference database cannot be imported: missing, unreadable, foreign or of another schema version.

    Nothing was read into the store and nothing was written to the file. ``found_version`` is the schema
    version the file declares, when it declares one.
    """

    def __init__(self, message: str, *, found_version: int | None = None) -> None:
        super().__init__(message)
        self.found_version = found_version


def _select(columns: tuple[str, ...] | list[str], text: tuple[str, ...] | list[str]) -> str:
    return ", ".join(f"CAST({c} AS BLOB)" if c in text else c for c in columns)


class HermesSource:
    """The reference system's database, open read-only inside one read transaction. Use it as a context manager."""

    def __init__(self, path: Path, connection: apsw.Connection, version: int) -> None:
        self.path = path
        self.version = version
        self._db = connection

    @classmethod
    def open(cls, path: str | Path) -> HermesSource:
        """Open ``path`` read-only and check that it is a schema-22 reference database.

        Raises :class:`SourceDatabaseError` naming the problem and the fix otherwise.
        """
        path = Path(path)
        if not path.exists():
            raise SourceDatabaseError(f"no file at {path}; pass the reference system's state.db (~/.hermes/state.db)")
        if path.is_dir():
            raise SourceDatabaseError(f"{path} is a directory; pass the state.db file inside it")
        try:
            connection = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        except apsw.Error as exc:
            raise SourceDatabaseError(f"cannot open {path}: {exc}; check that you may read it") from exc
        try:
            connection.set_busy_timeout(5000)
            connection.execute("PRAGMA query_only = ON")
            connection.execute("BEGIN")  # one snapshot for everything below
            version = _check_schema(connection, path)
        except apsw.NotADBError as exc:
            connection.close()
            raise SourceDatabaseError(
                f"{path} is not a SQLite database; pass the reference system's state.db (~/.hermes/state.db)"
            ) from exc
        except apsw.Error as exc:
            connection.close()
            raise SourceDatabaseError(
                f"cannot read {path}: {exc}; pass the reference system's state.db (~/.hermes/state.db)"
            ) from exc
        except BaseException:
            connection.close()
            raise
        return cls(path, connection, version)

    def close(self) -> None:
        """End the read transaction and close the file."""
        self._db.close()

    def __enter__(self) -> HermesSource:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- sessions ----------------------------------------------------------------------------------------------

    def session_stubs(self) -> list[SessionStub]:
        """Return every session's id, parent and start, oldest first."""
        rows = self._db.execute(
            "SELECT CAST(id AS BLOB), CAST(parent_session_id AS BLOB), started_at FROM sessions ORDER BY started_at, id"
        )
        stubs: list[SessionStub] = []
        for raw_id, raw_parent, started in rows:
            session_id, repaired = decode_text(raw_id)
            parent, _ = decode_text(raw_parent)
            stubs.append(
                SessionStub(
                    id=session_id or "",
                    parent_session_id=parent,
                    started_at=float(started or 0.0),
                    readable_id=not repaired,
                )
            )
        return stubs

    def session(self, session_id: str) -> HermesSession | None:
        """Return one session by id, or ``None``."""
        columns = [*_SESSION_TEXT, *_SESSION_NUMBERS]
        row = self._db.execute(
            f"SELECT {_select(columns, _SESSION_TEXT)} FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        if row is None:
            return None
        values: dict[str, Any] = {}
        repairs: list[Repair] = []
        for name, raw in zip(columns, row, strict=True):
            if name in _SESSION_TEXT:
                values[name], repaired = decode_text(raw)
                if repaired:
                    repairs.append(Repair(table="sessions", row=session_id, column=name, raw=bytes(raw)))
            else:
                values[name] = raw
        origin = origin_value(json_value(values.pop("origin_json")), values["source"])
        return HermesSession(
            **{k: v for k, v in values.items() if k not in _SESSION_NUMBERS},
            origin=origin,
            started_at=float(values["started_at"] or 0.0),
            ended_at=float(values["ended_at"]) if values["ended_at"] is not None else None,
            input_tokens=int_value(values["input_tokens"]),
            output_tokens=int_value(values["output_tokens"]),
            repairs=tuple(repairs),
        )

    def message_counts(self) -> dict[str, int]:
        """Return how many message rows each session has (every row, whatever its state)."""
        rows = self._db.execute("SELECT CAST(session_id AS BLOB), count(*) FROM messages GROUP BY session_id")
        return {decode_text(sid)[0] or "": int(n) for sid, n in rows}

    def messages(self, session_id: str, *, after_id: int = 0) -> Iterator[HermesMessage]:
        """Yield the session's messages with an id above ``after_id``, in id order."""
        columns = [*_MESSAGE_NUMBERS, *_MESSAGE_TEXT]
        sql = f"SELECT {_select(columns, _MESSAGE_TEXT)} FROM messages WHERE session_id = ? AND id > ? ORDER BY id"
        for row in self._db.execute(sql, (session_id, after_id)):
            values = dict(zip(columns, row, strict=True))
            repairs: list[Repair] = []
            for name in _MESSAGE_TEXT:
                raw = values[name]
                values[name], repaired = decode_text(raw)
                if repaired:
                    repairs.append(Repair(table="messages", row=str(values["id"]), column=name, raw=bytes(raw)))
            yield HermesMessage(
                id=int(values["id"]),
                role=values["role"] or "",
                content=values["content"],
                timestamp=float(values["timestamp"] or 0.0),
                tool_call_id=values["tool_call_id"],
                tool_calls=values["tool_calls"],
                tool_name=values["tool_name"],
                token_count=int(values["token_count"]) if values["token_count"] is not None else None,
                platform_message_id=values["platform_message_id"],
                active=bool(values["active"]),
                compacted=bool(values["compacted"]),
                repairs=tuple(repairs),
            )

    # -- routing -----------------------------------------------------------------------------------------------

    def routes(self) -> tuple[list[HermesRoute], list[str]]:
        """Return the routing entries (``gateway_routing``, then any ``sessions.json`` beside the file).

        The second list holds warnings about ``sessions.json`` files that could not be read.
        """
        routes: list[HermesRoute] = []
        rows = self._db.execute(
            "SELECT CAST(session_key AS BLOB), CAST(entry_json AS BLOB), updated_at FROM gateway_routing "
            "ORDER BY updated_at, scope, session_key"
        )
        for raw_key, raw_entry, updated in rows:
            key, _ = decode_text(raw_key)
            entry, _ = decode_text(raw_entry)
            routes.append(route_value("gateway_routing", key or "", json_value(entry), timestamp_value(updated)))
        warnings: list[str] = []
        for name in _SESSIONS_JSON:
            path = self.path.parent / name
            if not path.is_file():
                continue
            try:
                document = json.loads(path.read_bytes().decode("utf-8", "replace"))
            except (OSError, ValueError, RecursionError) as exc:
                warnings.append(f"{path} could not be read ({exc}); its routing entries were not imported")
                continue
            if not isinstance(document, dict):
                warnings.append(f"{path} is not a JSON object of routing entries; it was not imported")
                continue
            for key, entry in document.items():
                if key != "_README":
                    routes.append(route_value(str(path), key, entry, None))
        return routes, warnings

    # -- what is not carried over ------------------------------------------------------------------------------

    def uncarried_values(self) -> dict[str, int]:
        """Return ``{"table.column": rows}`` for columns the import does not carry and that hold a value.

        A value is held when it is neither NULL, 0 nor the empty string (the columns' defaults).
        """
        counts: dict[str, int] = {}
        for table, carried in _CARRIED.items():
            names = [str(row[1]) for row in self._db.execute(f"PRAGMA table_info({table})")]
            extra = [name for name in names if name not in carried]
            if not extra:
                continue
            sums = ", ".join(f"total(coalesce(\"{name}\", 0) NOT IN (0, ''))" for name in extra)
            row = self._db.execute(f"SELECT {sums} FROM {table}").fetchone() or ()
            counts.update({f"{table}.{name}": int(n) for name, n in zip(extra, row, strict=True) if n})
        return counts


def _columns(db: apsw.Connection, table: str) -> set[str]:
    return {str(row[1]) for row in db.execute(f"PRAGMA table_info({table})")}


def _check_schema(db: apsw.Connection, path: Path) -> int:
    """Return the schema version after checking that ``db`` is a reference database we can read."""
    tables = {str(name) for (name,) in db.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    if "schema_version" not in tables:
        if {"routes", "inbox", "outbox"} <= tables:
            raise SourceDatabaseError(
                f"{path} is a hermes-actors database, not the reference system's; "
                "pass the state.db the reference system (hermes) wrote"
            )
        raise SourceDatabaseError(
            f"{path} is not the reference system's state.db: it has no schema_version table; "
            "pass the state.db hermes wrote (~/.hermes/state.db)"
        )
    found = db.execute("SELECT max(version) FROM schema_version").get
    if not isinstance(found, int):
        raise SourceDatabaseError(f"{path} records no schema version (schema_version is empty); it cannot be read")
    if found > HERMES_SCHEMA_VERSION:
        raise SourceDatabaseError(
            f"{path} has schema version {found}; this hermes-actors understands {HERMES_SCHEMA_VERSION}: "
            "upgrade hermes-actors to import it (nothing was changed)",
            found_version=found,
        )
    if found < HERMES_SCHEMA_VERSION:
        raise SourceDatabaseError(
            f"{path} has schema version {found}; this hermes-actors understands {HERMES_SCHEMA_VERSION}: "
            "open it once with the reference system (hermes) to upgrade it, then import again",
            found_version=found,
        )
    needed = {
        "sessions": {*_SESSION_TEXT, *_SESSION_NUMBERS},
        "messages": {*_MESSAGE_TEXT, *_MESSAGE_NUMBERS, "session_id"},
        "gateway_routing": set(_ROUTING_COLUMNS),
    }
    for table in _REQUIRED_TABLES:
        if table not in tables:
            raise SourceDatabaseError(
                f"{path} says schema version {found} but has no {table} table; it is damaged or not hermes's"
            )
        missing = sorted(needed[table] - _columns(db, table))
        if missing:
            raise SourceDatabaseError(
                f"{path} says schema version {found} but its {table} table lacks {', '.join(missing)}; "
                "it is damaged or not hermes's",
                found_version=found,
            )
    return found
