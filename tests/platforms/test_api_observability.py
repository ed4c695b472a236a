"""``/metrics``, ``/health/ready`` and ``/health/detailed`` of the API server, scraped over HTTP on loopback from a
real gateway after a scripted conversation."""

from __future__ import annotations

import http.client
import json
import math
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hermes_actors.agents.base import EchoAgent
from hermes_actors.agents.turn import AgentError, AgentReply, TurnInput
from hermes_actors.config import RuntimeConfig
from hermes_actors.ports import (
    AcceptResult,
    Adapter,
    Capabilities,
    ConnectionReporter,
    Inbox,
    PlatformStatus,
    ReplySender,
)
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from hermes_actors.testing import FakeClock, FakePlatform, poll_until
from platforms.api_server import SESSION_HEADER, ApiServer, ApiServerConfig

KEY = "sk-hermes-metrics"
AUTH = {"Authorization": f"Bearer {KEY}"}


class ScriptedAgent(EchoAgent):
    """Echoes with token counts (7 in, 3 out); ``fail`` raises :class:`AgentError`; ``wait`` blocks until
    ``release`` (``started`` is set as it blocks). Runs in the agent pool."""

    runs_inline = False

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Event()
        self.release = threading.Event()

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        if turn.user_text == "fail":
            raise AgentError("the model endpoint answered 500")
        if turn.user_text == "wait":
            self.started.set()
            self.release.wait(10)
        reply = super().run_turn(turn, timeout_s=timeout_s)
        return msgspec.structs.replace(reply, input_tokens=7, output_tokens=3, tokens_estimated=False)


class FlakyAdapter(Adapter):
    """An entry point that started but whose connection is down (it says why)."""

    platform = "flaky"
    capabilities = Capabilities()

    def __init__(self, problem: str | None) -> None:
        self.problem = problem

    def senders(self) -> list[ReplySender]:
        return []

    def start(self, inbox: Inbox) -> None:
        pass

    def stop(self, timeout: float = 10.0) -> None:
        pass

    def describe(self) -> list[str]:
        return ["flaky: a websocket to nowhere"]

    def connection_problem(self) -> str | None:
        return self.problem


@dataclass
class Served:
    gateway: Gateway
    server: ApiServer
    fake: FakePlatform
    agent: ScriptedAgent
    clock: FakeClock

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, str, bytes]:
        """GET ``path`` on 127.0.0.1; return the status, the content type and the body."""
        connection = http.client.HTTPConnection("127.0.0.1", int(self.server.url.rsplit(":", 1)[1]), timeout=10)
        try:
            connection.request("GET", path, headers=headers or {})
            response = connection.getresponse()
            return response.status, response.headers.get("Content-Type", ""), response.read()
        finally:
            connection.close()

    def json(self, path: str) -> tuple[int, Any]:
        status, _, body = self.get(path, AUTH)
        return status, json.loads(body)

    def chat(self, text: str, session_id: str | None = None) -> str:
        """One turn through ``/v1/chat/completions``; return the session it ran in."""
        connection = http.client.HTTPConnection("127.0.0.1", int(self.server.url.rsplit(":", 1)[1]), timeout=10)
        headers = {"Content-Type": "application/json", **AUTH, **({SESSION_HEADER: session_id} if session_id else {})}
        body = json.dumps({"model": "hermes-agent", "messages": [{"role": "user", "content": text}]})
        try:
            connection.request("POST", "/v1/chat/completions", body=body, headers=headers)
            response = connection.getresponse()
            assert response.status == 200, response.read()
            response.read()
            return str(response.headers[SESSION_HEADER])
        finally:
            connection.close()

    def scrape(self) -> Samples:
        status, content_type, body = self.get("/metrics", AUTH)
        assert status == 200, body
        assert content_type.startswith("text/plain")
        return Samples(body.decode())

    def scrape_until(self, check: Callable[[Samples], bool], what: str) -> Samples:
        """Scrape until ``check`` holds for the samples; return them."""

        def probe() -> Samples | None:
            samples = self.scrape()
            return samples if check(samples) else None

        return poll_until(probe, what=what)


