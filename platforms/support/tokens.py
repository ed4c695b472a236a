"""Access tokens that a platform's API hands out for a while (Feishu's tenant token, DingTalk's and WeCom's access
tokens): fetched on first use, kept until shortly before they expire, dropped when the API refuses one.

A platform subclasses :class:`TokenCache` with its ``_fetch``; the cache is thread-safe, so the senders of every
lane share it, and a refused token is forgotten only if no other lane has fetched a new one meanwhile.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

__all__ = ["REFRESH_MARGIN_S", "Named", "TokenCache"]

REFRESH_MARGIN_S = 300.0
"""Fetch a new token this long before the old one expires (half its lifetime, for a token that lives less)."""


class Named(Protocol):
    """What a token is for: an app or a robot of the configuration, by its name."""

    @property
    def name(self) -> str: ...


K = TypeVar("K", bound=Named)


class TokenCache(abc.ABC, Generic[K]):
    """Tokens per app (or robot), by name; :meth:`_fetch` gets a new one and says how long it lives."""

    def __init__(self, *, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens: dict[str, tuple[str, float]] = {}  # name -> (token, when to fetch a new one)

    def get(self, key: K) -> str:
        """The token of ``key``, fetched when there is none or it is about to expire (what :meth:`_fetch` raises
        when the platform gives none, typically a retryable ``SendError``)."""
        with self._lock:
            cached = self._tokens.get(key.name)
            now = self._clock()
            if cached is None or now >= cached[1]:
                value, lifetime = self._fetch(key)
                cached = (value, now + lifetime - min(REFRESH_MARGIN_S, lifetime / 2))
                self._tokens[key.name] = cached
            return cached[0]

    def forget(self, key: K, value: str) -> None:
        """Drop ``value`` (the API refused it) so the next :meth:`get` fetches a new token; a newer token another
        thread fetched meanwhile is kept."""
        with self._lock:
            cached = self._tokens.get(key.name)
            if cached is not None and cached[0] == value:
                del self._tokens[key.name]

    @abc.abstractmethod
    def _fetch(self, key: K) -> tuple[str, float]:
        """A new token of ``key`` and the seconds it lives."""
