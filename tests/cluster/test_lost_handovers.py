"""A row handed to a shard host's sessions and lost on the way is handed over again (issue 37): a session actor that
cannot read its session at start keeps its turn and runs it once the store answers, and a delivery the supervisor
lost is found once it holds nothing, since the row is still pending."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from hermes_actors.cluster.host.runtime import HostRuntime
from hermes_actors.cluster.host.settings import HostSettings
from hermes_actors.cluster.replica.ingress import ClusterIngress
from hermes_actors.errors import StoreError
from hermes_actors.runtime import supervisor as supervisor_module
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.protocol import Deliver
from hermes_actors.runtime.turns import SessionTurns
from hermes_actors.store.pg import PostgresStore
from hermes_actors.testing import FakePlatform, poll_until

pytestmark = pytest.mark.slow  # a shard host for a few seconds

SHARDS = 4


class _Losing:
    """The host's supervisor, losing the first delivery it is told (what a delivery that failed in the supervisor
    amounts to); everything else goes through."""

    def __init__(self, supervisor: Any, dropped: list[int]) -> None:
        self._supervisor = supervisor
        self._dropped = dropped

    def tell(self, message: Any) -> None:
        if isinstance(message, Deliver) and not self._dropped:
            self._dropped.append(message.delivery.inbox_id)
            return
        self._supervisor.tell(message)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._supervisor, name)


def test_a_delivery_the_supervisor_lost_is_handed_over_again(
    postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    host = HostRuntime(
        HostSettings(name="h0", postgres_dsn=postgres_dsn, hosts=("h0",), shards=SHARDS, pull_interval_s=0.5)
    )
    dropped: list[int] = []
    host.runtime.supervisor = _Losing(host.runtime.supervisor, dropped)  # type: ignore[assignment]
    host.start()
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as pg:
        try:
            poll_until(lambda: len(host.fence.held()) == SHARDS, what="the host holding every shard")
            with caplog.at_level(logging.WARNING, logger="hermes_actors.cluster.host.runtime"):
                inbox_id = ClusterIngress(pg, shards=SHARDS, poke=lambda shard: host.poke()).accept(
                    FakePlatform("fake").message("hello", message_id="m1")
                )
                assert inbox_id is not None
                poll_until(lambda: dropped == [inbox_id], what="the delivery lost")
                poll_until(
                    lambda: pg.database.value("SELECT state FROM inbox WHERE id = %s", (inbox_id,)) == "done",
                    timeout=30,
                    what="the lost row handed over again and answered",
                )
            assert any(f"rows [{inbox_id}] were lost on the way" in r.getMessage() for r in caplog.records)
            poll_until(lambda: host.stats().turns == {"ok": 1}, what="the turn counted once")  # after its commit
        finally:
            host.stop()


class _FailsOnce(SessionTurns):
    """Session turns whose first construction finds the store away (as a killed connection would)."""

    failed = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if not _FailsOnce.failed:
            _FailsOnce.failed = True
            raise StoreError("PostgreSQL refused a statement: terminating connection due to administrator command")
        super().__init__(*args, **kwargs)


def test_a_session_actor_that_cannot_read_its_session_at_start_keeps_its_turn(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervisor_module, "SessionTurns", _FailsOnce)
    fake = FakePlatform()
    gateway = Gateway(db_path, senders=[fake], tick_interval_s=0.2)
    try:
        fake.attach(gateway)
        fake.push("hello")
        assert fake.pop(timeout=15).text == "echo: hello"  # after the pause a refused save gets (1 s)
        assert _FailsOnce.failed
    finally:
        gateway.stop(timeout=10)
