"""The PostgreSQL schema and its versions: ``schema_pg.sql`` for an empty database, a function per later version.

The version is the ``meta`` row ``schema_version``. :func:`migrate` takes a transaction-level advisory lock first, so
two processes opening one database at once migrate it once: the second waits, then finds it current.
:data:`MIGRATIONS` maps each version to the function that brings a database of the version before it there;
version 1 is the schema file itself.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources

from hermes_actors.errors import SchemaVersionError
from hermes_actors.store.pg.db import Database

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "migrate", "schema_sql", "schema_version"]

_LOCK_KEY = 0x6865726D6573  # 'hermes': the advisory lock every migrating process takes
_VERSION_KEY = "schema_version"


def schema_sql() -> str:
    """The text of ``schema_pg.sql`` (shipped in the package)."""
    return resources.files("hermes_actors.store.pg").joinpath("schema_pg.sql").read_text(encoding="utf-8")


def _create(db: Database) -> None:
    db.execute(schema_sql())


MIGRATIONS: dict[int, Callable[[Database], None]] = {1: _create}
"""Version -> the step that brings a database at the version before it to that version."""

SCHEMA_VERSION = max(MIGRATIONS)


def schema_version(db: Database) -> int:
    """The database's schema version (0: no tables of ours)."""
    if db.value("SELECT to_regclass('meta') IS NOT NULL") is not True:
        return 0
    found = db.value("SELECT value FROM meta WHERE key = %s", (_VERSION_KEY,))
    return 0 if found is None else int(found)


def migrate(db: Database) -> int:
    """Bring the database to :data:`SCHEMA_VERSION`, one step per version, in one transaction; the version."""
    with db.transaction():
        db.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        current = schema_version(db)
        if current > SCHEMA_VERSION:
            raise SchemaVersionError("the PostgreSQL database", current, SCHEMA_VERSION)
        for version in range(current + 1, SCHEMA_VERSION + 1):
            MIGRATIONS[version](db)
            db.execute(
                "INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (_VERSION_KEY, str(version)),
            )
    return SCHEMA_VERSION
