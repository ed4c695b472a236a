"""platforms.support.tokens: a token is fetched once, again shortly before it expires, and after a refusal."""

from __future__ import annotations

from dataclasses import dataclass

from hermes_actors.testing import FakeClock
from platforms.support.tokens import REFRESH_MARGIN_S, TokenCache


@dataclass(frozen=True)
class App:
    name: str


class Counting(TokenCache[App]):
    def __init__(self, clock: FakeClock, lifetime: float) -> None:
        super().__init__(clock=clock)
        self.lifetime = lifetime
        self.fetched: list[str] = []

    def _fetch(self, key: App) -> tuple[str, float]:
        self.fetched.append(key.name)
        return f"{key.name}-{len(self.fetched)}", self.lifetime


def test_a_token_is_kept_until_the_margin_before_it_expires_and_each_app_has_its_own() -> None:
    clock = FakeClock()
    tokens = Counting(clock, lifetime=7200)
    assert tokens.get(App("a")) == "a-1"
    assert tokens.get(App("b")) == "b-2"
    clock.advance(7200 - REFRESH_MARGIN_S - 1)
    assert tokens.get(App("a")) == "a-1"
    clock.advance(1)
    assert tokens.get(App("a")) == "a-3"
    assert tokens.fetched == ["a", "b", "a"]


def test_a_short_lived_token_is_renewed_at_half_its_life() -> None:
    clock = FakeClock()
    tokens = Counting(clock, lifetime=120)
    assert tokens.get(App("a")) == "a-1"
    clock.advance(59)
    assert tokens.get(App("a")) == "a-1"
    clock.advance(1)
    assert tokens.get(App("a")) == "a-2"


def test_forgetting_a_refused_token_keeps_a_newer_one_another_lane_fetched() -> None:
    clock = FakeClock()
    tokens = Counting(clock, lifetime=7200)
    refused = tokens.get(App("a"))
    tokens.forget(App("a"), refused)
    newer = tokens.get(App("a"))
    assert newer == "a-2"
    tokens.forget(App("a"), refused)  # a second lane reports the same old token: the new one stays
    assert tokens.get(App("a")) == newer
    assert tokens.fetched == ["a", "a"]
