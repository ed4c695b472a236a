"""``/health/ready`` of a real gateway naming a real adapter whose connection to its platform is down: Telegram
long-polling a fake Bot API that stops and comes back on the same address.

Each adapter's own ``connection_problem`` is tested in its platform's test module; this is the path from it to the
readiness probe (``PlatformBoard`` asks the running adapter at every read).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from hermes_actors.config import RuntimeConfig
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from hermes_actors.testing import FakeClock, FakePlatform, poll_until
from platforms.api_server import ApiServer, ApiServerConfig
from platforms.telegram import TelegramAdapter, TelegramBot, TelegramConfig
from tests.platforms.telegram_fake import TelegramFake, message, private_chat, user
from tests.platforms.test_api_observability import KEY, ScriptedAgent, Served

TOKEN = "111111:" + "A" * 35
ALICE = user(5001, "Alice", username="alice")


def telegram_config(fake: TelegramFake) -> TelegramConfig:
    return TelegramConfig(
        base_url=fake.base_url,
        bots={"main": TelegramBot(token=TOKEN)},
        port=0,
        poll_timeout_s=5,
        poll_retry_s=0.05,
        poll_retry_max_s=0.2,
        request_timeout_s=5.0,
    )


@pytest.fixture
def fakes() -> Iterator[list[TelegramFake]]:
    """The fake Bot APIs a test started, newest last; each is stopped at the end (stopping twice is harmless)."""
    started: list[TelegramFake] = []
    yield started
    for fake in started:
        fake.stop()


def start_fake(fakes: list[TelegramFake], port: int = 0, first_update_id: int = 700_000) -> TelegramFake:
    fake = TelegramFake(port=port, first_update_id=first_update_id).start()
    fakes.append(fake)
    fake.add_bot(TOKEN)
    return fake


@pytest.fixture
def served(tmp_path: Path, fakes: list[TelegramFake]) -> Iterator[tuple[Served, TelegramFake]]:
    """A gateway serving the API server and a Telegram bot that long-polls the first fake; the board knows both."""
    fake = start_fake(fakes)
    with ExitStack() as stack:
        clock = FakeClock()
        agent = ScriptedAgent()
        server = ApiServer(ApiServerConfig(port=0, key=KEY), environ={})
        telegram = TelegramAdapter(telegram_config(fake), environ={})
        other = FakePlatform("fake")
        gateway = Gateway(
            tmp_path / "state.db",
            config=RuntimeConfig(),
            agent=agent,
            senders=[*server.senders(), *telegram.senders(), other],
            clock=clock,
        )
        stack.callback(gateway.stop, 10)
        stack.callback(agent.release.set)
        inbox = GatewayInbox(gateway)
        server.start(inbox)
        stack.callback(server.stop, 10)
        telegram.start(inbox)
        stack.callback(telegram.stop, 10)
        gateway.platforms.started("api_server", server)
        gateway.platforms.started("telegram", telegram)
        yield Served(gateway=gateway, server=server, fake=other, agent=agent, clock=clock), fake


def ready_until(api: Served, status: int, containing: str = "") -> tuple[int, Any]:
    """Probe ``/health/ready`` until it answers ``status`` with ``containing`` in its body; return the answer."""

    def probe() -> tuple[int, Any] | None:
        answer = api.json("/health/ready")
        return answer if answer[0] == status and containing in json.dumps(answer[1]) else None

    return poll_until(probe, what=f"/health/ready to answer {status} with {containing!r}")


def telegram_health(body: Any) -> dict[str, Any]:
    (found,) = [p for p in body["platforms"] if p["name"] == "telegram"]
    return dict(found)


def test_ready_names_a_telegram_bot_that_cannot_reach_the_bot_api_and_is_200_once_it_polls_again(
    served: tuple[Served, TelegramFake], fakes: list[TelegramFake]
) -> None:
    api, fake = served
    fake.push(TOKEN, message(private_chat(ALICE), ALICE, "hi"))
    fake.wait_for(lambda: fake.sent(TOKEN))  # a poll was answered: connected
    status, body = api.json("/health/ready")
    assert status == 200, body
    assert telegram_health(body)["state"] == "running"

    fake.stop()  # the poll in flight may first see the server disconnect; the next ones find nobody listening
    status, body = ready_until(api, 503, "Cannot connect")
    telegram = telegram_health(body)
    assert telegram["state"] == "disconnected"
    assert telegram["last_error"].startswith(
        f"bot 'main': reconnecting (getUpdates: Cannot connect to host 127.0.0.1:{fake.port}"
    )
    assert TOKEN not in telegram["last_error"]
    assert "long-polls" in telegram["detail"][0]
    assert body["status"] == "not_ready"
    assert body["reasons"] == [f"telegram: disconnected ({telegram['last_error']})"]

    back = start_fake(fakes, fake.port, first_update_id=800_000)
    back.push(TOKEN, message(private_chat(ALICE), ALICE, "again"))  # the first poll that reaches it is answered
    status, body = ready_until(api, 200)
    assert telegram_health(body) == {**telegram, "state": "running", "last_error": None}
    assert body["reasons"] == []
