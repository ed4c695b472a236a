"""The console's login throttle: wrong keys counted per guesser, in a table of bounded size.

A guesser is a browser that logged in before (its own budget, see :mod:`.logins`) or else the client's network
(:func:`guesser_of`: an IPv4 address, an IPv6 address's ``/64``, which one subscriber holds whole). A guesser with
:data:`MAX_FAILURES` wrong keys within :data:`FAILURE_WINDOW_S` seconds is refused until the oldest of them has
passed, before its key is looked at, so the refusal says nothing about the key. The table keeps at most
:data:`MAX_GUESSERS` guessers, dropping the one whose last wrong key is oldest: an attacker with more addresses than
that frees only budgets it had anyway.
"""

from __future__ import annotations

import ipaddress
import time
from collections import OrderedDict, deque
from collections.abc import Callable

__all__ = ["FAILURE_WINDOW_S", "MAX_FAILURES", "MAX_GUESSERS", "Throttle", "guesser_of"]

MAX_FAILURES = 10  # wrong keys within FAILURE_WINDOW_S before the guesser is refused for the rest of it
FAILURE_WINDOW_S = 60.0
MAX_GUESSERS = 4096


def guesser_of(address: str | None) -> str:
    """The guesser a login from client ``address`` counts against: ``client <IPv4 address>``, ``client <IPv6
    /64 network>``, or ``client <what the proxy said>`` for anything else."""
    if not address:
        return "client unknown"
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return f"client {address[:100]}"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return f"client {ip.ipv4_mapped}"
        return f"client {ipaddress.IPv6Network((ip, 64), strict=False)}"
    return f"client {ip}"


class Throttle:
    """Wrong keys per guesser; ``clock`` is monotonic seconds (injectable for tests)."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        limit: int = MAX_FAILURES,
        window_s: float = FAILURE_WINDOW_S,
        capacity: int = MAX_GUESSERS,
    ) -> None:
        self._clock = clock
        self._limit = limit
        self._window_s = window_s
        self._capacity = capacity
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()  # the guesser whose last failure is oldest first

    def __len__(self) -> int:
        return len(self._failures)

    def failed(self, guesser: str) -> None:
        """Count a wrong key of ``guesser``."""
        now = self._clock()
        failures = self._failures.get(guesser)
        if failures is None:
            self._make_room(now)
            failures = self._failures[guesser] = deque(maxlen=self._limit)
        failures.append(now)
        self._failures.move_to_end(guesser)

    def throttled(self, guesser: str) -> bool:
        """Whether ``guesser`` had too many wrong keys lately to try one now."""
        failures = self._failures.get(guesser)
        if failures is None:
            return False
        horizon = self._clock() - self._window_s
        while failures and failures[0] <= horizon:
            failures.popleft()
        if not failures:
            del self._failures[guesser]
        return len(failures) >= self._limit

    def _make_room(self, now: float) -> None:
        """Drop the guessers whose every failure has passed, then the oldest, until one more fits."""
        horizon = now - self._window_s
        while self._failures:
            oldest = next(iter(self._failures.values()))
            if oldest[-1] > horizon and len(self._failures) < self._capacity:
                return
            self._failures.popitem(last=False)