class Samples:
    """A parsed exposition: ``value(name, **labels)`` sums the samples of ``name`` matching ``labels``."""

    def __init__(self, text: str) -> None:
        self.samples = [s for family in text_string_to_metric_families(text) for s in family.samples]

    def value(self, name: str, **labels: str) -> float:
        found = [s.value for s in self.samples if s.name == name and labels.items() <= s.labels.items()]
        assert found, f"no sample {name} {labels}"
        return float(sum(found))


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with ExitStack() as stack:
        clock = FakeClock()
        agent = ScriptedAgent()
        server = ApiServer(ApiServerConfig(port=0, key=KEY), environ={})
        fake = FakePlatform("fake")
        gateway = Gateway(
            tmp_path / "state.db",
            config=RuntimeConfig(),
            agent=agent,
            senders=[*server.senders(), fake],
            clock=clock,
        )
        stack.callback(gateway.stop, 10)
        stack.callback(agent.release.set)  # runs first: no turn holds up the gateway's stop
        fake.attach(gateway)
        server.start(GatewayInbox(gateway))
        stack.callback(server.stop, 10)
        yield Served(gateway=gateway, server=server, fake=fake, agent=agent, clock=clock)


def test_a_scripted_conversation_is_counted_in_the_series_scraped_from_metrics(served: Served) -> None:
    session = served.chat("hello")
    assert served.chat("again", session) == session
    fake = served.fake
    fake.push("hi", chat_id="chat-1", message_id="m-1")
    assert fake.pop().text == "echo: hi"
    redelivered = fake.push("hi", chat_id="chat-1", message_id="m-1")
    assert isinstance(redelivered, AcceptResult)
    assert redelivered.duplicate
    fake.push("fail", chat_id="chat-2")
    assert "the agent failed" in fake.pop().text
    fake.fail_next(1, retry_after_s=3600)
    fake.push("later", chat_id="chat-3")  # answered, but its send fails and waits an hour for the retry
    served.scrape_until(lambda s: s.value("hermes_deliveries_retried_total", platform="fake") == 1, "the retry")
    fake.push("wait", chat_id="chat-4")
    assert served.agent.started.wait(10)
    served.clock.advance(30)

    metrics = served.scrape()
    assert metrics.value("hermes_turns_total", platform="api_server", outcome="ok") == 2
    assert metrics.value("hermes_turns_total", platform="fake", outcome="ok") == 2
    assert metrics.value("hermes_turns_total", platform="fake", outcome="failed") == 1
    assert metrics.value("hermes_turn_duration_seconds_count", platform="api_server") == 2
    assert metrics.value("hermes_turn_duration_seconds_count", platform="fake") == 3
    assert metrics.value("hermes_agent_call_duration_seconds_count", outcome="ok") == 4
    assert metrics.value("hermes_agent_call_duration_seconds_count", outcome="error") == 1
    assert metrics.value("hermes_model_tokens_total", direction="input") == 4 * 7
    assert metrics.value("hermes_model_tokens_total", direction="output") == 4 * 3
    assert metrics.value("hermes_inbox_duplicates_total", platform="fake") == 1
    assert metrics.value("hermes_inbox_pending") == 1  # the turn the agent holds
    assert metrics.value("hermes_inbox_oldest_age_seconds") == 30
    assert metrics.value("hermes_outbox_pending", platform="fake") == 1
    assert metrics.value("hermes_outbox_pending", platform="api_server") == 0
    assert metrics.value("hermes_outbox_oldest_age_seconds", platform="fake") == 30
    assert math.isnan(metrics.value("hermes_outbox_oldest_age_seconds", platform="api_server"))
    assert metrics.value("hermes_deliveries_given_up_total") == 0
    assert metrics.value("hermes_live_actors") == 5
    assert metrics.value("hermes_activations_total") == 5
    assert metrics.value("hermes_store_commit_duration_seconds_count") >= 1
    assert metrics.value("hermes_store_commit_batch_size_sum") >= metrics.value("hermes_store_commit_batch_size_count")

    served.agent.release.set()
    assert fake.pop().text == "echo: wait"
    fake.fail_next(1, permanent=True)
    fake.push("/new", chat_id="chat-1")
    after = served.scrape_until(
        lambda s: (
            s.value("hermes_passivations_total", reason="ended") == 1
            and s.value("hermes_deliveries_given_up_total", platform="fake") == 1
        ),
        "the ended session's actor to stop and its reply to be given up",
    )
    assert after.value("hermes_resets_total", reason="new_session") == 1
    assert after.value("hermes_inbox_pending") == 0
    served.clock.advance(RuntimeConfig().passivate_after_s + 1)
    served.gateway.tick()
    idle = served.scrape_until(lambda s: s.value("hermes_passivations_total", reason="idle") == 4, "idle passivations")
    assert idle.value("hermes_live_actors") == 0


