"""A turn the store cannot save (a full disk) is answered at once with a 503 that says so, and runs again, before
any later message of its session, once the store takes writes again."""

from __future__ import annotations

import threading
import time

import pytest

from hermes_actors import testing
from hermes_actors.agents.base import AgentReply, EchoAgent, TurnInput
from hermes_actors.config import RuntimeConfig
from hermes_actors.runtime.gateway import Gateway
from platforms.api_server import SESSION_HEADER
from tests.platforms import test_api_server
from tests.platforms.test_api_server import KEY, Running, Start, chat

start = test_api_server.start  # a gateway and an API server on 127.0.0.1


class GatedAgent(testing.GatedAgent):
    """The API tests' gated agent, holding only turns whose text starts with ``wait``."""

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        if turn.user_text.startswith("wait"):
            return super().run_turn(turn, timeout_s=timeout_s)
        return EchoAgent.run_turn(self, turn, timeout_s=timeout_s)


def _limit_pages(gateway: Gateway, pages: int | None) -> None:
    """Cap the writing connection's database at its current size (SQLite then answers SQLITE_FULL, as on a full
    disk), or lift the cap."""

    def cap(store: object) -> None:
        connection = store._connection  # type: ignore[attr-defined]
        limit = pages if pages is not None else int(connection.execute("PRAGMA page_count").get)
        connection.execute(f"PRAGMA max_page_count = {limit}")

    gateway._writer.call(cap)


def _post(running: Running, text: str, session: str | None = None) -> tuple[int, dict[str, object], float]:
    headers = {"Authorization": f"Bearer {KEY}", **({SESSION_HEADER: session} if session else {})}
    began = time.monotonic()
    status, _, body = running.request({"model": "hermes-agent", "messages": chat(text)}, headers=headers)
    return status, body, time.monotonic() - began


@pytest.mark.slow
def test_a_turn_the_full_disk_refuses_gets_a_503_at_once_and_runs_first_when_space_returns(start: Start) -> None:
    agent = GatedAgent()
    running = start(agent=agent, runtime=RuntimeConfig())
    status, _, _ = _post(running, "hello", session="diary")
    assert status == 200
    big = "wait " + "x" * 200_000  # needs new pages: the capped database cannot take it
    answer: dict[str, object] = {}

    def send() -> None:
        answer["status"], answer["body"], answer["took"] = _post(running, big, session="diary")

    sender = threading.Thread(target=send)
    sender.start()
    assert agent.started.wait(10)
    _limit_pages(running.gateway, None)
    agent.release.set()
    sender.join(20)
    assert answer["status"] == 503
    error = answer["body"]["error"]  # type: ignore[index]
    assert error["code"] == "storage_unavailable"
    assert "full" in error["message"]
    assert answer["took"] < 10  # type: ignore[operator]
    # A later message of the same session waits behind the unsaved one...
    later: dict[str, object] = {}

    def follow() -> None:
        later["status"], later["body"], later["took"] = _post(running, "after", session="diary")

    follower = threading.Thread(target=follow)
    follower.start()
    _limit_pages(running.gateway, 1_000_000)  # space again: the unsaved turn runs first, then the later one
    follower.join(30)
    assert later["status"] == 200
    assert running.gateway.wait_idle()
    with running.gateway.read() as store:
        (record,) = [s for s in store.list_sessions(limit=None) if s.chat_id == "diary"]
        users = [m.content for m in store.load_transcript(record.id) if m.role == "user"]
    assert users == ["hello", big, "after"]
