"""A slow or failing inbox commit holds only its own connection: the other accounts on the same event loop go on.

The long-lived adapters run every account's connection as a task on one event loop. A commit that waits on the
store (a busy writer, a locked database being retried) must not block that loop, or every other account's events
wait behind it. Each test holds one account's commit on a barrier and checks that another account's message is
committed and answered meanwhile.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import pytest

from hermes_actors.messages import InboundMessage
from hermes_actors.ports import AcceptResult, Inbox, PollCursor
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from platforms.signal import SignalAdapter, SignalConfig
from tests.platforms.signal_fake import FakeSignalCli, Person, message

HELD = "+15550001"
FREE = "+15550002"
ALICE = Person(uuid="a1a1a1a1-0000-4000-8000-000000000001", number="+15551110001", name="Alice")


class HeldInbox:
    """An inbox whose commits for the account ``held`` wait until :attr:`release` is set (or fail while
    ``failing``); every other commit goes straight through and is announced on :attr:`passed`."""

    def __init__(self, inbox: Inbox, held: str, *, failing: bool = False) -> None:
        self._inbox = inbox
        self._held = held
        self._failing = failing
        self.holding = threading.Event()
        self.release = threading.Event()
        self.passed = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inbox, name)

    def accept_many(self, batch: Sequence[InboundMessage], *, cursor: PollCursor | None = None) -> list[AcceptResult]:
        if any(inbound.source.account_id == self._held for inbound in batch):
            self.holding.set()
            if self._failing and not self.release.is_set():
                raise RuntimeError("database is locked (simulated)")
            assert self.release.wait(20), "never released"
        results = self._inbox.accept_many(batch, cursor=cursor)
        if batch:
            self.passed.set()
        return results


@pytest.fixture
def signal_cli() -> Iterator[FakeSignalCli]:
    fake = FakeSignalCli([HELD, FREE]).start()
    yield fake
    fake.stop()


def signal_config(url: str) -> SignalConfig:
    return SignalConfig(
        url=url,
        accounts=[HELD, FREE],
        reconnect_base_s=0.05,
        reconnect_max_s=0.2,
        connect_timeout_s=2.0,
        request_timeout_s=5.0,
        messages_per_second=1000.0,
        burst=100,
    )


@pytest.mark.parametrize("failing", [False, True], ids=["slow commit", "failing commit"])
def test_a_signal_account_whose_commit_waits_does_not_hold_the_other_accounts_events(
    signal_cli: FakeSignalCli, tmp_path: Path, failing: bool
) -> None:
    adapter = SignalAdapter(signal_config(signal_cli.url), environ={})
    with Gateway(tmp_path / "state.db", senders=adapter.senders(), tick_interval_s=0.1) as gateway:
        held = HeldInbox(GatewayInbox(gateway), HELD, failing=failing)
        adapter.start(cast(Inbox, held))
        try:
            signal_cli.wait_connections(2)
            signal_cli.push(HELD, message(ALICE, "stuck"))
            assert held.holding.wait(10), "the held account's commit never began"
            signal_cli.push(FREE, message(ALICE, "through"))
            assert held.passed.wait(5), "the other account's message waited behind the held commit"
            reply = signal_cli.take_sent(5)
            assert (reply.account, reply.text) == (FREE, "echo: through")
            held.release.set()
            later = signal_cli.take_sent(10)
            assert (later.account, later.text) == (HELD, "echo: stuck")
        finally:
            held.release.set()
            adapter.stop()
