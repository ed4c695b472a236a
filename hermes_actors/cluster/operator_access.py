"""The operator's routes (``/api/sessions``, the web console) in cluster mode: the same
:class:`~hermes_actors.runtime.operator.GatewayOperator`, reading and writing the PostgreSQL store directly and
handing renames, ends and deletes to the session's shard host through its ``admin``."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TypeVar, cast

from hermes_actors.runtime.operator import GatewayOperator, SessionAdmin
from hermes_actors.store import Store
from hermes_actors.store.pg.store import PostgresStore

__all__ = ["PgAccess", "cluster_operator"]

T = TypeVar("T")


class PgAccess:
    """:class:`~hermes_actors.runtime.operator.StoreAccess` on a PostgreSQL store: a read is the store itself (its
    pool lends a connection per statement); a write is one transaction."""

    def __init__(self, store: PostgresStore) -> None:
        self._pg = store
        self._store = cast("Store", store)

    def read(self) -> AbstractContextManager[Store]:
        return nullcontext(self._store)

    def write(self, work: Callable[[Store], T], *, timeout: float | None = None) -> T:
        with self._pg.transaction():
            return work(self._store)


def cluster_operator(store: PostgresStore, admin_key: str, admin: SessionAdmin) -> GatewayOperator:
    """The operator of a ``hermesd --cluster`` replica."""
    return GatewayOperator(PgAccess(store), admin_key, admin=admin)
