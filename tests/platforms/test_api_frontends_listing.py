"""``hermesctl sessions list --json`` shows each session's user: the OpenAI ``user`` (or the forwarded or
configured user) of an API conversation that names one, ``null`` for one that names none."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from hermes_actors.cli.hermesctl import main
from platforms.api_server import SESSION_HEADER
from tests.agents.chat_server import ChatServer, completion
from tests.platforms import test_api_contract
from tests.platforms.test_api_contract import Serve, user
from tests.platforms.test_api_server import KEY

model = test_api_contract.model  # a scripted OpenAI-compatible model on 127.0.0.1
serve = test_api_contract.serve  # a gateway (its store in tmp_path) whose agent calls it, behind an API server

AUTH = {"Authorization": f"Bearer {KEY}"}


def test_sessions_list_json_shows_each_sessions_user(tmp_path: Path, serve: Serve, model: ChatServer) -> None:
    running = serve(trust_user_headers=True)
    model.respond_with(lambda body: completion("ok"))
    sessions = {}
    for label, body, headers in (
        ("named", {"user": "alice"}, AUTH),
        ("forwarded", {}, {**AUTH, "X-OpenWebUI-User-Id": "u-bob"}),
        ("nobody", {}, AUTH),
    ):
        status, answer_headers, answer = running.request(
            {"model": "m", "messages": [user(f"hello from {label}")], **body}, headers=headers
        )
        assert status == 200, answer
        sessions[answer_headers[SESSION_HEADER]] = label
    result = CliRunner().invoke(main, ["sessions", "list", "--json", "--home", str(tmp_path)])
    assert result.exit_code == 0, result.output
    users = {entry["id"]: entry["user"] for entry in json.loads(result.stdout)}
    assert {sessions[session_id]: users[session_id] for session_id in sessions} == {
        "named": "alice",
        "forwarded": "u-bob",
        "nobody": None,
    }
