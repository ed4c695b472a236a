"""``daemon.http_port``: the API, generic webhooks and platform webhooks on one port for a reverse proxy."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, closing
from email.message import Message
from pathlib import Path

import openai
import pytest

from hermes_actors.daemon.config_file import decode_settings
from hermes_actors.daemon.startup import prepare_start
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from platforms.api_server import ApiServer, ApiServerConfig
from platforms.api_server.guards import CONSOLE_CSP, SECURITY_HEADERS
from platforms.support.shared_http import SharedListener
from platforms.webhook.adapter import WebhookAdapter
from platforms.webhook.config import WebhookConfig, WebhookRoute
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
        with urllib.request.urlopen(base + "/console", timeout=10) as response:  # the console, redirected to log in
            assert response.url.startswith(base + "/console/login?next=")
            assert "Content-Security-Policy" in response.headers
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
    assert (
        f"one port: {base}  (api_server: /v1 /health /metrics /api /console /mcp; webhook: /webhooks; slack: /slack"
        in out
    )
    assert sorted(source for source, _ in _user_messages(home)) == ["api_server", "api_server", "slack", "webhook"]


def _answer_headers(url: str, method: str = "GET") -> tuple[int, Message[str, str]]:
    request = urllib.request.Request(url, method=method, data=b"{}" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.headers


def test_every_answer_of_the_one_port_carries_the_security_headers_not_only_the_apis(tmp_path: Path) -> None:
    api = ApiServer(ApiServerConfig(port=0, key="sk-one-port-key"), environ={})
    hooks = WebhookAdapter(WebhookConfig(port=0, routes={"default": WebhookRoute(secret=SECRET)}), environ={})
    listener = SharedListener(host="127.0.0.1", port=0)
    assert listener.attach("api_server", api)
    assert listener.attach("webhook", hooks)
    with Gateway(tmp_path / "state.db", senders=[*api.senders(), *hooks.senders()]) as gateway:
        inbox = GatewayInbox(gateway, admin_key="hk-one-port-admin-key-for-tests")
        api.start(inbox)
        hooks.start(inbox)
        listener.start()
        try:
            base = listener.host.url
            answers = {
                "webhook GET (405)": _answer_headers(base + "/webhooks/default"),
                "unknown webhook route": _answer_headers(base + "/webhooks/nowhere", "POST"),
                "unknown path (404)": _answer_headers(base + "/no/such/path"),
                "root (404)": _answer_headers(base + "/"),
                "API without a key (401)": _answer_headers(base + "/v1/models"),
            }
            console_status, console = _answer_headers(base + "/console/login")
        finally:
            listener.stop(10)
    assert [status for status, _ in answers.values()] == [405, 404, 404, 404, 401]
    for what, (_, headers) in answers.items():
        assert {name: headers.get(name) for name in SECURITY_HEADERS} == dict(SECURITY_HEADERS), what
    # The console's pages keep their own policy: the listener's headers only fill in what a response lacks.
    assert (console_status, console["Content-Security-Policy"]) == (200, CONSOLE_CSP)
    assert (console["Referrer-Policy"], console["X-Frame-Options"]) == ("same-origin", "DENY")


def test_the_daemons_http_limits_hold_on_the_one_port(tmp_path: Path) -> None:
    (shared,) = _free_ports(1)
    settings = decode_settings(
        {
            "daemon": {"http_port": shared, "http_header_timeout_s": 0.3, "http_max_connections": 5},
            "platforms": {"webhook": {"routes": {"default": {"secret": SECRET}}}},
        }
    )
    plan = prepare_start(settings, home=tmp_path, environ={})
    assert plan.listener is not None
    with Gateway(tmp_path / "state.db") as gateway, ExitStack() as stack:
        inbox = GatewayInbox(gateway, admin_key="hk-one-port-admin-key-for-tests")
        for adapter in plan.adapters.values():
            adapter.start(inbox)
            stack.callback(adapter.stop)
        plan.listener.start()
        stack.callback(plan.listener.stop, 10)
        idle = [stack.enter_context(closing(socket.create_connection(("127.0.0.1", shared)))) for _ in range(8)]
        with urllib.request.urlopen(f"http://127.0.0.1:{shared}/health", timeout=5) as response:
            assert response.status == 200  # past the cap of 5: idle ones made room
        idle[-1].settimeout(1.3)
        assert idle[-1].recv(1) == b""  # closed by the header timeout (0.3 s), not after aiohttp's hour
