"""Issue 36's names through the real ``hermesd``: a chat completion sent with ``X-Hermes-Busy: reject`` while its
session runs a turn is answered 409 ``session_busy`` with ``Retry-After: busy.retry_after_s`` (openai-python's
``ConflictError``), and is not run; the turn it met answers as usual."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest

from hermes_actors.store import Store
from tests.agents.chat_server import ChatServer
from tests.daemon.test_busy_daemon import Hermesd, daemons, model
from tests.runtime.busy_model import GatedModel, answer_of

pytestmark = pytest.mark.slow

__all__ = ["daemons", "model"]  # the fixtures, shared with test_busy_daemon

SESSION = "busy-api"


def _config(model: str) -> str:
    return f"""
agent:
  base_url: {model}
  model: test-model
  max_retries: 0
runtime:
  auto_titles: false
daemon:
  drain_timeout_s: 0.2
busy:
  retry_after_s: 11
platforms:
  api_server:
    port: 0
"""


def _ask(daemon: Hermesd, text: str, **headers: str) -> str:
    with openai.OpenAI(base_url=daemon.api + "/v1", api_key="unused", max_retries=0, timeout=30) as client:
        completion = client.chat.completions.create(
            model="hermes-agent",
            messages=[{"role": "user", "content": text}],
            extra_headers={"X-Hermes-Session-Id": SESSION, **headers},
        )
    return completion.choices[0].message.content or ""


def test_x_hermes_busy_reject_is_a_409_with_retry_after_through_hermesd(
    tmp_path: Path, model: tuple[ChatServer, GatedModel], daemons: list[Hermesd]
) -> None:
    server, gate = model
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.yaml").write_text(_config(server.base_url))
    daemon = Hermesd(home)
    daemons.append(daemon)
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(_ask, daemon, "busy-1")
        gate.wait_calls("busy", 1)  # its model call is held: the session is busy
        with pytest.raises(openai.ConflictError) as refused:
            _ask(daemon, "busy-2", **{"X-Hermes-Busy": "reject"})
        gate.open()
        assert first.result(timeout=30) == answer_of("busy-1")
    assert refused.value.status_code == 409
    assert refused.value.code == "session_busy"
    assert refused.value.response.headers["Retry-After"] == "11"
    assert gate.calls["busy"] == 1  # the refused message was not run
    with Store.open(home / "state.db", readonly=True) as store:
        users = store._connection.execute("SELECT content FROM messages WHERE role = 'user' ORDER BY id").fetchall()
        assert [content for (content,) in users] == ["busy-1"]
        assert store.inbox.pending() == []
