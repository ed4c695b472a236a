"""The injected clock: wall time as a ``Callable[[], float]``, and how a waiting thread hears that a fake one moved.

Components take ``clock`` (unix seconds, default :func:`time.time`) and, where they measure intervals,
``monotonic`` (default :func:`time.monotonic`). A thread that sleeps until a deadline of such a clock (the timer
service, WeChat's batch windows) registers its wake-up with :func:`wake_on_advance`: a real clock has no
``on_advance`` and the call does nothing, while :class:`hermes_actors.testing.FakeClock` calls every wake-up
after each ``advance``, so a test moves time and the thread looks again without any real sleep.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = ["Advancing", "wake_on_advance"]


@runtime_checkable
class Advancing(Protocol):
    """A clock that moves only when told, and says so to whoever waits on it."""

    def on_advance(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from the advancing thread) after every move of the clock."""
        ...


def wake_on_advance(clock: object, callback: Callable[[], None]) -> None:
    """Have ``callback`` called whenever ``clock`` is moved by hand; nothing for a real clock."""
    if isinstance(clock, Advancing):
        clock.on_advance(callback)
