"""A pooled connection of :class:`~hermes_actors.store.pg.db.Database`: its statements sent through libpq
(:class:`~hermes_actors.store.pg.direct.DirectStatements`, kept per connection), and the settings each pool gives
its connections."""

from __future__ import annotations

from typing import Any

import msgspec
import psycopg
from psycopg.types.json import set_json_loads

from hermes_actors.store.pg.direct import DirectStatements

__all__ = ["PooledConnection", "custom_plans", "direct", "generic_plans", "sent"]


class PooledConnection(psycopg.Connection[Any]):
    """A pooled connection that keeps its :class:`~hermes_actors.store.pg.direct.DirectStatements` for
    :class:`~hermes_actors.store.pg.db.Database`'s single statements (their prepared names and placeholders are per
    connection)."""

    _direct: DirectStatements | None = None

    def direct(self) -> DirectStatements:
        """The connection's statements sent through libpq."""
        direct = self._direct
        if direct is None:
            direct = self._direct = DirectStatements(self)
        return direct


def direct(connection: psycopg.Connection[Any]) -> DirectStatements:
    """``connection``'s :class:`~hermes_actors.store.pg.direct.DirectStatements` (kept by a pooled one)."""
    return connection.direct() if isinstance(connection, PooledConnection) else DirectStatements(connection)


def sent(connection: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """``connection`` with the statements deferred on it sent
    (:meth:`~hermes_actors.store.pg.direct.DirectStatements.defer`): it is about to be used through psycopg itself,
    which would not send them first."""
    if isinstance(connection, PooledConnection) and connection._direct is not None:
        connection._direct.flush()
    return connection


def custom_plans(connection: psycopg.Connection[Any]) -> None:
    """Plan every prepared statement for its parameters' values (never a generic plan): see
    :class:`~hermes_actors.store.pg.db.Database`."""
    _json_by_msgspec(connection)
    connection.execute(b"SET plan_cache_mode = force_custom_plan")


def generic_plans(connection: psycopg.Connection[Any]) -> None:
    """Keep one plan per prepared statement, made without its values: see
    :meth:`~hermes_actors.store.pg.db.Database.execute`."""
    _json_by_msgspec(connection)
    connection.execute(b"SET plan_cache_mode = force_generic_plan")


def _json_by_msgspec(connection: psycopg.Connection[Any]) -> None:
    """Load ``json`` and ``jsonb`` results with msgspec's decoder (the same values as the standard library's, in a
    fraction of its time: a fenced turn reads back three ``json_agg`` results)."""
    set_json_loads(msgspec.json.decode, connection)
