"""Token buckets per key and overall, on a fake clock."""

from __future__ import annotations

from platforms.support.ratelimit import Rate, RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_key_gets_its_burst_then_its_rate() -> None:
    clock = Clock()
    limiter = RateLimiter(per_key=Rate(per_second=1, burst=2), clock=clock, sleep=clock.sleep)
    assert [limiter.acquire("chat") for _ in range(4)] == [0, 0, 1.0, 1.0]
    assert limiter.acquire("other") == 0  # keys are independent


def test_the_overall_bucket_limits_every_key_together() -> None:
    clock = Clock()
    limiter = RateLimiter(
        per_key=Rate(per_second=10, burst=10), overall=Rate(per_second=2, burst=2), clock=clock, sleep=clock.sleep
    )
    waits = [limiter.acquire(f"chat-{n}") for n in range(4)]
    assert waits == [0, 0, 0.5, 0.5]


def test_a_penalty_keeps_a_key_quiet_until_it_expires() -> None:
    clock = Clock()
    limiter = RateLimiter(per_key=Rate(per_second=100, burst=100), clock=clock, sleep=clock.sleep)
    limiter.penalise("chat", 7.0)
    assert limiter.acquire("chat") == 7.0
    assert limiter.acquire("chat") == 0
    assert limiter.acquire("elsewhere") == 0
