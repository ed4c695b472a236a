"""Prompt stability holds for scheduled turns (issue 36): a job's run is an ordinary turn of its session, so the
model gets the session's frozen system message and tool list as the same bytes, and the conversation so far as the
same messages, with the job's prompt as the next user message."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hermes_actors.agents.openai_chat import OpenAIAgent
from hermes_actors.job_port import JobSpec
from tests.agents.chat_server import ChatServer, completion, open_chat_server
from tests.runtime.conftest import MakeGateway
from tests.runtime.test_prefix import PROMPT, prefix_of


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with open_chat_server() as running:
        yield running


def test_a_jobs_turn_sends_the_sessions_prefix_as_the_same_bytes_and_extends_its_history(
    make_gateway: MakeGateway, server: ChatServer
) -> None:
    with OpenAIAgent(
        base_url=server.base_url, model="test-model", api_key="sk-test", max_retries=0, system_prompt=PROMPT
    ) as agent:
        gateway, fake = make_gateway(agent=agent, auto_titles=False)
        server.script(completion("hi back"), completion("stretched"))
        fake.push("hi")
        assert fake.pop().text == "hi back"
        assert gateway.wait_idle()
        job = gateway.jobs.add(JobSpec(prompt="time to stretch", every="1h", chat="fake:chat-1"))
        gateway.jobs.run(job.id)
        assert fake.pop().text == "stretched"
        first, second = server.completion_bodies
    assert prefix_of(second) == prefix_of(first)  # the frozen system message and tools, byte for byte
    assert second["messages"][: len(first["messages"])] == first["messages"]  # the cached history, unchanged
    assert second["messages"][len(first["messages"]) :] == [
        {"role": "assistant", "content": "hi back"},
        {"role": "user", "content": "time to stretch"},
    ]
