"""Send-rate limits: token buckets per key (a chat, a route, a phone number) plus a platform-wide bucket.

Platforms publish limits like "about one message per second per chat, 30 per second per bot" (Telegram). An
outbox thread calls :meth:`RateLimiter.acquire` before each send: it sleeps just long enough that neither the
key's bucket nor the global one goes negative. Servers may still answer 429; their ``retry_after`` then comes
back through ``SendError`` and the outbox, and :meth:`RateLimiter.penalise` keeps the key quiet until then.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import msgspec

__all__ = ["Rate", "RateLimiter"]

_IDLE_BUCKETS = 10_000  # buckets kept before full (idle) ones are dropped


class Rate(msgspec.Struct, frozen=True, kw_only=True):
    """``per_second`` sustained, ``burst`` at once."""

    per_second: float
    burst: float = 1.0


class _Bucket:
    __slots__ = ("stamp", "tokens")

    def __init__(self, tokens: float, stamp: float) -> None:
        self.tokens = tokens
        self.stamp = stamp


class RateLimiter:
    """Token buckets: one per key at ``per_key`` and one shared at ``overall`` (either may be ``None``)."""

    def __init__(
        self,
        *,
        per_key: Rate | None = None,
        overall: Rate | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._per_key = per_key
        self._overall = overall
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._buckets: dict[str, _Bucket] = {}
        self._global = _Bucket(overall.burst, clock()) if overall is not None else None
        self._quiet_until: dict[str, float] = {}

    def _refill(self, bucket: _Bucket, rate: Rate, now: float) -> None:
        bucket.tokens = min(rate.burst, bucket.tokens + (now - bucket.stamp) * rate.per_second)
        bucket.stamp = now

    def delay(self, key: str) -> float:
        """Take a token for ``key`` and return how long to wait before using it (0 when it can go now)."""
        with self._lock:
            now = self._clock()
            wait = max(0.0, self._quiet_until.get(key, 0.0) - now)
            if self._per_key is not None:
                bucket = self._buckets.get(key)
                if bucket is None:
                    if len(self._buckets) >= _IDLE_BUCKETS:
                        self._drop_full(now)
                    bucket = self._buckets[key] = _Bucket(self._per_key.burst, now)
                self._refill(bucket, self._per_key, now)
                bucket.tokens -= 1
                if bucket.tokens < 0:
                    wait = max(wait, -bucket.tokens / self._per_key.per_second)
            if self._global is not None and self._overall is not None:
                self._refill(self._global, self._overall, now)
                self._global.tokens -= 1
                if self._global.tokens < 0:
                    wait = max(wait, -self._global.tokens / self._overall.per_second)
            return wait

    def acquire(self, key: str) -> float:
        """Block until ``key`` may send; return how long it waited."""
        wait = self.delay(key)
        if wait > 0:
            self._sleep(wait)
        return wait

    def penalise(self, key: str, seconds: float) -> None:
        """Keep ``key`` quiet for ``seconds`` (the server's ``retry_after``)."""
        with self._lock:
            self._quiet_until[key] = max(self._quiet_until.get(key, 0.0), self._clock() + seconds)

    def _drop_full(self, now: float) -> None:
        assert self._per_key is not None
        rate = self._per_key
        for key in [k for k, b in self._buckets.items() if b.tokens + (now - b.stamp) * rate.per_second >= rate.burst]:
            del self._buckets[key]
        expired = [k for k, until in self._quiet_until.items() if until <= now]
        for key in expired:
            del self._quiet_until[key]
