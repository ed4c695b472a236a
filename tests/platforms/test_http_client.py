"""The platforms' one HTTP client: a mock transport in place of the network, and the network against a loopback
server: what leaves, what comes back, and which failures may have reached the server (NoAnswer) or not
(Unreachable)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from platforms.support import http_client
from platforms.support.http_client import (
    SESSION_TIMEOUT,
    ClientLoop,
    HttpClient,
    HttpRequest,
    HttpResult,
    MockTransport,
    NoAnswer,
    TooLarge,
    Unreachable,
    open_session,
)


class Seen:
    """One request the loopback server read."""

    def __init__(self, method: str, path: str, headers: dict[str, str], body: bytes, port: int) -> None:
        self.method, self.path, self.headers, self.body, self.port = method, path, headers, body, port


class Loopback(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[Seen] = []
        self.arrived = threading.Event()
        self.release = threading.Event()
        self.hung_up = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: Loopback
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        return None

    def _answer(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        headers = {name.lower(): value for name, value in self.headers.items()}
        self.server.seen.append(Seen(self.command, self.path, headers, body, self.client_address[1]))
        self.server.arrived.set()
        path = self.path.split("?", 1)[0]
        if path == "/drop":  # read the request, then hang up without a word
            self.close_connection = True
        elif path == "/hold":
            self.server.release.wait(10)
            if self.rfile.read(1) == b"":  # the client gave up and closed its end
                self.server.hung_up.set()
            self.close_connection = True
        elif path == "/big":
            self._answer(200, b"x" * 100)
        elif path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for _ in range(10):
                self.wfile.write(b"a\r\n" + b"y" * 10 + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
        elif path == "/redirect":
            self._answer(302, b"", {"Location": "/ok"})
        elif path == "/cookie":
            self._answer(200, b"{}", {"Set-Cookie": "sid=secret; Path=/"})
        else:
            self._answer(200, b'{"ok": true}', {"Content-Type": "application/json", "X-Thing": "1"})

    do_GET = do_POST = _any


@pytest.fixture
def server() -> Iterator[Loopback]:
    loopback = Loopback()
    thread = threading.Thread(target=loopback.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield loopback
    finally:
        loopback.release.set()
        loopback.shutdown()
        loopback.server_close()


@pytest.fixture
def network() -> Iterator[HttpClient]:
    client = HttpClient()
    try:
        yield client
    finally:
        client.close()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# -- a transport in place of the network ------------------------------------------------------------------------


def test_a_mock_transport_answers_instead_of_the_network_and_sees_the_request_as_built() -> None:
    transport = MockTransport(lambda request: HttpResult(status=201, headers={"x": "1"}, body=b'{"id": 7}'))
    client = HttpClient(transport)
    result = client.request("POST", "https://api.example.org/send?t=1", json_body={"text": "hi"}, headers={"X-A": "b"})
    assert (result.status, result.json()) == (201, {"id": 7})
    (seen,) = transport.requests
    assert seen == HttpRequest(
        method="POST",
        url="https://api.example.org/send?t=1",
        headers={"x-a": "b", "content-type": "application/json; charset=utf-8"},
        body=b'{"text":"hi"}',
    )


def test_an_async_handler_is_awaited_from_a_coroutine_on_another_loop() -> None:
    async def handler(request: HttpRequest) -> HttpResult:
        await asyncio.sleep(0)
        return HttpResult(status=200, headers={}, body=request.method.encode())

    client = HttpClient(MockTransport(handler))
    assert asyncio.run(client.send("PUT", "http://example.org/")).body == b"PUT"


def test_what_a_transport_raises_reaches_the_caller_and_maps_to_the_send_error_it_means() -> None:
    def failing(request: HttpRequest) -> HttpResult:
        if request.url.endswith("/left"):
            raise NoAnswer("POST /left: did not answer after the request was sent (reset)")
        raise Unreachable("POST /down: cannot be reached (refused)")

    client = HttpClient(MockTransport(failing))
    with pytest.raises(NoAnswer) as lost:
        client.request("POST", "http://example.org/left")
    with pytest.raises(Unreachable) as down:
        client.request("POST", "http://example.org/down")
    assert http_client.send_error(lost.value, "a reply").outcome_unknown
    assert not http_client.send_error(down.value, "a reply").outcome_unknown


def test_a_url_that_is_not_http_never_reaches_the_transport() -> None:
    transport = MockTransport(lambda request: HttpResult(status=200, headers={}, body=b""))
    with pytest.raises(Unreachable, match="not an http\\(s\\) URL") as raised:
        HttpClient(transport).request("GET", "ftp://example.org/file")
    assert raised.value.reason == "not an http(s) URL"
    assert transport.requests == []


def test_a_blocking_request_from_the_client_loop_itself_is_refused_rather_than_deadlocked() -> None:
    client = HttpClient(MockTransport(lambda request: inner.request("GET", "http://example.org/inner")))
    inner = client
    with pytest.raises(RuntimeError, match="would wait on itself"):
        client.request("GET", "http://example.org/outer")


def test_a_request_under_way_when_its_loop_closes_gave_no_answer() -> None:
    arrived = threading.Event()

    async def hold(request: HttpRequest) -> HttpResult:
        arrived.set()
        await asyncio.Event().wait()  # never answers
        raise AssertionError("not reached")

    loop = ClientLoop("test-http-client")
    client = HttpClient(MockTransport(hold), loop=loop)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(client.request, "POST", "http://example.org/hook")
        assert arrived.wait(5)
        loop.close()
        with pytest.raises(NoAnswer, match="closed before the answer came"):
            waiting.result(5)


# -- the network --------------------------------------------------------------------------------------------------


def test_a_request_leaves_as_given_with_no_headers_of_the_librarys_own(server: Loopback, network: HttpClient) -> None:
    result = network.request("POST", server.url + "/a/%21room%3Aexample.org?q=%20x", body=b"raw", timeout=5)
    assert (result.status, result.json(), result.headers["x-thing"]) == (200, {"ok": True}, "1")
    (seen,) = server.seen
    assert (seen.method, seen.path, seen.body) == ("POST", "/a/%21room%3Aexample.org?q=%20x", b"raw")
    assert "user-agent" not in seen.headers
    assert "accept" not in seen.headers
    assert "content-type" not in seen.headers
    assert seen.headers["accept-encoding"] == "identity"


def test_requests_one_after_another_share_a_kept_alive_connection_and_no_cookie_is_kept(
    server: Loopback, network: HttpClient
) -> None:
    network.request("GET", server.url + "/cookie")
    network.request("GET", server.url + "/ok")
    first, second = server.seen
    assert first.port == second.port
    assert "cookie" not in second.headers


def test_after_a_server_hung_up_unanswered_the_next_request_goes_on_a_new_connection(
    server: Loopback, network: HttpClient
) -> None:
    network.request("POST", server.url + "/ok")
    with pytest.raises(NoAnswer):
        network.request("POST", server.url + "/drop")
    network.request("POST", server.url + "/ok")
    first, dropped, third = server.seen
    assert first.port == dropped.port != third.port


def test_redirects_are_answers_unless_the_caller_follows_them(server: Loopback, network: HttpClient) -> None:
    assert network.request("GET", server.url + "/redirect").status == 302
    followed = network.request("GET", server.url + "/redirect", follow_redirects=True)
    assert (followed.status, followed.json()) == (200, {"ok": True})


def test_proxy_variables_are_not_read(server: Loopback, network: HttpClient, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{closed_port()}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert network.request("GET", server.url + "/ok").status == 200


def test_a_closed_port_is_unreachable_and_the_reason_names_no_url(network: HttpClient) -> None:
    url = f"http://127.0.0.1:{closed_port()}/bot123:SECRET/send?token=SECRET"
    with pytest.raises(Unreachable, match="cannot be reached") as raised:
        network.request("POST", url, json_body={})
    assert not raised.value.timed_out
    assert "SECRET" not in raised.value.reason
    assert "token=" not in str(raised.value)


def test_a_server_that_hangs_up_after_reading_the_request_gave_no_answer(server: Loopback, network: HttpClient) -> None:
    with pytest.raises(NoAnswer, match="did not answer after the request was sent") as raised:
        network.request("POST", server.url + "/drop", json_body={"text": "once"})
    assert server.seen[0].body == b'{"text":"once"}'  # it arrived: a retry may duplicate it
    assert not raised.value.timed_out


def test_a_server_that_holds_the_request_past_the_timeout_gave_no_answer(server: Loopback, network: HttpClient) -> None:
    with pytest.raises(NoAnswer, match="did not answer after the request was sent") as raised:
        network.request("POST", server.url + "/hold", timeout=0.2)
    assert raised.value.timed_out


@pytest.mark.parametrize(("path", "size"), [("/big", 100), ("/chunked", None)])
def test_an_answer_over_the_limit_is_too_large(
    server: Loopback, network: HttpClient, path: str, size: int | None
) -> None:
    with pytest.raises(TooLarge, match="larger than 50 bytes") as raised:
        network.request("GET", server.url + path, max_bytes=50)
    assert (raised.value.status, raised.value.size) == (200, size)
    assert isinstance(raised.value, NoAnswer)


def test_cancelling_a_submitted_request_ends_it_and_closes_its_connection(
    server: Loopback, network: HttpClient
) -> None:
    pending = network.submit("POST", server.url + "/hold", json_body={}, timeout=30)
    assert server.arrived.wait(5)
    assert pending.cancel()
    with pytest.raises(concurrent.futures.CancelledError):
        pending.result(5)
    server.release.set()
    assert server.hung_up.wait(5)


def test_a_coroutine_awaits_the_network_from_its_own_loop(server: Loopback, network: HttpClient) -> None:
    async def main() -> list[int]:
        answers = await asyncio.gather(*(network.send("GET", server.url + "/ok") for _ in range(3)))
        return [answer.status for answer in answers]

    assert asyncio.run(main()) == [200, 200, 200]


def test_an_adapters_session_has_the_house_defaults() -> None:
    async def main() -> None:
        async with open_session() as session:
            assert session.timeout == SESSION_TIMEOUT
            assert not session.trust_env

    asyncio.run(main())
