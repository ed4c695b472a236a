"""A webhook receiver on loopback that checks every request with the official ``standardwebhooks`` package and
answers from a script: the first requests fail as told (``500``, ``429`` with ``Retry-After``, ``drop``: the
connection closed without an answer), the rest are accepted (204). ``hold`` keeps requests unanswered until set."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

__all__ = ["Attempt", "Receiver", "open_receiver"]


@dataclass(frozen=True)
class Attempt:
    """One request as it arrived, and what the receiver did with it."""

    path: str
    webhook_id: str
    timestamp: str
    answer: str  # 500, 429, drop, accepted, unsigned
    body: bytes
    at: float


@dataclass
class Receiver:
    """The receiver's script and what it saw (see the module docstring)."""

    secret: str
    plan: list[str] = field(default_factory=list)  # answers for the next requests, then "accepted"
    retry_after: str = "1"
    attempts: list[Attempt] = field(default_factory=list)
    accepted: Counter[str] = field(default_factory=Counter)
    events: dict[str, Any] = field(default_factory=dict)  # webhook-id -> the verified JSON body
    hold: threading.Event | None = None  # requests wait until it is set, then are answered with ``after_hold``
    after_hold: str | None = None  # None: by the plan; "drop": the sender is gone (killed), nothing is accepted
    held: threading.Event = field(default_factory=threading.Event)  # a request is waiting on ``hold``
    url: str = ""
    _lock: threading.Condition = field(default_factory=threading.Condition)

    def answer(self, headers: dict[str, str], body: bytes, path: str, forced: str | None = None) -> str:
        """Verify and decide the answer of one request (``forced``: this one); record it."""
        try:
            payload = Webhook(self.secret).verify(body, headers)
            verified = True
        except WebhookVerificationError:
            payload, verified = None, False
        with self._lock:
            step = "unsigned" if not verified else forced or (self.plan.pop(0) if self.plan else "accepted")
            webhook_id = headers.get("webhook-id", "")
            self.attempts.append(
                Attempt(path, webhook_id, headers.get("webhook-timestamp", ""), step, body, time.time())
            )
            if step == "accepted":
                self.accepted[webhook_id] += 1
                self.events[webhook_id] = payload
            self._lock.notify_all()
        return step

    def wait_accepted(self, count: int, timeout: float = 30.0) -> None:
        """Wait until ``count`` distinct events were accepted."""
        with self._lock:
            if not self._lock.wait_for(lambda: len(self.accepted) >= count, timeout):
                seen = [(a.webhook_id, a.answer) for a in self.attempts]
                raise AssertionError(f"{len(self.accepted)} of {count} events accepted in {timeout} s; saw {seen}")

    def answers_of(self, webhook_id: str) -> list[str]:
        """The answers given to the attempts carrying ``webhook_id``, in order."""
        with self._lock:
            return [a.answer for a in self.attempts if a.webhook_id == webhook_id]

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        """The accepted events of type ``kind``, in the order they were accepted."""
        with self._lock:
            return [body for body in self.events.values() if body.get("type") == kind]


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            forced = None
            if receiver.hold is not None and not receiver.hold.is_set():
                receiver.held.set()
                receiver.hold.wait()
                forced = receiver.after_hold
            step = receiver.answer({k.lower(): v for k, v in self.headers.items()}, body, self.path, forced)
            if step == "drop":
                self.close_connection = True
                return
            status = {"500": 500, "429": 429, "unsigned": 401}.get(step, 204)
            self.send_response(status)
            if status == 429:
                self.send_header("Retry-After", receiver.retry_after)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


@contextmanager
def open_receiver(
    secret: str, plan: Sequence[str] = (), *, hold: threading.Event | None = None, after_hold: str | None = None
) -> Iterator[Receiver]:
    """A running receiver on 127.0.0.1 (its ``url`` ends in ``/hooks``)."""
    receiver = Receiver(secret=secret, plan=list(plan), hold=hold, after_hold=after_hold)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(receiver))
    server.daemon_threads = True
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hooks"
    thread = threading.Thread(target=server.serve_forever, name="webhook-receiver", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        if hold is not None:
            hold.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


def decoded(body: bytes) -> Any:
    """A request body as JSON."""
    return json.loads(body)
