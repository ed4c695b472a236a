"""An adapter started on a real gateway in a test, and the store reads the adapter tests make of it.

Each platform's test module subclasses :class:`RunningAdapter` with what is its own (a poll cursor, how its inbox
rows look); the reads every platform needs live here once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from hermes_actors.gateway import Gateway
from platforms.base import Adapter

__all__ = ["RunningAdapter"]

A = TypeVar("A", bound=Adapter)


@dataclass(frozen=True)
class RunningAdapter(Generic[A]):
    """``adapter`` started on ``gateway``."""

    adapter: A
    gateway: Gateway

    def stop(self) -> None:
        """Stop the adapter, then the gateway."""
        self.adapter.stop()
        self.gateway.stop()

    def session_of(self, key: str) -> str | None:
        """The session routing key ``key`` leads to in the store."""
        with self.gateway.read() as store:
            return store.get_route(key)

    def transcript(self, key: str) -> list[tuple[str, str | None]]:
        """(role, content) of every message of the session ``key`` leads to."""
        session = self.session_of(key)
        assert session is not None, f"no session for {key}"
        with self.gateway.read() as store:
            return [(m.role, m.content) for m in store.load_transcript(session)]

    def inbox_rows(self, *columns: str) -> list[tuple[str, ...]]:
        """The given columns of every inbox row, oldest first, as text."""
        with self.gateway.read() as store:
            rows = store.connection.execute(f"SELECT {', '.join(columns)} FROM inbox ORDER BY id").fetchall()
        return [tuple(str(value) for value in row) for row in rows]
