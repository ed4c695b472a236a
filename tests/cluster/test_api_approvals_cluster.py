"""An API run paused for approval in one replica and answered through another: the tool runs once in the shard
host, and both replicas' ``GET /v1/runs/{id}`` end the run with the continued turn's reply (the first one follows
the store; it does not stay ``requires_approval``). A shard host in this process (no Ray), real PostgreSQL, HTTP
on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from hermes_actors.agents.echo import EchoAgent
from hermes_actors.agents.tools import offer_tools
from hermes_actors.cluster.host.runtime import HostRuntime
from hermes_actors.cluster.host.settings import HostSettings
from hermes_actors.store.pg import PostgresStore
from hermes_actors.testing import poll_until
from tests.cluster.test_api_cluster import SHARDS, Cluster, StreamingAgent, _json
from tests.runtime.test_approvals import Deploys

pytestmark = pytest.mark.slow  # a shard host, PostgreSQL listeners and two HTTP servers for a few seconds


@pytest.fixture
def deploys() -> Deploys:
    return Deploys()


@pytest.fixture
def cluster(postgres_dsn: str, tmp_path: Path, deploys: Deploys) -> Iterator[Cluster]:
    agent = EchoAgent()
    offer_tools(agent, deploys)
    settings = HostSettings(name="h0", postgres_dsn=postgres_dsn, hosts=("h0",), shards=SHARDS, pull_interval_s=0.5)
    host = HostRuntime(settings, agent=agent)
    host.start()
    with PostgresStore.open(postgres_dsn, migrate_schema=False) as pg:
        poll_until(lambda: len(host.fence.held()) == SHARDS, what="the host holding every shard")
        try:
            yield Cluster(postgres_dsn, pg, host, StreamingAgent(), tmp_path)  # its agent field is not used here
        finally:
            host.stop()


def _view(url: str, run_id: str, status: str) -> dict[str, Any] | None:
    found = _json(f"{url}/v1/runs/{run_id}")[1]
    return found if found.get("status") == status else None


def test_a_run_paused_in_one_replica_and_approved_through_another_completes_in_both(
    cluster: Cluster, deploys: Deploys
) -> None:
    first, second = cluster.replica(), cluster.replica()
    try:
        status, accepted = _json(first.server.url + "/v1/runs", {"input": 'tool deploy {"env": "prod"}'})
        assert status == 202, accepted
        run_id = accepted["run_id"]
        paused = poll_until(lambda: _view(first.server.url, run_id, "requires_approval"), what="the run's pause")
        assert deploys.runs == []
        answer = {"approval_id": paused["approval"]["id"], "decision": "approve"}
        status, answered = _json(f"{second.server.url}/v1/runs/{run_id}/approval", answer)
        assert status == 202, answered
        expected = 'echo: deploy returned \'{"deployed": "prod"}\''
        for url in (second.server.url, first.server.url):
            view = poll_until(partial(_view, url, run_id, "completed"), timeout=20, what=f"completed at {url}")
            assert view["output"] == expected
        assert deploys.runs == [{"env": "prod"}]
    finally:
        first.stop()
        second.stop()
