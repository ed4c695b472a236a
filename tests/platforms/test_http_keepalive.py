"""The shared HTTP client's kept-alive connections against a loopback server that counts every request it reads and
closes connections at chosen moments: connections are reused and bounded, no request is ever sent twice by the
library, and a failure is Unreachable only when the server never saw the request."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterator

import aiohttp
import pytest

from platforms.support.http_client import (
    KEEPALIVE_IDLE_S,
    MAX_IDLE_PER_HOST,
    ClientLoop,
    HttpClient,
    HttpResult,
    NetworkTransport,
    NoAnswer,
    Unreachable,
)
from platforms.support.http_client._sessions import client_session

# What the server does with a request it read (its x-id names it): answer and keep the connection, answer and
# close it at once (as a server whose idle timeout ends), answer with Connection: close, close unanswered after
# reading it whole, or close after reading its head only.
ANSWER, ANSWER_THEN_CLOSE, ANSWER_CONNECTION_CLOSE, DROP, DROP_AFTER_HEAD = (
    "answer",
    "answer-then-close",
    "answer-connection-close",
    "drop",
    "drop-after-head",
)
Plan = Callable[[str, int], str]  # (x-id, how many times that id arrived, this one included) -> what to do


class CountingServer:
    """A raw HTTP/1.1 server on 127.0.0.1 that reads requests with a ``Content-Length`` body and follows ``plan``."""

    def __init__(self, plan: Plan, *, hold_until: int = 0) -> None:
        self.plan = plan
        self.received: Counter[str] = Counter()  # x-id -> requests read (heads, for DROP_AFTER_HEAD)
        self.connections = 0
        self._lock = threading.Lock()
        self._hold = threading.Barrier(hold_until) if hold_until else None
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def hold_until(self, count: int) -> None:
        """Answer no request until ``count`` of them are being read at once (each on its own connection)."""
        self._hold = threading.Barrier(count)

    def close(self) -> None:
        self._stopped = True
        self._listener.close()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        buffer = b""
        with connection:
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = connection.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, buffer = buffer.split(b"\r\n\r\n", 1)
                fields = {
                    name.strip().lower(): value.strip()
                    for name, _, value in (line.partition(b":") for line in head.split(b"\r\n")[1:])
                }
                ident = fields.get(b"x-id", b"").decode()
                with self._lock:
                    self.received[ident] += 1
                    action = self.plan(ident, self.received[ident])
                if action == DROP_AFTER_HEAD:
                    return
                length = int(fields.get(b"content-length", b"0"))
                while len(buffer) < length:
                    chunk = connection.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                buffer = buffer[length:]
                if action == DROP:
                    return
                if self._hold is not None:
                    self._hold.wait(10)
                closing = b"Connection: close\r\n" if action == ANSWER_CONNECTION_CLOSE else b""
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n" + closing + b"\r\n{}")
                if action in (ANSWER_THEN_CLOSE, ANSWER_CONNECTION_CLOSE):
                    return


@pytest.fixture
def client_loop() -> Iterator[ClientLoop]:
    loop = ClientLoop("test-http-keepalive")
    try:
        yield loop
    finally:
        loop.close()


def _client(
    loop: ClientLoop, *, max_idle: int = MAX_IDLE_PER_HOST, keepalive_s: float = KEEPALIVE_IDLE_S
) -> HttpClient:
    return HttpClient(NetworkTransport(loop, max_idle=max_idle, keepalive_s=keepalive_s), loop=loop)


def _post(client: HttpClient, server: CountingServer, ident: str, method: str = "POST") -> HttpResult:
    return client.request(method, server.url + "/send", body=b'{"text": "hi"}', headers={"x-id": ident}, timeout=5)


def test_requests_one_after_another_reuse_one_connection(client_loop: ClientLoop) -> None:
    server = CountingServer(lambda ident, seen: ANSWER)
    client = _client(client_loop)
    try:
        assert [_post(client, server, str(i)).status for i in range(5)] == [200] * 5
        assert server.connections == 1
        assert server.received == Counter({str(i): 1 for i in range(5)})
    finally:
        client.close()
        server.close()


def test_a_connection_idle_longer_than_the_keepalive_time_is_not_reused(client_loop: ClientLoop) -> None:
    server = CountingServer(lambda ident, seen: ANSWER)
    client = _client(client_loop, keepalive_s=0.0)  # any idle time is too long
    try:
        assert [_post(client, server, str(i)).status for i in range(3)] == [200] * 3
        assert server.connections == 3
    finally:
        client.close()
        server.close()


def test_idle_connections_beyond_the_bound_per_host_are_closed_not_kept(client_loop: ClientLoop) -> None:
    server = CountingServer(lambda ident, seen: ANSWER, hold_until=8)
    client = _client(client_loop, max_idle=3)

    async def round_of_eight(first: int) -> list[int]:
        sends = (
            client.send("POST", server.url + "/send", body=b"{}", headers={"x-id": str(first + i)}) for i in range(8)
        )
        return [answer.status for answer in await asyncio.gather(*sends)]

    try:
        assert asyncio.run(round_of_eight(0)) == [200] * 8
        assert server.connections == 8  # all eight at once: each on its own connection
        server.hold_until(8)
        assert asyncio.run(round_of_eight(8)) == [200] * 8
        assert server.connections == 8 + 5  # three came from the pool, five were new
    finally:
        client.close()
        server.close()


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "GET", "PATCH"])
@pytest.mark.parametrize("drop", [DROP, DROP_AFTER_HEAD])
def test_a_request_dropped_on_a_reused_connection_is_no_answer_and_never_sent_again(
    client_loop: ClientLoop, method: str, drop: str
) -> None:
    # A second copy of "second" would be answered: a silent retry by the library would turn the failure into a 200.
    server = CountingServer(lambda ident, seen: drop if (ident, seen) == ("second", 1) else ANSWER)
    client = _client(client_loop)
    try:
        assert _post(client, server, "first", method).status == 200
        with pytest.raises(NoAnswer, match="did not answer after the request was sent"):
            _post(client, server, "second", method)
        assert server.received["second"] == 1
        assert server.connections == 1  # it went on the kept-alive connection
        assert _post(client, server, "third", method).status == 200  # and the next one on a new one
        assert server.connections == 2
    finally:
        client.close()
        server.close()


@pytest.mark.parametrize("closing", [ANSWER_THEN_CLOSE, ANSWER_CONNECTION_CLOSE])
def test_whenever_the_server_closes_a_kept_alive_connection_unreachable_means_it_never_saw_the_request(
    client_loop: ClientLoop, closing: str
) -> None:
    server = CountingServer(lambda ident, seen: closing)
    client = _client(client_loop)
    outcomes: dict[str, str] = {}
    try:
        for i in range(40):
            try:
                outcomes[str(i)] = f"HTTP {_post(client, server, str(i)).status}"
            except Unreachable:
                outcomes[str(i)] = "unreachable"
            except NoAnswer:
                outcomes[str(i)] = "no answer"
    finally:
        client.close()
        server.close()
    assert max(server.received.values()) == 1  # nothing arrived twice
    for ident, outcome in outcomes.items():
        assert outcome != "unreachable" or server.received[ident] == 0, ident
        assert outcome != "HTTP 200" or server.received[ident] == 1, ident
    if closing == ANSWER_CONNECTION_CLOSE:  # announced: never reused, so never a failure
        assert set(outcomes.values()) == {"HTTP 200"}
        assert server.connections == 40


def test_the_client_session_never_sends_twice_by_itself_and_caps_no_connections_in_use() -> None:
    async def check() -> None:
        session = client_session(max_idle=2, keepalive_s=1.0)
        try:
            assert session._retry_connection is False
            connector = session.connector
            assert isinstance(connector, aiohttp.TCPConnector)
            assert connector.limit == 0  # no cap on connections in use: long polls hold theirs for minutes
            assert not connector.force_close
        finally:
            await session.close()

    asyncio.run(check())
