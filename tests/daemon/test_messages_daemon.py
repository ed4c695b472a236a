"""Every message has a visible outcome, through the real ``hermesd`` (issue 36 part 5): while its webhook route's
callback refuses the reply, ``hermesctl messages show`` tells the message's path (its inbox row, the session its turn
ran in, the reply's outbox attempts and last error) and that the reply waits to be sent; once the callback takes it,
that it was answered, with the reply sent once. (Dead letters and their replay: ``tests/events/test_messages.py``.)"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hermes_actors.cli.hermesctl import main as hermesctl
from hermes_actors.testing import poll_until
from tests.daemon.test_daemon import SECRET, Daemon, _signed, start_daemon

pytestmark = pytest.mark.slow


class _Callback:
    """A route's callback on 127.0.0.1: refuses with 404 until ``accept`` is set, then takes every reply."""

    def __init__(self) -> None:
        self.accept = threading.Event()
        self.refused = 0
        self.accepted: list[dict[str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if owner.accept.is_set():
                    owner.accepted.append(json.loads(body))
                    self.send_response(200)
                else:
                    owner.refused += 1
                    self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/replies"


@pytest.fixture
def callback() -> Iterator[_Callback]:
    receiver = _Callback()
    thread = threading.Thread(target=receiver.server.serve_forever, daemon=True)
    thread.start()
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()


def _ctl(home: Path, *args: str) -> str:
    result = CliRunner().invoke(hermesctl, [*args, "--home", str(home)])
    assert result.exit_code == 0, result.output
    return result.output


def test_hermesctl_messages_show_tells_a_messages_path_through_hermesd(tmp_path: Path, callback: _Callback) -> None:
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.yaml").write_text(
        f"""
runtime:
  outbox_retry_base_s: 0.2
  outbox_retry_max_s: 0.5
daemon:
  drain_timeout_s: 10
platforms:
  api_server:
    port: 0
  webhook:
    port: 0
    routes:
      default:
        secret: {SECRET}
        callback_url: {callback.url}
"""
    )
    daemon = Daemon(home, start_daemon(home))
    try:
        payload = {"text": "hello", "chat_id": "c1", "user_id": "u1"}
        assert _signed(f"{daemon.webhook}/webhooks/default", payload, "msg_path_1") == 202
        poll_until(lambda: callback.refused >= 2, what="the reply refused twice")
        shown = _ctl(home, "messages", "show", "msg_path_1", "--platform", "webhook", "--account", "default")
        assert "Message 1: webhook (account default), platform message msg_path_1" in shown
        assert "  From:      chat c1, user u1" in shown
        assert "  Inbox:     done, session " in shown
        (attempts,) = [line for line in shown.splitlines() if line.startswith("    outbox 1: ")]
        assert attempts.startswith("    outbox 1: retrying, ")
        assert "attempts: webhook route 'default': callback http://127.0.0.1:" in attempts  # the last error
        assert shown.splitlines()[-1] == "Outcome: answered; its reply waits to be sent."

        callback.accept.set()
        poll_until(lambda: "    outbox 1: sent " in _ctl(home, "messages", "show", "1"), what="the reply sent")
        assert _ctl(home, "messages", "show", "1").splitlines()[-1] == "Outcome: answered."
        assert [reply["text"] for reply in callback.accepted] == ["echo: hello"]  # once
        assert _ctl(home, "messages", "dead-letters") == "No dead letters waiting for a replay.\n"
        code, _, err = daemon.stop()
        assert code == 0, err
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()
            daemon.process.communicate(timeout=10)
