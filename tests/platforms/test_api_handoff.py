"""``/handoff`` over the OpenAI-compatible API: the request that carried it is answered with where the
conversation went, instead of waiting until its client times out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from hermes_actors.testing import FakeThreadedPlatform
from platforms.api_server import SESSION_HEADER, ApiServer, ApiServerConfig

KEY = "sk-hermes-test"


class Running:
    def __init__(self, server: ApiServer, gateway: Gateway, telegram: FakeThreadedPlatform) -> None:
        self.server = server
        self.gateway = gateway
        self.telegram = telegram

    def ask(self, messages: list[dict[str, str]], **headers: str) -> tuple[str, str]:
        with openai.OpenAI(base_url=self.server.url + "/v1", api_key=KEY, max_retries=0, timeout=10) as client:
            raw = client.chat.completions.with_raw_response.create(
                model="hermes-agent",
                messages=messages,  # type: ignore[arg-type]
                extra_headers=headers,
            )
            completion = raw.parse()
        return completion.choices[0].message.content or "", raw.headers[SESSION_HEADER]


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    server = ApiServer(ApiServerConfig(port=0, key=KEY), environ={})
    telegram = FakeThreadedPlatform("telegram")
    gateway = Gateway(tmp_path / "state.db", senders=[*server.senders(), telegram])
    telegram.attach(gateway)
    server.start(GatewayInbox(gateway))
    try:
        yield Running(server, gateway, telegram)
    finally:
        server.stop(10)
        gateway.stop(timeout=10)


@pytest.mark.slow
def test_the_handoff_request_gets_where_the_conversation_went_as_its_response(running: Running) -> None:
    running.telegram.push("/sethome", chat_id="-100200", chat_type="group", user_id="alice")
    assert running.telegram.pop().text == "This chat is now the home channel for telegram."
    first = [{"role": "user", "content": "let us plan the release"}]
    reply, session = running.ask(first)
    assert reply == "echo: let us plan the release"
    assert running.gateway.wait_idle()
    conversation = [*first, {"role": "assistant", "content": reply}, {"role": "user", "content": "/handoff telegram"}]
    answer, answered_by = running.ask(conversation, **{SESSION_HEADER: session})
    assert answered_by == session
    assert answer == (
        "Handed off to telegram (chat -100200, thread thread-1): the conversation continues there. "
        f"To continue it here, send the header X-Hermes-Session-Id: {session}."
    )
    landed = running.telegram.pop()
    assert (landed.chat_id, landed.thread_id) == ("-100200", "thread-1")
    assert landed.text.startswith("echo: [handoff] This conversation was just handed off here from api_server.")
    assert running.gateway.session_for("agent:main:telegram:group:-100200:thread-1") == session
