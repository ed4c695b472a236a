"""``/api/jobs`` on a real gateway and API server on 127.0.0.1: behind the admin key; add, list, read, pause, resume,
run and delete; refusals name the field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_actors.config import RuntimeConfig
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from hermes_actors.testing import poll_until
from platforms.api_server import ApiServer, ApiServerConfig
from tests.platforms.test_api_operator import ADMIN, KEY, Api


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    server = ApiServer(ApiServerConfig(port=0, key=KEY), environ={})
    gateway = Gateway(tmp_path / "state.db", config=RuntimeConfig(), senders=server.senders())
    try:
        server.start(GatewayInbox(gateway, admin_key=ADMIN))
        try:
            yield Api(server, gateway)
        finally:
            server.stop(10)
    finally:
        gateway.stop(10)


@pytest.mark.parametrize("key", [None, KEY], ids=["no key", "the client key"])
def test_the_jobs_routes_take_only_the_admin_key(api: Api, key: str | None) -> None:
    for method, path in (("GET", "/api/jobs"), ("POST", "/api/jobs"), ("POST", "/api/jobs/job_x/run")):
        status, body = api.call(method, path, {}, key=key)
        assert (status, body["error"]["code"]) == (401, "invalid_admin_key")
    assert api.gateway.jobs.listed() == []


def test_a_job_added_read_paused_resumed_run_and_deleted(api: Api) -> None:
    job = api.ok("POST", "/api/jobs", {"prompt": "status report", "every": "1h", "chat": "api_server:ops"}, status=201)
    assert (job["schedule"], job["describe"], job["target"], job["chat"], job["state"]) == (
        "every",
        "every 1h",
        "chat",
        "api_server:ops",
        "active",
    )
    assert (job["owner"], job["created_by"], job["runs"]) == ("operator", "api", 0)
    assert api.ok("GET", "/api/jobs") == {"object": "list", "data": [job]}
    assert api.ok("GET", f"/api/jobs/{job['id']}") == job
    paused = api.ok("POST", f"/api/jobs/{job['id']}/pause")
    assert (paused["state"], paused["next_due_at"]) == ("paused", None)
    resumed = api.ok("POST", f"/api/jobs/{job['id']}/resume")
    assert resumed["state"] == "active"
    assert resumed["next_due_at"] >= job["next_due_at"]
    ran = api.ok("POST", f"/api/jobs/{job['id']}/run")
    assert (ran["runs"], ran["next_due_at"]) == (1, resumed["next_due_at"])

    def answered() -> bool:
        with api.gateway.read() as store:
            row = store.inbox.get(ran["last_inbox_id"])
            return row is not None and row.state == "done"

    poll_until(answered, what="the run by hand answered")
    assert api.ok("DELETE", f"/api/jobs/{job['id']}") == {"id": job["id"], "object": "job.deleted", "deleted": True}
    status, body = api.call("GET", f"/api/jobs/{job['id']}")
    assert (status, body["error"]["code"]) == (404, "job_not_found")
    status, body = api.call("DELETE", f"/api/jobs/{job['id']}")
    assert (status, body["error"]["code"]) == (404, "job_not_found")


@pytest.mark.parametrize(
    ("body", "param", "message"),
    [
        ({"prompt": "x", "every": "soon", "chat": "api_server:a"}, "every", "every: 'soon' is not a duration"),
        ({"prompt": "x", "in": "1m"}, "target", "target: give session_id (a session) or chat"),
        ({"prompt": "x", "cron": "0 9 * * *", "tz": "Nowhere/Zone", "chat": "a:b"}, "tz", "tz: unknown time zone"),
        ({"prompt": "x", "in": "1m", "chat": "a:b", "colour": "red"}, None, "invalid request body: Object contains"),
        ({"in": "1m", "chat": "a:b"}, None, "invalid request body: Object missing required field `prompt`"),
    ],
)
def test_a_job_refused_is_a_400_naming_its_field(
    api: Api, body: dict[str, str], param: str | None, message: str
) -> None:
    status, answer = api.call("POST", "/api/jobs", body)
    assert status == 400, answer
    assert answer["error"]["message"].startswith(message)
    assert answer["error"]["param"] == param
    assert api.gateway.jobs.listed() == []
