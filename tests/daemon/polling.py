"""Waiting on a daemon in another process: poll a probe until it answers, with a deadline.

The daemon tests run ``hermesd`` as a subprocess, so there is no event to wait on: they look (the control socket,
the database, ``/health``) until what they expect is there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["poll_until"]

T = TypeVar("T")


def poll_until(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    interval: float = 0.05,
    what: str | Callable[[], str] = "the condition was not met",
) -> T:
    """Call ``probe`` every ``interval`` seconds until it returns something other than ``None`` or ``False``;
    return that. After ``timeout`` seconds fail with ``AssertionError(what)`` (``what`` may be a callable, so the
    message can show the last answer). An exception from ``probe`` ends the wait at once."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found is not None and found is not False:
            return found
        if time.monotonic() >= deadline:
            raise AssertionError(what() if callable(what) else what)
        time.sleep(interval)
