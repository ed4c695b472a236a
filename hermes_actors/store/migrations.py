"""Schema migrations keyed by ``PRAGMA user_version``.

A fresh database gets ``schema.sql`` whole. A database at version ``v < SCHEMA_VERSION`` gets the steps in
``STEPS`` from ``v + 1`` upward, and must end in the same schema a fresh database has
(tests/store/test_migrations.py compares them). A database newer than the code is refused before anything is
written. The version is read again under the write lock, so two processes starting at once migrate once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from importlib import resources

import apsw

from hermes_actors.errors import SchemaVersionError, StoreError
from hermes_actors.routing import format_platform_segment
from hermes_actors.store.connection import fault_of

__all__ = ["SCHEMA_VERSION", "STEPS", "migrate", "schema_sql", "schema_version"]

SCHEMA_VERSION = 14

# The CJK character class of schema.sql's trigram triggers.
CJK_GLOB = "*[ᄀ-ᇿ぀-ヿㄱ-ㆎ㐀-䶿一-鿿가-힯豈-﫿ｦ-ﾟ𠀀-𱍊]*"


def _v2(connection: apsw.Connection) -> None:
    """Handoff columns, the leases owner index, a plain trigram index, and messages keyed by sessions.ref."""
    connection.execute("ALTER TABLE home_channels ADD COLUMN chat_type TEXT")
    connection.execute("ALTER TABLE outbox ADD COLUMN abandoned_at REAL")
    connection.execute("DROP INDEX outbox_unsent")
    connection.execute(
        "CREATE INDEX outbox_unsent ON outbox (platform, next_attempt_at, id) "
        "WHERE sent_at IS NULL AND abandoned_at IS NULL"
    )
    connection.execute("CREATE INDEX leases_owner ON leases (owner)")
    # Version 1 declared the trigram index with remove_diacritics, which keeps LIKE from using it: rebuild it.
    connection.execute("DROP TABLE messages_fts_cjk")
    connection.execute(
        "CREATE VIRTUAL TABLE messages_fts_cjk USING fts5 (content, content = 'messages', content_rowid = 'id', "
        "tokenize = 'trigram', detail = none)"
    )
    connection.execute(
        "INSERT INTO messages_fts_cjk (rowid, content) SELECT id, content FROM messages WHERE content GLOB ?",
        (CJK_GLOB,),
    )
    _rebuild_sessions_and_messages(connection)


def _schema_statements(table: str) -> list[str]:
    """Return the statements of schema.sql that create ``table`` or an index or trigger on it, in file order."""
    statements: list[str] = []
    pending = ""
    for line in schema_sql().splitlines(keepends=True):
        pending += line
        if not apsw.complete(pending):
            continue
        statement = "\n".join(ln for ln in pending.splitlines() if not ln.lstrip().startswith("--")).strip()
        pending = ""
        target = re.search(r"\bON (\w+)", statement) if not statement.startswith("CREATE TABLE") else None
        if statement.startswith(f"CREATE TABLE {table} ") or (target is not None and target[1] == table):
            statements.append(statement)
    return statements


def _rebuild_sessions_and_messages(connection: apsw.Connection) -> None:
    """Give sessions an integer ``ref`` and point messages at it (foreign keys are off while this runs)."""
    columns = [str(row[1]) for row in connection.execute("PRAGMA table_info(sessions)") if row[1] != "id"]
    listed = ", ".join(columns)
    message_columns = [
        str(row[1]) for row in connection.execute("PRAGMA table_info(messages)") if row[1] not in ("id", "session_id")
    ]
    message_listed = ", ".join(message_columns)
    sessions_ddl, messages_ddl = _schema_statements("sessions"), _schema_statements("messages")
    create_sessions, create_messages = sessions_ddl[0], messages_ddl[0]
    connection.execute(create_sessions.replace("CREATE TABLE sessions ", "CREATE TABLE sessions_v2 ", 1))
    connection.execute(f"INSERT INTO sessions_v2 (ref, id, {listed}) SELECT rowid, id, {listed} FROM sessions")
    connection.execute(create_messages.replace("CREATE TABLE messages ", "CREATE TABLE messages_v2 ", 1))
    connection.execute(
        f"INSERT INTO messages_v2 (id, session_ref, {message_listed}) "
        f"SELECT m.id, s.ref, {', '.join('m.' + c for c in message_columns)} "
        "FROM messages m JOIN sessions_v2 s ON s.id = m.session_id ORDER BY m.id"
    )
    connection.execute("DROP TABLE messages")  # its index and triggers go with it
    connection.execute("DROP TABLE sessions")
    connection.execute("ALTER TABLE sessions_v2 RENAME TO sessions")
    connection.execute("ALTER TABLE messages_v2 RENAME TO messages")
    for statement in sessions_ddl[1:] + messages_ddl[1:]:  # their indexes and triggers
        connection.execute(statement)


# version -> function that upgrades a database from version - 1 to version.
def _v3(connection: apsw.Connection) -> None:
    """The home channel's workspace/tenant, so a handoff reaches the key its replies will arrive under."""
    connection.execute("ALTER TABLE home_channels ADD COLUMN scope_id TEXT")


