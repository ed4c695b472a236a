"""A group commit's transaction with its control statements sent together: fewer round trips per batch.

:class:`~hermes_actors.store.pg.writer.PgWriter` commits a batch of writes in one transaction, each write in a
savepoint of its own (a failed write is rolled back alone), and asks for the transaction's id first (a commit cut off
by a lost connection is resolved against the server by it). Through :meth:`Database.transaction
<hermes_actors.store.pg.db.Database.transaction>` that is ``BEGIN``, ``SELECT pg_current_xact_id()``, then
``SAVEPOINT`` and ``RELEASE`` around every write, then ``COMMIT``: each a round trip. Here they ride together, as
statements sent through libpq (:mod:`~hermes_actors.store.pg.direct`): ``BEGIN; SAVEPOINT; SELECT
pg_current_xact_id()`` once, in one pipeline with the batch's first statement, ``RELEASE; SAVEPOINT`` between two
writes, ``COMMIT`` (which commits an open savepoint's work too) at the end: ``1 + n`` round trips for ``n`` writes
instead of ``3 + 2n``, the same transaction. A batch whose writes sent no statement begins no transaction at all.

The transaction also sets ``plan_cache_mode = auto`` for itself (``SET LOCAL``): a turn's writes are found by their
keys, so PostgreSQL may keep one generic plan per prepared statement instead of planning each for its values (the
connections' default, ``force_custom_plan``, is for the searches: :class:`~hermes_actors.store.pg.db.Database`).
Planning was half of PostgreSQL's time for a turn's statements. A hot statement outside a transaction (a host's
pull, an ingress row, a reply's attempt and its record) gets a generic plan from
:meth:`~hermes_actors.store.pg.db.Database.execute` (``keyed``) instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psycopg

from hermes_actors.errors import StoreError
from hermes_actors.store.pg.db import CommitUnknownError, Database, direct, store_error

__all__ = ["GroupTransaction", "group_transaction"]

# Sent with the transaction's first statement (DirectStatements.defer); the last one's result is its id.
_BEGIN = (
    b"BEGIN",
    b"SET LOCAL plan_cache_mode = auto",
    b"SAVEPOINT hermes_write",
    b"SELECT pg_current_xact_id()::text",
)
_NEXT = b"RELEASE SAVEPOINT hermes_write; SAVEPOINT hermes_write"
_UNDO = b"ROLLBACK TO SAVEPOINT hermes_write"


class GroupTransaction:
    """The open transaction of one group commit: :meth:`write` around each write, then leave the block to commit."""

    def __init__(self, database: Database, connection: psycopg.Connection[Any]) -> None:
        self._database = database
        self._connection = connection
        self._statements = direct(connection)
        self._fresh = True  # the savepoint opened last has seen no write yet

    def _send(self, statements: bytes, doing: str) -> None:
        try:
            self._statements.simple(statements)
        except psycopg.Error as exc:
            raise store_error(exc, doing) from exc

    @contextmanager
    def write(self) -> Iterator[None]:
        """One write in its savepoint: rolled back alone when the block raises (the exception goes on)."""
        if not self._fresh and not self._statements.deferring:  # else the savepoint begun ahead has seen nothing
            self._send(_NEXT, "a savepoint")
        self._fresh = False
        try:
            yield
        except BaseException:
            if not self._connection.broken and not self._statements.deferring:
                self._send(_UNDO, "a savepoint's rollback")
                self._database.forget_locks()
            raise

    @property
    def broken(self) -> bool:
        """Whether the connection was lost (nothing of the transaction can commit now)."""
        return self._connection.broken


@contextmanager
def group_transaction(database: Database) -> Iterator[GroupTransaction]:
    """A transaction on a pooled connection, bound to this thread for the block (:meth:`Database.holding`), committed
    when the block ends, rolled back when it raises. A connection lost while ``COMMIT`` was on its way is a
    :class:`CommitUnknownError` carrying the transaction's id; one lost before is a :class:`StoreError`."""
    with database.lend() as connection:
        statements = direct(connection)
        statements.defer(_BEGIN)  # sent with the first statement of the batch, or never when it has none
        with database.holding(connection, None):
            transaction = GroupTransaction(database, connection)
            try:
                yield transaction
            except BaseException:
                if statements.deferring:
                    statements.cancel()
                elif not connection.broken:
                    with suppress(psycopg.Error):  # the pool discards a connection left in a transaction
                        statements.simple(b"ROLLBACK")
                raise
        if statements.deferring:  # no write sent a statement: no transaction was begun, nothing to commit
            statements.cancel()
            return
        started = statements.started  # the last statement sent ahead: the transaction's id
        found = started.get_value(0, 0) if started is not None and started.ntuples else None
        xid = found.decode() if found else ""
        if connection.broken:
            raise StoreError(f"the connection to PostgreSQL was lost inside transaction {xid}; nothing was committed")
        try:
            statements.simple(b"COMMIT")
        except psycopg.Error as exc:
            if connection.broken:
                raise CommitUnknownError(
                    f"the connection to PostgreSQL was lost while transaction {xid} committed ({exc}); whether it "
                    "committed is known only once the server answers again",
                    xid=xid,
                ) from exc
            raise store_error(exc, "a transaction's commit") from exc
