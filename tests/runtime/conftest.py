from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from hermes_actors.agents.base import Agent
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.store import MessageRecord, StoreInterface
from hermes_actors.testing import FakePlatform, open_fake_gateway

MakeGateway = Callable[..., tuple[Gateway, FakePlatform]]


@pytest.fixture
def make_gateway(db_path: Path) -> Iterator[MakeGateway]:
    """Start gateways on the test's database; every one is stopped at the end."""
    with ExitStack() as stack:

        def make(*, agent: Agent | None = None, **options: Any) -> tuple[Gateway, FakePlatform]:
            return stack.enter_context(open_fake_gateway(db_path, agent=agent, **options))

        yield make


def assert_turns_are_contiguous(transcript: Sequence[MessageRecord]) -> list[str]:
    """Check that every echo reply follows exactly the user messages of its turn; return the user texts in order."""
    pending: list[str] = []
    users: list[str] = []
    for message in transcript:
        if message.role == "user":
            pending.append(message.content or "")
            users.append(message.content or "")
        elif message.role == "assistant" and message.content is not None:
            assert pending, f"reply {message.content!r} follows no user message"
            assert message.content == "echo: " + "\n".join(pending), "a turn's messages are not contiguous"
            pending = []
    assert not pending, f"user messages without a reply: {pending}"
    return users


class HeldWriter:
    """Holds the store writer inside a job until released, so nothing commits meanwhile."""

    def __init__(self, gateway: Gateway) -> None:
        self._entered = threading.Event()
        self._release = threading.Event()
        self.done = gateway._writer.submit(self._hold)
        assert self._entered.wait(10), "the writer did not start the holding job"

    def _hold(self, store: StoreInterface) -> None:
        self._entered.set()
        self._release.wait(30)

    def release(self) -> None:
        self._release.set()
        self.done.result(timeout=10)
