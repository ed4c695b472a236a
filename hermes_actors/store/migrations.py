"""Schema migrations keyed by ``PRAGMA user_version``.

A fresh database gets ``schema.sql`` whole. A database at version ``v < SCHEMA_VERSION`` gets the steps in
``STEPS`` from ``v + 1`` upward, and must end in the same schema a fresh database has
(tests/store/test_migrations.py compares them). A database newer than the code is refused before anything is
written. The version is read again under the write lock, so two processes starting at once migrate once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import resources

import apsw

from hermes_actors.errors import SchemaVersionError, StoreError

__all__ = ["SCHEMA_VERSION", "STEPS", "migrate", "schema_sql", "schema_version"]

SCHEMA_VERSION = 2

# The CJK character class of schema.sql's trigram triggers.
CJK_GLOB = "*[ᄀ-ᇿ぀-ヿㄱ-ㆎ㐀-䶿一-鿿가-힯豈-﫿ｦ-ﾟ𠀀-𱍊]*"


def _v2_handoff_columns(connection: apsw.Connection) -> None:
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


# version -> function that upgrades a database from version - 1 to version.
STEPS: Mapping[int, Callable[[apsw.Connection], None]] = {2: _v2_handoff_columns}


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
            connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")
    except apsw.Error as exc:
        raise StoreError(
            f"migrating {connection.filename!r} from schema version {found} failed: {exc}; "
            "the database was left as it was"
        ) from exc
    return found


def _create(connection: apsw.Connection) -> None:
    if connection.execute("SELECT count(*) FROM sqlite_schema").get:
        raise StoreError(
            f"{connection.filename!r} has tables but no hermes-actors schema version, so it is not a "
            "hermes-actors database; choose another path (hermesctl import-hermes reads a Hermes state.db)"
        )
    connection.execute(schema_sql())
