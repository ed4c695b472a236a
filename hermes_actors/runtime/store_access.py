"""How the operator's and the jobs' ports reach a store (:class:`StoreAccess`), and the plainest way
(:class:`DirectAccess`): the store itself, as ``hermesctl`` without a daemon and a cluster replica use it."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Protocol, TypeVar

from hermes_actors.store import StoreInterface

__all__ = ["DirectAccess", "StoreAccess"]

T = TypeVar("T")


class StoreAccess(Protocol):
    """How a port reads and writes the store: a runtime's reader pool and writer, or one store used directly."""

    def read(self) -> AbstractContextManager[StoreInterface]: ...

    def write(self, work: Callable[[StoreInterface], T], *, timeout: float | None = None) -> T: ...


class DirectAccess:
    """A :class:`StoreAccess` on ``store`` itself: a read is the store as it is (a PostgreSQL store's pool lends a
    connection per statement); a write is one transaction."""

    __slots__ = ("_store",)

    def __init__(self, store: StoreInterface) -> None:
        self._store = store

    def read(self) -> AbstractContextManager[StoreInterface]:
        return nullcontext(self._store)

    def write(self, work: Callable[[StoreInterface], T], *, timeout: float | None = None) -> T:
        with self._store.transaction():
            return work(self._store)
