"""What event webhooks cost a turn, and how fast deliveries drain to a receiver on loopback.

1. **emit**: ``Events.emit`` of one ``turn.completed`` inside a store transaction (one webhook subscribed), against
   the same transaction without it: microseconds per emit (an outbox row and its encoding).
2. **turns**: echo turns through an in-process gateway, ``--turns`` of them over ``--chats`` chats, once without
   webhooks and once with one subscribed to ``turn.completed`` (an EventSender posting to a ``ThreadingHTTPServer``
   on 127.0.0.1 in a process of its own that answers 204): turns/s, and how long after the last reply every delivery
   was marked sent.

Prints one ``name: value unit (note)`` line per figure. A plain script, not a test.
"""

from __future__ import annotations

import argparse
import base64
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hermes_actors.config import EVENTS_PLATFORM, EventKind, EventsConfig, EventWebhook, RuntimeConfig
from hermes_actors.daemon.startup import queued_at
from hermes_actors.runtime.events import Events
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.store import Store
from hermes_actors.testing import FakePlatform
from platforms.support.event_webhooks import EventSender

SECRET = "whsec_" + base64.b64encode(b"bench-events-secret-24-byte").decode()


_RECEIVER = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class Accept(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
server = ThreadingHTTPServer(("127.0.0.1", 0), Accept)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def _emit(rounds: int) -> None:
    config = EventsConfig(
        webhooks={"ops": EventWebhook(url="http://127.0.0.1:9/x", secret=SECRET, events=(EventKind.TURN_COMPLETED,))}
    )
    events = Events(config)
    data = {"session_id": "s", "outcome": "ok", "message_ids": ["m1"], "reply": "echo: hello " * 8}
    with tempfile.TemporaryDirectory() as tmp, Store.open(Path(tmp) / "state.db") as store:
        timings: dict[str, list[float]] = {"with": [], "without": []}
        for n in range(rounds):
            for label in ("with", "without") if n % 2 else ("without", "with"):
                started = time.perf_counter()
                with store.transaction():
                    store.kv.set_cursor("bench", str(n))
                    if label == "with":
                        events.emit(store, EventKind.TURN_COMPLETED, data)
                timings[label].append(time.perf_counter() - started)
    extra = (statistics.median(timings["with"]) - statistics.median(timings["without"])) * 1e6
    print(f"emit: {extra:.1f} us (median extra per transaction, one webhook, {rounds} rounds)")


def _turns(turns: int, chats: int, *, webhook: str | None) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "state.db"
        fake = FakePlatform()
        senders: list[Any] = [fake]
        config = None
        if webhook is not None:
            hook = EventWebhook(url=webhook, secret=SECRET, events=(EventKind.TURN_COMPLETED,))
            config = EventsConfig(webhooks={"ops": hook})
            senders.append(EventSender(config, queued_at=queued_at(db), environ={}))
        gateway = Gateway(
            db,
            config=RuntimeConfig(pending_soft_limit=10_000, pending_hard_limit=10_000),
            senders=senders,
            events=config,
        )
        fake.attach(gateway)
        try:
            started = time.perf_counter()
            for n in range(turns):
                fake.push(f"turn {n}", chat_id=f"c{n % chats}")
            for _ in range(turns):
                fake.pop(30)
            elapsed = time.perf_counter() - started
            drained = time.perf_counter()
            while webhook is not None:
                with gateway.read() as store:
                    if not store.outbox.unsent(EVENTS_PLATFORM):
                        break
                time.sleep(0.01)
            return turns / elapsed, time.perf_counter() - drained
        finally:
            gateway.stop(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=600)
    parser.add_argument("--chats", type=int, default=30)
    args = parser.parse_args()
    _emit(args.rounds)
    receiver = subprocess.Popen([sys.executable, "-c", _RECEIVER], stdout=subprocess.PIPE, text=True)
    try:
        assert receiver.stdout is not None
        url = f"http://127.0.0.1:{receiver.stdout.readline().strip()}/hooks"
        plain, _ = _turns(args.turns, args.chats, webhook=None)
        hooked, drain = _turns(args.turns, args.chats, webhook=url)
    finally:
        receiver.kill()
        receiver.wait()
    print(f"turns without webhooks: {plain:.0f} turns/s ({args.turns} echo turns, {args.chats} chats)")
    print(f"turns with one webhook: {hooked:.0f} turns/s (turn.completed for each)")
    print(f"deliveries drained: {drain * 1000:.0f} ms after the last reply ({args.turns} events, one lane)")


if __name__ == "__main__":
    main()