def _v4(connection: apsw.Connection) -> None:
    """The attachments table, and messages without content (tool calls) indexed as empty documents.

    Before, the word index skipped such rows, and FTS5's integrity-check (which compares the index with the
    table row for row) reported every healthy store holding a tool call as corrupt.
    """
    for statement in _schema_statements("attachments"):
        connection.execute(statement)
    for trigger in ("messages_fts_insert", "messages_fts_delete", "messages_fts_update"):
        connection.execute(f"DROP TRIGGER {trigger}")
    for statement in _schema_statements("messages"):
        if re.match(r"CREATE TRIGGER messages_fts_(insert|delete|update) ", statement):
            connection.execute(statement)
    connection.execute("INSERT INTO messages_fts (rowid, content) SELECT id, NULL FROM messages WHERE content IS NULL")


def _v5(connection: apsw.Connection) -> None:
    """Lease epochs (fencing), the owner of each inbox row, and memories keyed by the whole principal.

    A memory written under ``<platform>:<participant>`` by a session that had a workspace or bot account moves to
    ``<platform>.<scope>~<account>:<participant>``, the key that session's principal has now.
    """
    connection.execute("ALTER TABLE leases ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0")
    connection.execute("ALTER TABLE inbox ADD COLUMN owner TEXT")
    rows = connection.execute(
        "SELECT m.id, s.source, s.scope_id, s.account_id, s.user_id FROM memories AS m "
        "JOIN sessions AS s ON s.id = m.source_session_id "
        "WHERE coalesce(s.scope_id, '') != '' OR coalesce(s.account_id, '') != ''"
    ).fetchall()
    for memory_id, platform, scope_id, account_id, user_id in rows:
        if user_id:
            segment = format_platform_segment(str(platform), str(scope_id or ""), str(account_id or ""))
            key = f"{segment}:{user_id}"
            connection.execute("UPDATE memories SET user_key = ? WHERE id = ?", (key, memory_id))


def _v6(connection: apsw.Connection) -> None:
    """The frozen tool list of a session and whether its token counts include estimates.

    A database from version 1 already has both: step 2 rebuilt ``sessions`` from this schema.sql. An older session
    keeps ``tools`` NULL; its next turn freezes what goes before its conversation.
    """
    columns = {str(row[1]) for row in connection.execute("PRAGMA table_info(sessions)")}
    if "tools" not in columns:
        connection.execute("ALTER TABLE sessions ADD COLUMN tools TEXT")
    if "tokens_estimated" not in columns:
        connection.execute("ALTER TABLE sessions ADD COLUMN tokens_estimated INTEGER NOT NULL DEFAULT 0")


def _v7(connection: apsw.Connection) -> None:
    """The responses of the API's ``/v1/responses``, tied to their sessions."""
    for statement in _schema_statements("api_responses"):
        connection.execute(statement)


def _v8(connection: apsw.Connection) -> None:
    """The named agent of each session; an older session keeps NULL, which is the default agent that served it.

    A database from version 1 has the column already: step 2 rebuilt ``sessions`` from this schema.sql.
    """
    if "agent" not in {str(row[1]) for row in connection.execute("PRAGMA table_info(sessions)")}:
        connection.execute("ALTER TABLE sessions ADD COLUMN agent TEXT")


_CONTROL_PLATFORMS = (("timer", "hermes-timer"), ("admin", "hermes-admin"))  # before version 9


def _v9(connection: apsw.Connection) -> None:
    """The kind of each inbox row: a platform's message, or a cluster's control row (a reset, an operator's change).

    A control row of an older cluster carried its kind as a platform name; the step gives it the kind and no
    platform. A database tests rebuilt from this schema.sql has the column already.
    """
    if "kind" not in {str(row[1]) for row in connection.execute("PRAGMA table_info(inbox)")}:
        connection.execute(
            "ALTER TABLE inbox ADD COLUMN kind TEXT NOT NULL DEFAULT 'message' "
            "CHECK (kind IN ('message', 'timer', 'admin'))"
        )
    for kind, platform in _CONTROL_PLATFORMS:
        connection.execute("UPDATE inbox SET kind = ?, platform = '' WHERE platform = ?", (kind, platform))


