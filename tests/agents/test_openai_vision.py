"""Images reach a vision-capable OpenAI-compatible model with the turn that carries them, and never again.

A real gateway runs the turns; the model is the scripted chat-completions server on loopback, which records every
request body.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from hermes_actors.agents.openai_chat import OpenAIAgent
from hermes_actors.config import RuntimeConfig
from hermes_actors.daemon.agent import build_agent
from hermes_actors.daemon.config_file import decode_settings
from hermes_actors.messages import Attachment, InboundMessage
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.testing import FakePlatform
from tests.agents.chat_server import ChatServer, completion, open_chat_server

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(200))
PNG_BASE64 = base64.b64encode(PNG).decode()

Start = Callable[..., tuple[Gateway, FakePlatform]]


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with open_chat_server() as running:
        yield running


@pytest.fixture
def start(server: ChatServer, db_path: Path) -> Iterator[Start]:
    """Start a gateway whose agent is an :class:`OpenAIAgent` on ``server``; everything stops at the end."""
    with ExitStack() as stack:

        def run(*, vision: bool = True) -> tuple[Gateway, FakePlatform]:
            agent = stack.enter_context(
                OpenAIAgent(
                    base_url=server.base_url, model="test-model", api_key="k", timeout_s=5, max_retries=0, vision=vision
                )
            )
            fake = FakePlatform()
            # No automatic titles: each scripted answer is for a turn, and every recorded request is one.
            gateway = Gateway(db_path, config=RuntimeConfig(auto_titles=False), agent=agent, senders=[fake])
            stack.callback(gateway.stop, 10)
            fake.attach(gateway)
            return gateway, fake

        yield run


def send(gateway: Gateway, text: str, *attachments: Attachment, message_id: str) -> None:
    source = SessionSource(platform="fake", chat_type="dm", chat_id="chat-1", user_id="user-1")
    gateway.accept(InboundMessage(source=source, text=text, message_id=message_id, attachments=attachments))


def user_messages(body: dict[str, Any]) -> list[Any]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


def test_an_image_goes_to_a_vision_model_once_and_later_turns_carry_only_its_stand_in(
    server: ChatServer, start: Start
) -> None:
    gateway, fake = start()
    image = gateway.media.save(PNG, name="cat.png")
    stand_in = f"what is this?\n[attached image cat.png (image/png, 208 bytes), saved at {image.path}]"
    server.script(completion("a cat"), completion("it was a cat"))
    send(gateway, "what is this?", image, message_id="m1")
    assert fake.pop().text == "a cat"
    send(gateway, "what was it again?", message_id="m2")
    assert fake.pop().text == "it was a cat"
    first, second = server.completion_bodies
    assert user_messages(first) == [
        [
            {"type": "text", "text": stand_in},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_BASE64}"}},
        ]
    ]
    # The next turn's history has the stand-in text the transcript kept, and no image part or bytes at all.
    assert user_messages(second) == [stand_in, "what was it again?"]
    assert "image_url" not in json.dumps(second)
    assert sum(json.dumps(body).count(PNG_BASE64) for body in server.completion_bodies) == 1


def test_a_model_without_vision_gets_the_stand_in_text_only(server: ChatServer, start: Start) -> None:
    gateway, fake = start(vision=False)
    image = gateway.media.save(PNG, name="cat.png")
    server.script(completion("I cannot see images"))
    send(gateway, "what is this?", image, message_id="m1")
    assert fake.pop().text == "I cannot see images"
    (body,) = server.completion_bodies
    assert user_messages(body) == [
        f"what is this?\n[attached image cat.png (image/png, 208 bytes), saved at {image.path}]"
    ]


def test_an_image_known_only_by_its_url_is_passed_on_as_that_url(server: ChatServer, start: Start) -> None:
    gateway, fake = start()
    linked = gateway.media.link("https://images.example.com/cat.jpg", kind="image", mime_type="image/jpeg")
    server.script(completion("a linked cat"))
    send(gateway, "and this?", linked, message_id="m1")
    assert fake.pop().text == "a linked cat"
    (body,) = server.completion_bodies
    ((_, part),) = user_messages(body)
    assert part == {"type": "image_url", "image_url": {"url": "https://images.example.com/cat.jpg"}}


def test_an_image_whose_file_is_gone_is_left_out_and_the_text_still_runs(
    server: ChatServer, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    gateway, fake = start()
    image = gateway.media.save(PNG, name="cat.png")
    Path(str(image.path)).unlink()
    server.script(completion("no image reached me"))
    with caplog.at_level(logging.WARNING):
        send(gateway, "what is this?", image, message_id="m1")
        assert fake.pop().text == "no image reached me"
    (body,) = server.completion_bodies
    assert [type(content) for content in user_messages(body)] == [str]
    assert "cannot be read" in caplog.text


def test_agent_vision_in_config_yaml_makes_the_daemon_build_a_vision_agent() -> None:
    settings = decode_settings({"agent": {"base_url": "http://127.0.0.1:9/v1", "model": "m", "vision": True}})
    agent = build_agent(settings.agent, {})
    assert isinstance(agent, OpenAIAgent)
    with agent:
        assert agent.vision
    assert decode_settings(None).agent.vision is False
