"""Client-side tools through a real ``hermesd``: its agent is the built-in OpenAI agent on the scripted model of
:mod:`tests.agents.weather_model` (127.0.0.1), and the real clients of :mod:`tests.platforms.tool_clients` each
complete a round trip on its API (a server-side ``session_search`` and the client's ``get_weather`` in one turn,
then the answer), each in a session of its own that holds the round trip in order."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hermes_actors.store import Store
from tests.agents.chat_server import open_chat_server
from tests.agents.weather_model import WeatherModel, answer_for
from tests.daemon.test_daemon import Daemon, config, start_daemon
from tests.platforms.tool_clients import WEATHER, agents_run, check_transcript, langchain_invoke, stream_loop

pytestmark = pytest.mark.slow

Client = Callable[[str, str], tuple[str, list[str]]]
CLIENTS: dict[str, Client] = {
    "openai-python's streaming loop": stream_loop,
    "the Agents SDK in Responses mode": lambda url, key: agents_run(url, key, responses=True),
    "the Agents SDK in chat-completions mode": lambda url, key: agents_run(url, key, responses=False),
    "LangChain bind_tools": langchain_invoke,
}


@pytest.fixture
def model() -> Iterator[WeatherModel]:
    with open_chat_server() as server:
        yield WeatherModel(server)


@pytest.fixture
def daemon(tmp_path: Path, model: WeatherModel) -> Iterator[Daemon]:
    home = tmp_path / "h"
    home.mkdir()
    agent = f"""
runtime:
  auto_titles: false
agent:
  base_url: {model.server.base_url}
  model: test-model
  max_retries: 0
"""
    (home / "config.yaml").write_text(config() + agent)  # every listener on port 0
    process = start_daemon(home)
    try:
        yield Daemon(home, process)
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=10)  # closes its pipes, whether it ran or failed to start


def test_the_real_clients_complete_a_tool_round_trip_through_hermesd(daemon: Daemon, model: WeatherModel) -> None:
    for number, (name, client) in enumerate(CLIENTS.items(), start=1):
        answer, ran = client(daemon.api + "/v1", "unused")
        assert (answer, ran) == (answer_for(WEATHER), ["Paris"]), name
        assert model.calls == 3 * number, name
    code, _, err = daemon.stop()
    assert code == 0, err
    with Store.open(daemon.home / "state.db", readonly=True) as store:
        sessions = store.list_sessions(limit=10)
        assert len(sessions) == len(CLIENTS)  # the Agents SDK's chain continued its session
        for session in sessions:
            check_transcript(store.load_transcript(session.id))
