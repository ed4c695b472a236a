"""``daemon.http_port``: the API, generic webhooks and platform webhooks on one port for a reverse proxy."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.daemon.test_daemon import SECRET, Daemon, _signed, _user_messages, start_daemon
from tests.platforms.slack_fake import FakeSlack, event_callback, message, sign

SLACK_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
SLACK_TOKEN = "xoxb-17-team-one-main"


def _free_ports(count: int) -> list[int]:
    probes = [socket.socket() for _ in range(count)]
    try:
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [int(probe.getsockname()[1]) for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def _closed(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    fake = FakeSlack(tokens={SLACK_TOKEN: "T1"}).start()
    yield fake
    fake.stop()


@pytest.mark.slow
def test_one_port_carries_a_chat_completion_a_webhook_and_a_signed_slack_event_and_the_other_ports_stay_closed(
    tmp_path: Path, slack: FakeSlack
) -> None:
    shared, api_port, webhook_port, slack_port = _free_ports(4)
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.yaml").write_text(
        f"daemon:\n  http_port: {shared}\n  drain_timeout_s: 10\n"
        f"platforms:\n  api_server:\n    port: {api_port}\n"
        f"  webhook:\n    port: {webhook_port}\n    routes:\n      default:\n        secret: {SECRET}\n"
        f"  slack:\n    port: {slack_port}\n    api_base_url: {slack.api_base_url}\n"
        f"    apps:\n      main:\n        signing_secret: {SLACK_SECRET}\n        bot_token: {SLACK_TOKEN}\n"
    )
    process = start_daemon(home)
    base = f"http://127.0.0.1:{shared}"
    try:
        assert Daemon(home, process).api == base  # waits for the control socket: everything listens by then
        client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
        answer = client.chat.completions.create(
            model="hermes-agent", messages=[{"role": "user", "content": "through the one port"}]
        )
        assert answer.choices[0].message.content == "echo: through the one port"
        with client.chat.completions.with_streaming_response.create(
            model="hermes-agent", messages=[{"role": "user", "content": "streamed through the one port"}], stream=True
        ) as streamed:
            # The shared port's app has no response hook of the API's: the stream sets its guards itself.
            assert streamed.headers["Content-Security-Policy"] == "default-src 'none'"
            assert streamed.headers["X-Content-Type-Options"] == "nosniff"
            assert "echo: " in "".join(streamed.iter_lines())

        payload = {"text": "hook through the one port", "chat_id": "c1", "user_id": "u1"}
        assert _signed(base + "/webhooks/default", payload, "msg-one-port") in (200, 202)

        body = json.dumps(event_callback(message("slack through the one port", channel="D1", channel_type="im")))
        stamp = str(int(time.time()))
        request = urllib.request.Request(
            base + "/slack/events/main",
            data=body.encode(),
            headers={
                "Content-Type": "application/json",
                "X-Slack-Request-Timestamp": stamp,
                "X-Slack-Signature": sign(SLACK_SECRET, stamp, body.encode()),
            },
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200

        assert [_closed(port) for port in (api_port, webhook_port, slack_port)] == [True, True, True]
    finally:
        if process.poll() is None:
            process.terminate()
        out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert f"one port: {base}  (api_server: /v1 /health /metrics /api; webhook: /webhooks; slack: /slack" in out
    assert sorted(source for source, _ in _user_messages(home)) == ["api_server", "api_server", "slack", "webhook"]
