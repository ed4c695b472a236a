"""SIGTERM while a platform is slow: ``hermesd`` exits 0 within its drain, the replies it could not send stay
queued, and the next start sends each of them once (the one cut mid-send flagged as a possible duplicate)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from hermes_actors.messages import decode_outbound
from hermes_actors.store import Store
from hermes_actors.testing import poll_until
from tests.daemon.test_daemon import SECRET, Daemon, _signed, start_daemon

DRAIN_S = 2.0
WAIT_S = 30.0


class SlowReceiver:
    """A webhook callback receiver on 127.0.0.1 that records every reply and, until :attr:`release` is set,
    holds each request without answering (a platform that stopped responding)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.replies: list[dict[str, Any]] = []
        self._changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                with receiver._changed:
                    receiver.replies.append(json.loads(body))
                    receiver._changed.notify_all()
                receiver.release.wait(WAIT_S)
                try:
                    self.send_response(200)
                    self.send_header("content-length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the daemon that sent it is gone

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="slow-receiver", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/replies"

    def wait_for(self, count: int) -> list[dict[str, Any]]:
        """Wait until ``count`` replies have arrived; return them all."""
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.replies) >= count, WAIT_S), self.replies
            return list(self.replies)

    def __enter__(self) -> SlowReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(WAIT_S)


@pytest.fixture
def receiver() -> Iterator[SlowReceiver]:
    with SlowReceiver() as running:
        yield running


def _config(callback: str) -> str:
    return f"""
daemon:
  drain_timeout_s: {DRAIN_S}
platforms:
  api_server:
    port: 0
  webhook:
    port: 0
    routes:
      default:
        secret: {SECRET}
        callback_url: {callback}
"""


def _outbox(home: Path) -> list[tuple[str, int, bool]]:
    """(text, attempts, sent) of every reply in the store, in commit order."""
    with Store.open(home / "state.db", readonly=True) as store:
        rows = store._connection.execute("SELECT payload, attempts, sent_at FROM outbox ORDER BY id").fetchall()
    found = []
    for payload, attempts, sent_at in rows:
        assert isinstance(payload, bytes)
        assert isinstance(attempts, int)
        found.append((decode_outbound(payload).text, attempts, sent_at is not None))
    return found


def _wait_for_replies(home: Path, count: int) -> None:
    poll_until(lambda: len(_outbox(home)) >= count, timeout=WAIT_S, what=f"the turns did not commit {count} replies")


@pytest.mark.slow
def test_sigterm_with_a_backlog_for_a_slow_platform_exits_0_in_time_and_the_next_start_sends_each_reply_once(
    tmp_path: Path, receiver: SlowReceiver
) -> None:
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.yaml").write_text(_config(receiver.url))
    first = Daemon(home, start_daemon(home))
    try:
        texts = [f"backlog {n}" for n in range(5)]
        for n, text in enumerate(texts):
            payload = {"text": text, "chat_id": "c1", "user_id": "u1"}
            assert _signed(first.webhook + "/webhooks/default", payload, f"msg_{n}") == 202
            _wait_for_replies(home, n + 1)  # one turn each: messages queued together would be merged into one
        receiver.wait_for(1)  # the first reply is on its way and the platform does not answer
        started = time.monotonic()
        code, _, err = first.stop(timeout=WAIT_S)
        elapsed = time.monotonic() - started
    finally:
        if first.process.poll() is None:
            first.process.kill()
            first.process.communicate(timeout=10)
    assert code == 0, err
    assert elapsed < DRAIN_S + 5.0, f"hermesd took {elapsed:.1f} s to stop with a {DRAIN_S} s drain"
    echoed = [f"echo: {text}" for text in texts]
    # Unsent, all of them; only the one cut mid-send has an attempt counted.
    assert _outbox(home) == [(echoed[0], 1, False)] + [(text, 0, False) for text in echoed[1:]]

    receiver.release.set()  # the platform answers again
    second = Daemon(home, start_daemon(home))
    try:
        replies = receiver.wait_for(6)
        _wait_for_replies(home, 5)
        code, _, err = second.stop(timeout=WAIT_S)
    finally:
        if second.process.poll() is None:
            second.process.kill()
            second.process.communicate(timeout=10)
    assert code == 0, err
    assert (
        [(r["text"], r["possible_duplicate"]) for r in replies]
        == [
            (echoed[0], False),  # cut by the stop: the outcome is unknown
            (echoed[0], True),
            *((text, False) for text in echoed[1:]),
        ]
    )
    assert [sent for _, _, sent in _outbox(home)] == [True] * 5
