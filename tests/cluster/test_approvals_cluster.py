"""An approval pending across a shard host's failover (no Ray): host h0 pauses a turn on a call that needs approval
and dies without giving its shards up; host h1 takes them once h0's terms ran out, and the approval that then
arrives through the ingress continues the turn there: the tool runs once, the request is resumed once, and the
reply is the continued turn's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hermes_actors.agents.echo import EchoAgent
from hermes_actors.agents.tools import offer_tools
from hermes_actors.cluster.host.runtime import HostRuntime
from hermes_actors.cluster.host.settings import HostSettings
from hermes_actors.cluster.replica.ingress import ClusterIngress
from hermes_actors.store.approvals import ApprovalState
from hermes_actors.store.pg import PostgresStore
from hermes_actors.testing import FakePlatform, poll_until
from tests.runtime.test_approvals import Deploys

SHARDS = 8

pytestmark = pytest.mark.slow  # hosts run for a few seconds, and h1 waits out h0's terms


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as store:
        yield store


def _settings(dsn: str, name: str, hosts: tuple[str, ...]) -> HostSettings:
    return HostSettings(name=name, postgres_dsn=dsn, hosts=hosts, shards=SHARDS, lease_ttl_s=2.0, grace_s=0.5)


def _host(dsn: str, name: str, hosts: tuple[str, ...], deploys: Deploys) -> HostRuntime:
    agent = EchoAgent()
    offer_tools(agent, deploys)
    return HostRuntime(_settings(dsn, name, hosts), agent=agent)


def _assistant_texts(pg: PostgresStore) -> list[str]:
    rows = pg.database.execute(
        "SELECT content FROM messages WHERE role = 'assistant' AND content IS NOT NULL ORDER BY id"
    )
    return [str(content) for (content,) in rows]


def test_an_approval_pending_across_a_host_failover_resumes_once_on_the_next_holder(
    postgres_dsn: str, pg: PostgresStore
) -> None:
    deploys = Deploys()
    first = _host(postgres_dsn, "h0", ("h0",), deploys)
    first.start()
    second: HostRuntime | None = None
    try:
        poll_until(lambda: first.fence.held(), what="h0 holding its shards")
        ingress = ClusterIngress(pg, shards=SHARDS)
        chat = FakePlatform("fake")
        assert ingress.accept(chat.message('tool deploy {"env": "prod"}', chat_id="c", user_id="u"))
        (request,) = poll_until(lambda: pg.approvals.pending(), timeout=20, what="the paused turn's request")
        first.stop(release=False)  # h0 dies holding its shards: h1 gets them when the terms run out
        second = _host(postgres_dsn, "h1", ("h0", "h1"), deploys)
        second.start()
        poll_until(lambda: len(second.fence.held()) == SHARDS, timeout=30, what="h1 holding every shard")
        assert ingress.accept(chat.message(f"/approve {request.id}", chat_id="c", user_id="u"))
        poll_until(lambda: deploys.runs, timeout=20, what="the approved call")
        poll_until(
            lambda: (found := pg.approvals.get(request.id)) is not None and found.resumed_at is not None,
            timeout=20,
            what="the request resumed",
        )
        row = pg.approvals.get(request.id)
        assert row is not None
        assert row.state is ApprovalState.APPROVED
        assert deploys.runs == [{"env": "prod"}]  # once, after the approval, on h1
        assert _assistant_texts(pg)[-1] == 'echo: deploy returned \'{"deployed": "prod"}\''
        assert ingress.accept(chat.message(f"/approve {request.id}", chat_id="c", user_id="u"))
        poll_until(
            lambda: int(pg.database.value("SELECT count(*) FROM inbox WHERE state = 'pending'")) == 0,
            timeout=20,
            what="the second approval answered",
        )
        assert deploys.runs == [{"env": "prod"}]
    finally:
        if not first._stopped.is_set():
            first.stop(release=False)
        if second is not None:
            second.stop()
