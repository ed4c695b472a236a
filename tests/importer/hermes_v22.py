"""A reference-system ``state.db`` at schema version 22, written from the facts in
shared/reference/hermes-state-v22.md: every table and column named there, the partial unique title index, both
inline-content FTS5 tables (default tokenizer and trigram) kept by insert/update/delete triggers over
``content || ' ' || tool_name || ' ' || tool_calls``, WAL and foreign keys.

:class:`HermesDb` adds sessions, messages and routing entries with the reference system's conventions, so tests
(and bench/import_hermes.py) can build any history, hostile content included.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import apsw

__all__ = ["DDL", "HermesDb", "fts_ids", "fts_trigram_ids", "multimodal"]

DDL = """
CREATE TABLE schema_version (version INTEGER NOT NULL);

CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    user_id TEXT,
    session_key TEXT,
    chat_id TEXT,
    chat_type TEXT,
    thread_id TEXT,
    display_name TEXT,
    origin_json TEXT,
    expiry_finalized INTEGER DEFAULT 0,
    model TEXT,
    model_config TEXT,
    system_prompt TEXT,
    parent_session_id TEXT REFERENCES sessions (id),
    started_at REAL NOT NULL,
    ended_at REAL,
    end_reason TEXT,
    message_count INTEGER DEFAULT 0,
    tool_call_count INTEGER DEFAULT 0,
    input_tokens INTEGER DEFAULT 0,
    output_tokens INTEGER DEFAULT 0,
    cache_read_tokens INTEGER DEFAULT 0,
    cache_write_tokens INTEGER DEFAULT 0,
    reasoning_tokens INTEGER DEFAULT 0,
    cwd TEXT,
    git_branch TEXT,
    git_repo_root TEXT,
    billing_provider TEXT,
    billing_base_url TEXT,
    billing_mode TEXT,
    estimated_cost_usd REAL,
    actual_cost_usd REAL,
    cost_status TEXT,
    cost_source TEXT,
    pricing_version TEXT,
    title TEXT,
    api_call_count INTEGER DEFAULT 0,
    handoff_state TEXT,
    handoff_platform TEXT,
    handoff_error TEXT,
    compression_failure_cooldown_until REAL,
    compression_failure_error TEXT,
    compression_fallback_streak INTEGER DEFAULT 0,
    profile_name TEXT,
    rewind_count INTEGER DEFAULT 0,
    archived INTEGER DEFAULT 0
);
CREATE UNIQUE INDEX idx_sessions_title_unique ON sessions (title) WHERE title IS NOT NULL;
CREATE INDEX idx_sessions_source ON sessions (source);
CREATE INDEX idx_sessions_parent ON sessions (parent_session_id);

CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions (id),
    role TEXT NOT NULL,
    content TEXT,
    tool_call_id TEXT,
    tool_calls TEXT,
    tool_name TEXT,
    effect_disposition TEXT,
    timestamp REAL NOT NULL,
    token_count INTEGER,
    finish_reason TEXT,
    reasoning TEXT,
    reasoning_content TEXT,
    reasoning_details TEXT,
    codex_reasoning_items TEXT,
    codex_message_items TEXT,
    platform_message_id TEXT,
    observed INTEGER DEFAULT 0,
    active INTEGER NOT NULL DEFAULT 1,
    compacted INTEGER DEFAULT 0,
    api_content TEXT
);
CREATE INDEX idx_messages_session ON messages (session_id, timestamp);

CREATE VIRTUAL TABLE messages_fts USING fts5 (content);
CREATE VIRTUAL TABLE messages_fts_trigram USING fts5 (content, tokenize = 'trigram');

CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts (rowid, content)
        VALUES (new.id, coalesce(new.content, '') || ' ' || coalesce(new.tool_name, '') || ' '
                || coalesce(new.tool_calls, ''));
    INSERT INTO messages_fts_trigram (rowid, content)
        VALUES (new.id, coalesce(new.content, '') || ' ' || coalesce(new.tool_name, '') || ' '
                || coalesce(new.tool_calls, ''));
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    DELETE FROM messages_fts WHERE rowid = old.id;
    DELETE FROM messages_fts_trigram WHERE rowid = old.id;
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF content, tool_name, tool_calls ON messages BEGIN
    DELETE FROM messages_fts WHERE rowid = old.id;
    DELETE FROM messages_fts_trigram WHERE rowid = old.id;
    INSERT INTO messages_fts (rowid, content)
        VALUES (new.id, coalesce(new.content, '') || ' ' || coalesce(new.tool_name, '') || ' '
                || coalesce(new.tool_calls, ''));
    INSERT INTO messages_fts_trigram (rowid, content)
        VALUES (new.id, coalesce(new.content, '') || ' ' || coalesce(new.tool_name, '') || ' '
                || coalesce(new.tool_calls, ''));
END;

CREATE TABLE state_meta (key TEXT PRIMARY KEY, value TEXT);

CREATE TABLE gateway_routing (
    scope TEXT NOT NULL DEFAULT '',
    session_key TEXT NOT NULL,
    entry_json TEXT NOT NULL,
    updated_at REAL,
    PRIMARY KEY (scope, session_key)
);

