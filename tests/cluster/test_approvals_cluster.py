"""Approvals on shard hosts (no Ray). Pending across a failover: host h0 pauses a turn on a call that needs approval
and dies without giving its shards up; host h1 takes them once h0's terms ran out, and the approval that then
arrives through the ingress continues the turn there: the tool runs once, the request is resumed once, and the
reply is the continued turn's. Deadlines: with two hosts scanning, a request nobody answers is denied once by the
holder of its session's shard and the turn continues with the denial; one answered in time is not denied."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from hermes_actors.agents.approvals import ApprovalSettings, require_approvals
from hermes_actors.agents.echo import EchoAgent
from hermes_actors.agents.tools import offer_tools
from hermes_actors.cluster.host.runtime import HostRuntime
from hermes_actors.cluster.host.settings import HostSettings
from hermes_actors.cluster.replica.ingress import ClusterIngress
from hermes_actors.lifecycle.approvals import TIMEOUT_PREFIX
from hermes_actors.messages import decode_outbound
from hermes_actors.store.approvals import ApprovalState
from hermes_actors.store.pg import PostgresStore
from hermes_actors.testing import FakePlatform, poll_until
from tests.runtime.test_approvals import Deploys

SHARDS = 8
TIMEOUT_S = 3.0  # how long a request waits for its answer in the deadline test

pytestmark = pytest.mark.slow  # hosts run for a few seconds, and h1 waits out h0's terms


@pytest.fixture
def pg(postgres_dsn: str) -> Iterator[PostgresStore]:
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as store:
        yield store


def _settings(dsn: str, name: str, hosts: tuple[str, ...]) -> HostSettings:
    return HostSettings(
        name=name, postgres_dsn=dsn, hosts=hosts, shards=SHARDS, lease_ttl_s=2.0, grace_s=0.5, job_scan_s=0.2
    )


def _host(
    dsn: str, name: str, hosts: tuple[str, ...], deploys: Deploys, *, timeout_s: float | None = None
) -> HostRuntime:
    agent = EchoAgent()
    offer_tools(agent, deploys)
    if timeout_s is not None:
        require_approvals(agent, ApprovalSettings(timeout_s=timeout_s))
    return HostRuntime(_settings(dsn, name, hosts), agent=agent)


def _replies(pg: PostgresStore, chat_id: str) -> list[str]:
    rows = pg.database.execute("SELECT payload FROM outbox WHERE chat_id = %s ORDER BY id", (chat_id,))
    return [decode_outbound(bytes(payload)).text for (payload,) in rows]


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


def test_with_two_hosts_scanning_a_request_nobody_answers_is_denied_once_and_one_answered_in_time_is_not(
    postgres_dsn: str, pg: PostgresStore
) -> None:
    deploys = Deploys()
    hosts = ("h0", "h1")
    running = [_host(postgres_dsn, name, hosts, deploys, timeout_s=TIMEOUT_S) for name in hosts]
    for host in running:
        host.start()
    try:
        poll_until(lambda: sum(len(h.fence.held()) for h in running) == SHARDS, timeout=30, what="every shard held")
        ingress = ClusterIngress(pg, shards=SHARDS)
        chat = FakePlatform("fake")
        for chat_id in ("late", "prompt"):
            assert ingress.accept(chat.message(f'tool deploy {{"env": "{chat_id}"}}', chat_id=chat_id, user_id="u"))
        poll_until(lambda: len(pg.approvals.pending()) == 2, timeout=20, what="both turns paused on their requests")
        late, prompt = sorted(pg.approvals.pending(), key=lambda row: row.source.chat_id != "late")
        assert ingress.accept(chat.message(f"/approve {prompt.id}", chat_id="prompt", user_id="u"))
        poll_until(
            lambda: (found := pg.approvals.get(late.id)) is not None and found.resumed_at is not None,
            timeout=TIMEOUT_S + 20,
            what="the unanswered request denied and its turn continued",
        )
        row = pg.approvals.get(late.id)
        assert row is not None
        assert (row.state, row.decided_by) == (ApprovalState.DENIED, "timeout")
        denials = pg.database.value(
            "SELECT count(*) FROM inbox WHERE platform_message_id = %s", (f"{TIMEOUT_PREFIX}{late.id}",)
        )
        assert denials == 1
        assert "did not approve this call (nobody answered within" in _replies(pg, "late")[-1]
        answered = pg.approvals.get(prompt.id)
        assert answered is not None
        assert (answered.state, answered.decided_by, answered.resumed_at is not None) == (
            ApprovalState.APPROVED,
            "fake:u",
            True,
        )
        assert deploys.runs == [{"env": "prompt"}]
        # Past the answered request's deadline too, the hosts' scans find nothing to deny.
        poll_until(lambda: time.time() > prompt.expires_at, timeout=TIMEOUT_S + 5, what="the second deadline passed")
        scans = [host.approvals.scan() for host in running]
        assert scans == [0, 0]
        none = pg.database.value(
            "SELECT count(*) FROM inbox WHERE platform_message_id = %s", (f"{TIMEOUT_PREFIX}{prompt.id}",)
        )
        assert none == 0
        assert _replies(pg, "prompt")[-1] == 'echo: deploy returned \'{"deployed": "prompt"}\''
    finally:
        for host in running:
            host.stop()