def _v10(connection: apsw.Connection) -> None:
    """The conversations of the API's ``/v1/conversations``. A database tests rebuilt from this schema.sql has the
    table already."""
    if connection.execute("SELECT 1 FROM sqlite_schema WHERE name = 'api_conversations'").fetchall():
        return
    for statement in _schema_statements("api_conversations"):
        connection.execute(statement)


def _v11(connection: apsw.Connection) -> None:
    """The dead letters: messages, replies and event deliveries that could not be done. A database tests rebuilt
    from this schema.sql has the table already."""
    if connection.execute("SELECT 1 FROM sqlite_schema WHERE name = 'dead_letters'").fetchall():
        return
    for statement in _schema_statements("dead_letters"):
        connection.execute(statement)


def _v12(connection: apsw.Connection) -> None:
    """The scheduled turns (``store.jobs``). A database tests rebuilt from this schema.sql has the table already."""
    if connection.execute("SELECT 1 FROM sqlite_schema WHERE name = 'jobs'").fetchall():
        return
    for statement in _schema_statements("jobs"):
        connection.execute(statement)


def _v13(connection: apsw.Connection) -> None:
    """Tool calls waiting for a person's decision (``store.approvals``). A database tests rebuilt from this
    schema.sql has the table already."""
    if connection.execute("SELECT 1 FROM sqlite_schema WHERE name = 'approvals'").fetchall():
        return
    for statement in _schema_statements("approvals"):
        connection.execute(statement)


def _v14(connection: apsw.Connection) -> None:
    """The titled sessions in activity order (``sessions_titled``), so discovery's title pass reads no untitled
    session. A database step 2 rebuilt from this schema.sql has the index already."""
    if connection.execute("SELECT 1 FROM sqlite_schema WHERE name = 'sessions_titled'").fetchall():
        return
    for statement in _schema_statements("sessions"):
        if statement.startswith("CREATE INDEX sessions_titled "):
            connection.execute(statement)


STEPS: Mapping[int, Callable[[apsw.Connection], None]] = {
    2: _v2,
    3: _v3,
    4: _v4,
    5: _v5,
    6: _v6,
    7: _v7,
    8: _v8,
    9: _v9,
    10: _v10,
    11: _v11,
    12: _v12,
    13: _v13,
    14: _v14,
}


def schema_sql() -> str:
    """Return the packaged copy of ``schema.sql``."""
    return resources.files("hermes_actors.store").joinpath("schema.sql").read_text(encoding="utf-8")


def schema_version(connection: apsw.Connection) -> int:
    """Return the database's ``PRAGMA user_version`` (0 for a new file)."""
    return int(connection.execute("PRAGMA user_version").get)


def _refuse_newer(connection: apsw.Connection, found: int) -> None:
    if found > SCHEMA_VERSION:
        raise SchemaVersionError(connection.filename or ":memory:", found, SCHEMA_VERSION)


def migrate(connection: apsw.Connection) -> int:
    """Bring the database up to :data:`SCHEMA_VERSION` in one transaction; return the version it was at.

    Raises :class:`SchemaVersionError` for a newer database and :class:`StoreError` for a file that is not a
    hermes-actors database; either way nothing is written.
    """
    found = schema_version(connection)
    _refuse_newer(connection, found)
    if found == SCHEMA_VERSION:
        return found
    # Steps may rebuild tables; with foreign keys on, dropping a parent table would cascade into its children.
    # The switch only works outside a transaction, and the keys are checked before the commit instead.
    connection.execute("PRAGMA foreign_keys = OFF")
    try:
        connection.execute("BEGIN IMMEDIATE")
        try:
            found = schema_version(connection)
            _refuse_newer(connection, found)
            if found == 0:
                _create(connection)
            else:
                for version in range(found + 1, SCHEMA_VERSION + 1):
                    STEPS[version](connection)
                broken = connection.execute("PRAGMA foreign_key_check").fetchall()
                if broken:
                    raise StoreError(f"migration left {len(broken)} rows with dangling references, e.g. {broken[0]}")
            connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")
    except apsw.Error as exc:
        raise StoreError(
            f"migrating {connection.filename!r} from schema version {found} failed: {exc}; "
            "the database was left as it was",
            fault=fault_of(exc),
        ) from exc
    finally:
        connection.execute("PRAGMA foreign_keys = ON")
    return found


def _create(connection: apsw.Connection) -> None:
    if connection.execute("SELECT count(*) FROM sqlite_schema").get:
        raise StoreError(
            f"{connection.filename!r} has tables but no hermes-actors schema version, so it is not a "
            "hermes-actors database; choose another path (hermesctl import-hermes reads a Hermes state.db)"
        )
    connection.execute(schema_sql())
