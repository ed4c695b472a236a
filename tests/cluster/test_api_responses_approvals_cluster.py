"""A ``/v1/responses`` request for approval answered elsewhere in a cluster: a response paused through one replica,
its request approved by the operator through another, and the client's ``mcp_approval_response`` to the first
replica is answered with the continued turn's reply from the store (the tool ran once, in the shard host), not
"answered already". A shard host in this process (no Ray), real PostgreSQL, HTTP on loopback."""

from __future__ import annotations

import pytest

from hermes_actors.testing import poll_until
from platforms.api_server.wire import PLATFORM
from tests.cluster.test_api_approvals_cluster import cluster, deploys
from tests.cluster.test_api_cluster import Cluster
from tests.runtime.test_approvals import Deploys

pytestmark = pytest.mark.slow  # a shard host, PostgreSQL listeners and two HTTP servers for a few seconds

__all__ = ["cluster", "deploys"]  # the fixtures, shared with test_api_approvals_cluster

_DEPLOYED = 'echo: deploy returned \'{"deployed": "prod"}\''


def test_an_approval_response_after_the_operator_approved_through_another_replica_answers_with_the_reply(
    cluster: Cluster, deploys: Deploys
) -> None:
    first, second = cluster.replica(), cluster.replica()
    try:
        client = first.client()
        paused = client.responses.create(model="hermes-agent", input='tool deploy {"env": "prod"}')
        (asked,) = [item for item in paused.output if item.type == "mcp_approval_request"]
        approval_id = int(asked.id.removeprefix("mcpr_").split("_")[0])
        second.inbox.approvals.decide(approval_id, approved=True)

        def continued() -> bool:
            found = first.inbox.stored_answer(PLATFORM, f"api-{paused.id}")
            return found is not None and found.approval is None

        poll_until(continued, timeout=20, what="the turn continued in the shard host")
        answered = client.responses.create(
            model="hermes-agent",
            previous_response_id=paused.id,
            input=[{"type": "mcp_approval_response", "approval_request_id": asked.id, "approve": True}],
        )
        assert answered.output_text == _DEPLOYED
        assert deploys.runs == [{"env": "prod"}]  # once, for the operator's approval
    finally:
        first.stop()
        second.stop()
