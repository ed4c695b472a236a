"""The API in front of several agents: ``GET /v1/models`` lists them, a request's ``model`` chooses the agent of the
session it starts (chat completions, stateless or with a session header, Responses and runs), and a session keeps
its agent whatever a later request names. Through the real OpenAI client against a real gateway."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import openai
import pytest

from hermes_actors.agents.echo import EchoAgent
from hermes_actors.agents.turn import AgentMessage, AgentReply, TurnInput
from hermes_actors.runtime.agent_roster import DEFAULT_AGENT, AgentBinding, AgentRoster, NamedAgent
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from hermes_actors.store import Role
from hermes_actors.testing import poll_until
from platforms.api_server import SESSION_HEADER, ApiServer, ApiServerConfig
from tests.platforms.console_client import ConsoleClient
from tests.platforms.test_api_operator import ADMIN
from tests.platforms.test_api_operator import Api as OperatorApi


class Voice(EchoAgent):
    """Answers with the system message its session froze, so a reply shows which agent gave it."""

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        text = f"[{turn.system_prompt}] {turn.user_text}"
        return AgentReply(messages=(AgentMessage(role=Role.ASSISTANT, content=text),), text=text)


class Api:
    def __init__(self, server: ApiServer, gateway: Gateway) -> None:
        self.server = server
        self.gateway = gateway
        self.client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=10)

    def chat(self, model: str, text: str, **headers: str) -> tuple[str, str]:
        raw = self.client.chat.completions.with_raw_response.create(
            model=model, messages=[{"role": "user", "content": text}], extra_headers=headers
        )
        return raw.parse().choices[0].message.content or "", raw.headers[SESSION_HEADER]

    def agent_of(self, session_id: str) -> str | None:
        with self.gateway.read() as store:
            return store.get_session(session_id).agent


def roster(bindings: tuple[AgentBinding, ...] = ()) -> AgentRoster:
    return AgentRoster(
        [
            NamedAgent(name=DEFAULT_AGENT, agent=Voice(system_prompt="front desk")),
            NamedAgent(name="support", agent=Voice(system_prompt="support")),
            NamedAgent(name="sales", agent=Voice(system_prompt="sales")),
        ],
        bindings,
    )


@contextmanager
def serve(path: Path, bindings: tuple[AgentBinding, ...] = ()) -> Iterator[Api]:
    server = ApiServer(ApiServerConfig(port=0), environ={})
    gateway = Gateway(path, agents=roster(bindings), senders=server.senders())
    server.start(GatewayInbox(gateway, admin_key=ADMIN))
    try:
        yield Api(server, gateway)
    finally:
        server.stop(10)
        gateway.stop(10)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    with serve(tmp_path / "state.db") as running:
        yield running


def test_models_lists_the_model_name_then_every_agent_the_default_first(api: Api) -> None:
    models = list(api.client.models.list())
    assert [m.id for m in models] == ["hermes-agent", "default", "support", "sales"]
    assert {m.owned_by for m in models} == {"hermes-actors"}


def test_a_model_naming_an_agent_starts_its_session_with_that_agent(api: Api) -> None:
    reply, session_id = api.chat("support", "my order is late")
    assert reply == "[support] my order is late"
    assert api.agent_of(session_id) == "support"
    reply, other = api.chat("hermes-agent", "hello")  # the server's own model name: the bindings choose
    assert reply == "[front desk] hello"
    assert api.agent_of(other) == "default"
    reply, _ = api.chat("gpt-4o", "hello again")  # a client's default model is no agent: the bindings choose
    assert reply == "[front desk] hello again"


def test_a_session_keeps_its_agent_whatever_a_later_request_names(api: Api) -> None:
    _, session_id = api.chat("sales", "a quote, please")
    reply, continued = api.chat("support", "and a refund", **{SESSION_HEADER: session_id})
    assert continued == session_id
    assert reply == "[sales] and a refund"
    assert api.agent_of(session_id) == "sales"


def test_a_stateless_conversation_begun_with_another_agent_is_another_session(api: Api) -> None:
    def stateless(model: str) -> tuple[str, str]:
        raw = api.client.chat.completions.with_raw_response.create(
            model=model,
            messages=[
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
                {"role": "user", "content": "what can you do?"},
            ],
        )
        return raw.parse().choices[0].message.content or "", raw.headers[SESSION_HEADER]

    support_reply, support_session = stateless("support")
    sales_reply, sales_session = stateless("sales")
    assert (support_reply, sales_reply) == ("[support] what can you do?", "[sales] what can you do?")
    assert support_session != sales_session
    assert stateless("support")[1] == support_session  # the same conversation with the same agent: its session
    _, plain = stateless("hermes-agent")
    assert plain not in (support_session, sales_session)


def test_responses_take_the_agent_a_new_chain_names_and_keep_it_along_the_chain(api: Api) -> None:
    first = api.client.responses.create(model="sales", input="a quote, please")
    assert first.output_text == "[sales] a quote, please"
    second = api.client.responses.create(model="support", input="and a refund", previous_response_id=first.id)
    assert second.output_text == "[sales] and a refund"


def test_a_run_naming_an_agent_starts_its_session_with_it(api: Api) -> None:
    created = api.client.post("/runs", body={"input": "status?", "model": "support"}, cast_to=object)
    assert isinstance(created, dict)
    run_id = created["run_id"]

    def finished() -> dict[str, object] | None:
        state = api.client.get(f"/runs/{run_id}", cast_to=object)
        assert isinstance(state, dict)
        return state if state["status"] == "completed" else None

    state = poll_until(finished, what="the run did not complete")
    assert state["output"] == "[support] status?"
    session_id = state["session_id"]
    assert isinstance(session_id, str)
    assert api.agent_of(session_id) == "support"


def test_with_one_agent_alone_models_lists_the_model_name_only(tmp_path: Path) -> None:
    server = ApiServer(ApiServerConfig(port=0, model_name="house"), environ={})
    gateway = Gateway(tmp_path / "state.db", senders=server.senders())
    server.start(GatewayInbox(gateway))
    try:
        with openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0) as client:
            assert [m.id for m in client.models.list()] == ["house"]
    finally:
        server.stop(10)
        gateway.stop(10)


# -- the operator's views -----------------------------------------------------------------------------------------


def test_the_console_and_the_operator_api_show_each_sessions_agent_and_a_fork_keeps_it(api: Api) -> None:
    _, support = api.chat("support", "my order is late")
    _, plain = api.chat("hermes-agent", "hello")
    operator = OperatorApi(api.server, api.gateway)
    assert operator.call("GET", f"/api/sessions/{support}")[1]["agent"] == "support"
    assert operator.call("GET", f"/api/sessions/{plain}")[1]["agent"] == "default"
    status, child = operator.call("POST", f"/api/sessions/{support}/fork")
    assert status == 201
    assert child["agent"] == "support"
    status, answer = operator.call("POST", f"/api/sessions/{child['id']}/chat", {"message": "still there?"})
    assert status == 200
    assert answer["reply"] == "[support] still there?"

    client = ConsoleClient(operator.port)
    client.log_in(ADMIN)
    listing = client.get("/console/conversations")
    assert listing.status == 200
    assert listing.text.count('<div class="sub">agent <bdi>support</bdi></div>') == 2  # the session and its fork
    assert '<div class="sub">agent <bdi>default</bdi></div>' in listing.text
    page = client.get(f"/console/c/{child['id']}")
    assert '<bdi id="conversation-agent">support</bdi>' in page.text


def test_a_session_the_operator_creates_takes_the_agent_the_bindings_choose(tmp_path: Path) -> None:
    with serve(tmp_path / "state.db", (AgentBinding(agent="sales", platform="api_server"),)) as running:
        operator = OperatorApi(running.server, running.gateway)
        status, created = operator.call("POST", "/api/sessions", {"title": "Quotes"})
        assert status == 201
        assert created["agent"] == "sales"
        status, answer = operator.call("POST", f"/api/sessions/{created['id']}/chat", {"message": "a quote"})
        assert status == 200
        assert answer["reply"] == "[sales] a quote"
