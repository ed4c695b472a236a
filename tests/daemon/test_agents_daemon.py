"""Several agents behind one real ``hermesd``: two webhook routes bound to two agents (the echo agent and a scripted
OpenAI-compatible endpoint) answer differently, keep their agents across a restart even after the bindings were
swapped, and new chats take the new bindings; the API lists the agents and a request's model chooses one."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from hermes_actors.store import Store
from hermes_actors.testing import poll_until
from tests.agents.chat_server import ChatServer, Scripted, completion, open_chat_server
from tests.daemon.test_daemon import SECRET, Daemon, _script, _signed, start_daemon


@pytest.fixture
def model() -> Iterator[ChatServer]:
    """An endpoint that answers with the system message it was sent, so a reply shows the session's prompt."""
    with open_chat_server(model="support-model") as server:

        def answer(body: Any) -> Scripted:
            system = next((m["content"] for m in body["messages"] if m["role"] == "system"), None)
            users = [m["content"] for m in body["messages"] if m["role"] == "user"]
            return completion(f"[{system}] {users[-1]}")

        server.respond_with(answer)
        yield server


def config(model: ChatServer, *, helpdesk: str, billing: str) -> str:
    return f"""
daemon:
  drain_timeout_s: 10
runtime:
  auto_titles: false
agent:
  system_prompt: You are the front desk.
agents:
  support:
    base_url: {model.base_url}
    model: support-model
    max_retries: 0
    system_prompt: You are support.
bindings:
  - {{agent: {helpdesk}, platform: webhook, account: helpdesk}}
  - {{agent: {billing}, platform: webhook, account: billing}}
platforms:
  api_server:
    port: 0
  webhook:
    port: 0
    routes:
      helpdesk:
        secret: {SECRET}
      billing:
        secret: {SECRET}
"""


def answers(home: Path) -> dict[tuple[str, str], tuple[str | None, list[str]]]:
    """Each webhook chat's (route, chat id): its session's agent and the replies stored in it, oldest first."""
    with Store.open(home / "state.db", readonly=True) as store:
        rows = store._connection.execute(
            "SELECT s.account_id, s.chat_id, s.agent, m.content FROM messages m "
            "JOIN sessions s ON s.ref = m.session_ref WHERE m.role = 'assistant' AND s.source = 'webhook' ORDER BY m.id"
        ).fetchall()
    found: dict[tuple[str, str], tuple[str | None, list[str]]] = {}
    for route, chat, agent, content in rows:
        found.setdefault((str(route), str(chat)), (None if agent is None else str(agent), []))[1].append(str(content))
    return found


def send(daemon: Daemon, route: str, chat: str, text: str, message_id: str) -> None:
    payload = {"text": text, "chat_id": chat, "user_id": f"user-{chat}"}
    assert _signed(f"{daemon.webhook}/webhooks/{route}", payload, message_id) == 202


def wait_for(home: Path, expected: dict[tuple[str, str], tuple[str | None, list[str]]]) -> None:
    def arrived() -> bool:
        found = answers(home)
        return all(found.get(key, (None, []))[1][: len(replies)] == replies for key, (_, replies) in expected.items())

    poll_until(arrived, timeout=30, what=f"the replies {expected} were not all stored")
    found = answers(home)
    assert {key: found[key] for key in expected} == expected


def run(home: Path) -> Daemon:
    return Daemon(home, start_daemon(home))


def stop(daemon: Daemon) -> None:
    code, _, err = daemon.stop()
    assert code == 0, err


@pytest.mark.slow
def test_two_routes_bound_to_two_agents_answer_differently_and_keep_their_agents_across_a_swapped_restart(
    tmp_path: Path, model: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.yaml").write_text(config(model, helpdesk="support", billing="default"))
    daemon = run(home)
    try:
        send(daemon, "helpdesk", "c1", "my order is late", "msg-1")
        send(daemon, "billing", "c2", "an invoice, please", "msg-2")
        wait_for(
            home,
            {
                ("helpdesk", "c1"): ("support", ["[You are support.] my order is late"]),
                ("billing", "c2"): ("default", ["echo: an invoice, please"]),
            },
        )
    finally:
        stop(daemon)

    # The bindings swap: the chats that have sessions keep their agents; new chats take the new bindings.
    (home / "config.yaml").write_text(config(model, helpdesk="default", billing="support"))
    daemon = run(home)
    try:
        send(daemon, "helpdesk", "c1", "still late", "msg-3")
        send(daemon, "billing", "c2", "and a refund", "msg-4")
        send(daemon, "helpdesk", "c3", "a new question", "msg-5")
        send(daemon, "billing", "c4", "a new invoice", "msg-6")
        wait_for(
            home,
            {
                ("helpdesk", "c1"): (
                    "support",
                    ["[You are support.] my order is late", "[You are support.] still late"],
                ),
                ("billing", "c2"): ("default", ["echo: an invoice, please", "echo: and a refund"]),
                ("helpdesk", "c3"): ("default", ["echo: a new question"]),
                ("billing", "c4"): ("support", ["[You are support.] a new invoice"]),
            },
        )
        with Store.open(home / "state.db", readonly=True) as store:
            prompts = dict(
                store._connection.execute("SELECT chat_id, system_prompt FROM sessions WHERE source = 'webhook'")
            )
        assert prompts == {
            "c1": "You are support.",
            "c2": "You are the front desk.",
            "c3": "You are the front desk.",
            "c4": "You are support.",
        }

        client = openai.OpenAI(base_url=daemon.api + "/v1", api_key="unused", max_retries=0)
        assert [m.id for m in client.models.list()] == ["hermes-agent", "default", "support"]
        reply = client.chat.completions.create(model="support", messages=[{"role": "user", "content": "over http"}])
        assert reply.choices[0].message.content == "[You are support.] over http"
        plain = client.chat.completions.create(model="hermes-agent", messages=[{"role": "user", "content": "hi"}])
        assert plain.choices[0].message.content == "echo: hi"

        listed = subprocess.run(
            [*_script("hermesctl"), "sessions", "list", "--home", str(home)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert listed.returncode == 0, listed.stderr
        header = listed.stdout.splitlines()[0]
        assert "AGENT" in header
    finally:
        stop(daemon)
