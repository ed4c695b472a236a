"""The crash harness on the webhook platform: killed between accept and reply, the reply still arrives once."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from hermes_actors.testing import poll_until
from platforms.webhook import WebhookConfig, WebhookRoute
from tests.platforms.crash import AdapterWorker, wait_for_inbox

SECRET = "whsec_" + base64.b64encode(b"crash-test secret of 32 bytes!!!").decode()


class Callbacks(ThreadingHTTPServer):
    bodies: list[dict[str, object]]


class _Handler(BaseHTTPRequestHandler):
    server: Callbacks

    def do_POST(self) -> None:
        length = int(self.headers["content-length"])
        self.server.bodies.append(json.loads(self.rfile.read(length)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return None  # quiet tests


@pytest.fixture
def callbacks() -> Iterator[Callbacks]:
    server = Callbacks(("127.0.0.1", 0), _Handler)
    server.bodies = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _post(url: str, payload: dict[str, object], webhook_id: str) -> int:
    body = json.dumps(payload).encode()
    stamp = str(int(time.time()))
    key = base64.b64decode(SECRET.removeprefix("whsec_"))
    signature = base64.b64encode(hmac.new(key, f"{webhook_id}.{stamp}.".encode() + body, hashlib.sha256).digest())
    request = urllib.request.Request(
        url,
        data=body,
        headers={"webhook-id": webhook_id, "webhook-timestamp": stamp, "webhook-signature": "v1," + signature.decode()},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return int(response.status)


@pytest.mark.slow
def test_a_kill_between_accept_and_reply_loses_nothing_and_replies_once(tmp_path: Path, callbacks: Callbacks) -> None:
    db = tmp_path / "state.db"
    callback = f"http://127.0.0.1:{callbacks.server_address[1]}/hook"
    config = WebhookConfig(port=0, routes={"r": WebhookRoute(secret=SECRET, callback_url=callback)})
    worker = AdapterWorker.start(db, "webhook", config, agent="hold")
    try:
        assert _post(worker.url() + "/webhooks/r", {"text": "survive", "chat_id": "c"}, "msg_crash") == 202
        assert wait_for_inbox(db, 1) == [("msg_crash", "pending")]
    finally:
        worker.kill()
    assert callbacks.bodies == []
    worker = AdapterWorker.start(db, "webhook", config, agent="echo")
    try:
        poll_until(lambda: callbacks.bodies, 20, what="a callback")
        # the sender retries the delivered message as the same webhook; nothing more arrives for it. A later
        # message of the same chat is the barrier: its reply leaves after any reply queued before it.
        assert _post(worker.url() + "/webhooks/r", {"text": "survive", "chat_id": "c"}, "msg_crash") == 202
        assert _post(worker.url() + "/webhooks/r", {"text": "after", "chat_id": "c"}, "msg_after") == 202
        poll_until(lambda: len(callbacks.bodies) >= 2, 20, what="the barrier's callback")
    finally:
        worker.stop()
    assert [body["text"] for body in callbacks.bodies] == ["echo: survive", "echo: after"]
