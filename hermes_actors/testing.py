"""Fakes for tests of hermes-actors and of code built on it."""

from __future__ import annotations

__all__ = ["FakeClock"]


class FakeClock:
    """A wall clock (unix seconds) that moves only when told; pass it where a ``clock`` is injected."""

    def __init__(self, start: float = 1_764_460_800.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds``."""
        self.now += seconds
