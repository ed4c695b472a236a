"""A reply's send latency through the platforms' HTTP client: webhook replies POSTed to a loopback receiver.

Every figure goes the sender's full path: ``CallbackSender.send`` (encode, sign) → ``http_client.request`` → a
receiver on 127.0.0.1 that answers ``200 {}``. ``sequential`` sends one reply after another from one thread (the
latency one outbox lane sees); ``concurrent`` has ``--threads`` senders at once (the outbox's lanes). ``cpu`` is
the process's CPU time per send (every thread, the receiver's too), which a busy machine disturbs less than the
wall-clock figures. The receiver is a small asyncio protocol on its own thread, so it costs both sides of a
comparison alike. The ``reference`` lines POST the same JSON with ``http.client``, a connection per request (as the
senders' blocking client did before the one HTTP client) and one kept alive: a blocking client's floor. Not a
test.

``HERMES_BENCH_CODE=DIR`` measures the package of the checkout at ``DIR`` (compare two checkouts by alternating
them: ``for i in 1 2 3 4 5; do for d in OLD NEW; do HERMES_BENCH_CODE=$d python bench/http_send.py; done; done``).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import statistics
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import msgspec

sys.path.insert(0, os.environ.get("HERMES_BENCH_CODE") or str(Path(__file__).resolve().parent.parent))

from report import figure_line

from hermes_actors.messages import OutboundMessage
from hermes_actors.testing import FakeClock
from platforms.webhook import WebhookAdapter, WebhookConfig, WebhookRoute

_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


class _Receiver(asyncio.Protocol):
    """Answers each complete request (headers and ``Content-Length`` bytes of body) with ``200 {}``."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._buffer = b""

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while b"\r\n\r\n" in self._buffer:
            head, rest = self._buffer.split(b"\r\n\r\n", 1)
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(rest) < length:
                return
            self._buffer = rest[length:]
            self._transport.write(_ANSWER)


def _serve(ready: Future[int]) -> None:
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(loop.create_server(_Receiver, "127.0.0.1", 0, backlog=1024))
    ready.set_result(server.sockets[0].getsockname()[1])
    loop.run_forever()


def _reply(index: int) -> OutboundMessage:
    text = f"reply {index}: " + "the agent's answer, " * 10
    return OutboundMessage(platform="webhook", account_id="bench", chat_id="c1", text=text, session_id="s1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--replies", type=int, default=2000, help="replies per measurement (default 2000)")
    parser.add_argument("--threads", type=int, default=8, help="senders at once in the concurrent run (default 8)")
    args = parser.parse_args()
    ready: Future[int] = Future()
    threading.Thread(target=_serve, args=(ready,), daemon=True).start()
    url = f"http://127.0.0.1:{ready.result(timeout=10)}/hook"
    route = WebhookRoute(secret="whsec_" + "A" * 32, callback_url=url)
    (sender,) = WebhookAdapter(WebhookConfig(routes={"bench": route}), clock=FakeClock()).senders()
    for index in range(200):  # warm-up: imports, the client's loop, the first connections
        sender.send(_reply(index))
    latencies = []
    started, cpu = time.perf_counter(), time.process_time()
    for index in range(args.replies):
        before = time.perf_counter()
        sender.send(_reply(index))
        latencies.append(time.perf_counter() - before)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    latencies.sort()
    print(figure_line("sequential send median", statistics.median(latencies) * 1e6, "us"))
    print(figure_line("sequential send p90", latencies[int(len(latencies) * 0.9)] * 1e6, "us"))
    print(figure_line("sequential sends", args.replies / elapsed, "/s"))
    print(figure_line("sequential send cpu", cpu / args.replies * 1e6, "us", "this process, receiver included"))
    with ThreadPoolExecutor(args.threads) as pool:
        started, cpu = time.perf_counter(), time.process_time()
        list(pool.map(lambda index: sender.send(_reply(index)), range(args.replies)))
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    print(figure_line(f"concurrent sends ({args.threads} threads)", args.replies / elapsed, "/s"))
    print(figure_line("concurrent send cpu", cpu / args.replies * 1e6, "us", "this process, receiver included"))
    for kept in (False, True):
        median, cpu_each = _reference(url, args.replies, kept_alive=kept)
        how = "one kept-alive connection" if kept else "a connection per request"
        name = "reference http.client kept-alive send" if kept else "reference http.client send"
        print(figure_line(f"{name} median", median * 1e6, "us", f"{how}, the same body unsigned"))
        print(figure_line(f"{name} cpu", cpu_each * 1e6, "us", "this process, receiver included"))


def _reference(url: str, replies: int, *, kept_alive: bool) -> tuple[float, float]:
    """The median seconds and CPU seconds per POST of a reply's JSON with ``http.client`` (a blocking client's
    floor): a new connection per request, or one kept alive."""
    parts = urlsplit(url)
    body = msgspec.json.encode({"text": _reply(0).text, "chat_id": "c1"})
    headers = {"content-type": "application/json", "content-length": str(len(body))}
    connection: http.client.HTTPConnection | None = None
    latencies = []
    cpu = 0.0
    for index in range(200 + replies):  # the first 200 are a warm-up
        before, before_cpu = time.perf_counter(), time.process_time()
        if connection is None:
            connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=10)
        connection.request("POST", parts.path, body=body, headers=headers)
        answer = connection.getresponse()
        answer.read()
        if not kept_alive:
            connection.close()
            connection = None
        if index >= 200:
            latencies.append(time.perf_counter() - before)
            cpu += time.process_time() - before_cpu
    if connection is not None:
        connection.close()
    return statistics.median(latencies), cpu / replies


if __name__ == "__main__":
    main()
