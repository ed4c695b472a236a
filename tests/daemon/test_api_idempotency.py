"""An idempotent API request retried after ``hermesd`` restarted is answered from the store, not run again."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from hermes_actors.store import Store
from tests.daemon.test_daemon import Daemon, start_daemon


def _user_messages(home: Path) -> list[str]:
    with Store.open(home / "state.db", readonly=True) as store:
        return [
            m.content or ""
            for session in store.list_sessions()
            for m in store.load_transcript(session.id)
            if m.role == "user"
        ]


@pytest.mark.slow
def test_a_retry_after_a_restart_gets_the_stored_reply_and_runs_nothing(home: Path) -> None:
    headers = {"Idempotency-Key": "order-7f3a"}
    messages: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "charge the card"}]
    first = Daemon(home, start_daemon(home))
    try:
        with openai.OpenAI(base_url=first.api + "/v1", api_key="unused", max_retries=0, timeout=20) as client:
            answer = client.chat.completions.with_raw_response.create(
                model="m", messages=messages, extra_headers=headers
            )
    finally:
        code, _, err = first.stop()
    assert code == 0, err
    second = Daemon(home, start_daemon(home))
    try:
        with openai.OpenAI(base_url=second.api + "/v1", api_key="unused", max_retries=0, timeout=20) as client:
            retry = client.chat.completions.with_raw_response.create(
                model="m", messages=messages, extra_headers=headers
            )
            with pytest.raises(openai.ConflictError):
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "charge it twice"}], extra_headers=headers
                )
    finally:
        code, _, err = second.stop()
    assert code == 0, err
    assert (
        retry.parse().choices[0].message.content == answer.parse().choices[0].message.content == "echo: charge the card"
    )
    assert retry.headers["X-Hermes-Session-Id"] == answer.headers["X-Hermes-Session-Id"]
    assert _user_messages(home) == ["charge the card"]  # the turn ran once
