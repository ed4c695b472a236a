"""The console's Live page shows how messages ended and the dead letters waiting for a replay."""

from __future__ import annotations

from tests.platforms.console_client import Console, console
from tests.platforms.test_api_operator import KEY

__all__ = ["console"]  # the fixture


def test_the_live_page_counts_messages_by_how_they_ended(console: Console) -> None:
    body = {"model": "hermes-agent", "messages": [{"role": "user", "content": "count me"}]}
    status, _, _ = console.api.raw("POST", "/v1/chat/completions", body, key=KEY)
    assert status == 200
    client = console.logged_in()
    data = client.get("/console/live.json").json()
    assert data["messages_answered"] == 1
    assert (data["messages_refused"], data["messages_stopped"], data["messages_dead_lettered"]) == (0, 0, 0)
    assert (data["dead_letters_waiting"], data["dead_deliveries_waiting"]) == (0, 0)
    page = client.get("/console/live").text
    assert "Messages answered / refused / stopped" in page
    assert '<span data-field="messages_answered">1</span>' in page
    assert '<span class="value" data-field="messages_dead_lettered">0</span>' in page