def test_metrics_and_the_detailed_health_need_the_key_when_one_is_set(served: Served) -> None:
    for path in ("/metrics", "/health/detailed"):
        status, _, body = served.get(path)
        assert status == 401
        assert json.loads(body)["error"]["code"] == "invalid_api_key"
        assert served.get(path, {"Authorization": "Bearer wrong"})[0] == 401
        assert served.get(path, AUTH)[0] == 200
    assert served.get("/health")[0] == 200  # probes of load balancers carry no key
    assert served.get("/health/ready")[0] == 200


def test_ready_is_200_with_every_check_named_when_all_is_well(served: Served) -> None:
    served.gateway.platforms.started("flaky", FlakyAdapter(None))
    served.gateway.platforms.disabled("slack")
    status, body = served.json("/health/ready")
    assert status == 200
    assert body == {
        "status": "ready",
        "reasons": [],
        "store": {"writable": True, "reason": None},
        "platforms": [
            {"name": "flaky", "state": "running", "detail": ["flaky: a websocket to nowhere"], "last_error": None},
            {"name": "slack", "state": "disabled", "detail": [], "last_error": None},
        ],
    }


def test_ready_is_503_naming_a_platform_whose_connection_is_down(served: Served) -> None:
    adapter = FlakyAdapter("websocket closed: 4004 authentication failed")
    assert isinstance(adapter, ConnectionReporter)
    served.gateway.platforms.started("flaky", adapter)
    status, body = served.json("/health/ready")
    assert status == 503
    assert body["status"] == "not_ready"
    assert body["reasons"] == ["flaky: disconnected (websocket closed: 4004 authentication failed)"]
    assert body["store"] == {"writable": True, "reason": None}
    (flaky,) = body["platforms"]
    assert (flaky["state"], flaky["last_error"]) == (PlatformStatus.DISCONNECTED, adapter.problem)
    adapter.problem = None  # it reconnected
    assert served.json("/health/ready")[0] == 200


def test_ready_is_503_naming_a_platform_that_failed_to_start(served: Served) -> None:
    served.gateway.platforms.failed("webhook", "webhook: cannot listen on 127.0.0.1:8644 (address in use)")
    status, body = served.json("/health/ready")
    assert status == 503
    assert body["reasons"] == ["webhook: failed (webhook: cannot listen on 127.0.0.1:8644 (address in use))"]
    assert body["platforms"][0]["state"] == "failed"


class _ReadOnlyDisk:
    f_frsize = 4096
    f_bfree = f_bavail = 1 << 20
    f_flag = os.ST_RDONLY


def test_ready_and_detailed_are_503_naming_the_store_when_it_cannot_be_written(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "statvfs", lambda path: _ReadOnlyDisk())
    status, body = served.json("/health/ready")
    assert status == 503
    reason = body["store"]["reason"]
    assert body["store"]["writable"] is False
    assert "read-only filesystem" in reason
    assert body["reasons"] == [f"store: {reason}"]
    detailed_status, detailed = served.json("/health/detailed")
    assert detailed_status == 503
    assert detailed["reasons"] == body["reasons"]
    assert detailed["vitals"]["inbox_pending"] == 0