-- Tables that carry no conversation content (their columns are not part of the facts; any will do).
CREATE TABLE session_model_usage (session_id TEXT, model TEXT, input_tokens INTEGER, output_tokens INTEGER);
CREATE TABLE compression_locks (session_id TEXT PRIMARY KEY, acquired_at REAL);
CREATE TABLE async_delegations (id TEXT PRIMARY KEY, session_id TEXT, state TEXT);
CREATE TABLE telegram_dm_topic_mode (chat_id TEXT PRIMARY KEY, mode TEXT);
CREATE TABLE telegram_dm_topic_bindings (chat_id TEXT, topic_id TEXT, session_id TEXT);
"""


def multimodal(parts: Sequence[Any], *, ensure_ascii: bool = True) -> str:
    """A content value as the reference system stores a list of parts."""
    return "\x00json:" + json.dumps(list(parts), ensure_ascii=ensure_ascii)


def fts_ids(db: apsw.Connection, query: str) -> set[int]:
    """The message ids the reference system's word index finds for ``query``."""
    return {int(r) for (r,) in db.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?", (query,))}


def fts_trigram_ids(db: apsw.Connection, query: str) -> set[int]:
    """The message ids the reference system's trigram index finds for ``query``."""
    sql = "SELECT rowid FROM messages_fts_trigram WHERE messages_fts_trigram MATCH ?"
    return {int(r) for (r,) in db.execute(sql, (query,))}


class HermesDb:
    """A writable reference database for fixtures. Close it (or use ``with``) before importing."""

    def __init__(self, path: Path, *, version: int = 22) -> None:
        self.path = path
        self.db = apsw.Connection(str(path))
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA foreign_keys = ON")
        with self.db:
            self.db.execute(DDL)
            self.db.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
            self.db.execute("INSERT INTO state_meta (key, value) VALUES ('last_auto_prune', '1780000000')")
        self._clock = 1_780_000_000.0

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> HermesDb:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def at(self, when: float) -> None:
        """Set the fixture's clock: later rows get times from ``when`` on."""
        self._clock = when

    def tick(self, seconds: float = 1.0) -> float:
        self._clock += seconds
        return self._clock

    def session(
        self,
        session_id: str,
        *,
        source: str = "telegram",
        session_key: str | None = None,
        chat_type: str | None = "dm",
        chat_id: str | None = None,
        user_id: str | None = None,
        thread_id: str | None = None,
        origin: dict[str, Any] | None = None,
        title: str | None = None,
        parent: str | None = None,
        started_at: float | None = None,
        ended_at: float | None = None,
        end_reason: str | None = None,
        model: str | None = "hermes-4",
        system_prompt: str | None = "You are Hermes.",
        input_tokens: int = 0,
        output_tokens: int = 0,
        **extra: Any,
    ) -> str:
        """Insert a session; ``extra`` sets any other column (``cwd``, ``archived``, ...)."""
        values: dict[str, Any] = {
            "id": session_id,
            "source": source,
            "user_id": user_id,
            "session_key": session_key,
            "chat_id": chat_id,
            "chat_type": chat_type,
            "thread_id": thread_id,
            "display_name": None,
            "origin_json": json.dumps(origin) if origin is not None else None,
            "model": model,
            "system_prompt": system_prompt,
            "parent_session_id": parent,
            "started_at": self.tick() if started_at is None else started_at,
            "ended_at": ended_at,
            "end_reason": end_reason,
            "title": title,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            **extra,
        }
        names = ", ".join(values)
        with self.db:
            self.db.execute(
                f"INSERT INTO sessions ({names}) VALUES ({', '.join('?' * len(values))})", tuple(values.values())
            )
        return session_id

    def message(
        self,
        session_id: str,
        role: str,
        content: str | bytes | None,
        *,
        tool_calls: str | None = None,
        tool_name: str | None = None,
        tool_call_id: str | None = None,
        active: int = 1,
        compacted: int = 0,
        timestamp: float | None = None,
        platform_message_id: str | None = None,
        **extra: Any,
    ) -> int:
        """Insert a message and return its id; ``bytes`` content is stored as TEXT of exactly those bytes."""
        values: dict[str, Any] = {
            "session_id": session_id,
            "role": role,
            "tool_calls": tool_calls,
            "tool_name": tool_name,
            "tool_call_id": tool_call_id,
            "timestamp": self.tick() if timestamp is None else timestamp,
            "platform_message_id": platform_message_id,
            "active": active,
            "compacted": compacted,
            **extra,
        }
        names = ", ".join(["content", *values])
        holders = ", ".join(["CAST(? AS TEXT)" if isinstance(content, bytes) else "?", *("?" * len(values))])
        with self.db:
            self.db.execute(f"INSERT INTO messages ({names}) VALUES ({holders})", (content, *values.values()))
        return int(self.db.last_insert_rowid())

    def messages(
        self, session_id: str, texts: Sequence[str], *, roles: Sequence[str] = ("user", "assistant")
    ) -> list[int]:
        """Insert ``texts`` in one transaction, roles alternating as given; return their ids."""
        ids: list[int] = []
        with self.db:
            for index, text in enumerate(texts):
                self.db.execute(
                    "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
                    (session_id, roles[index % len(roles)], text, self.tick(0.01)),
                )
                ids.append(int(self.db.last_insert_rowid()))
        return ids

    def route(
        self,
        key: str,
        session_id: str,
        *,
        scope: str = "",
        origin: dict[str, Any] | None = None,
        updated_at: float | None = None,
        **fields: Any,
    ) -> None:
        """Insert a gateway_routing entry."""
        entry: dict[str, Any] = {
            "session_key": key,
            "session_id": session_id,
            "created_at": "2026-05-28T10:00:00",
            "updated_at": "2026-05-28T10:00:00",
            "platform": key.split(":")[2] if key.count(":") >= 2 else None,
            "input_tokens": 0,
            "output_tokens": 0,
            "suspended": False,
            **fields,
        }
        if origin is not None:
            entry["origin"] = origin
        with self.db:
            self.db.execute(
                "INSERT INTO gateway_routing (scope, session_key, entry_json, updated_at) VALUES (?, ?, ?, ?)",
                (scope, key, json.dumps(entry), self.tick() if updated_at is None else updated_at),
            )
