"""The console's tests without a browser: a gateway and API server on 127.0.0.1 (the ``console`` fixture) and a
cookie-keeping HTTP client that sends what a browser sends, by hand."""

from __future__ import annotations

import base64
import http.client
import json
import re
import struct
import zlib
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from hermes_actors.config import RuntimeConfig
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.inbox_port import GatewayInbox
from platforms.api_server import ApiServer, ApiServerConfig
from tests.platforms.test_api_operator import ADMIN, KEY, Api

__all__ = ["PNG", "Answer", "Console", "ConsoleClient", "console", "image_turn", "open_console"]


def _png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A solid-colour PNG, built by hand (no imaging library needed)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


PNG = _png(48, 48, (220, 60, 40))
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


class Answer:
    """One response: status, headers (every ``Set-Cookie`` kept) and the body as text."""

    def __init__(self, status: int, headers: http.client.HTTPMessage, body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.data = body
        self.text = body.decode("utf-8", "replace")

    @property
    def location(self) -> str:
        return self.headers.get("Location", "")

    def cookies(self) -> list[str]:
        return self.headers.get_all("Set-Cookie") or []

    def csrf(self) -> str:
        match = _CSRF.search(self.text)
        assert match is not None, self.text[:2000]
        return match[1]

    def json(self) -> Any:
        return json.loads(self.data)


class ConsoleClient:
    """Requests to one server on 127.0.0.1, keeping the cookies it sets as a browser would (by name).

    ``headers`` go with every request (a reverse proxy's ``X-Forwarded-*``); ``origin`` is the one its form posts
    carry (the page's origin: by default this server's)."""

    def __init__(self, port: int, *, headers: Mapping[str, str] | None = None, origin: str | None = None) -> None:
        self.port = port
        self.cookies: dict[str, str] = {}
        self.headers = dict(headers or {})
        self._origin = origin

    @property
    def origin(self) -> str:
        return self._origin or f"http://127.0.0.1:{self.port}"

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: Mapping[str, str] | None = None
    ) -> Answer:
        sent = {**self.headers, **(headers or {})}
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{name}={value}" for name, value in self.cookies.items())
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request(method, path, body=body, headers=sent)
            response = connection.getresponse()
            answer = Answer(response.status, response.headers, response.read())
        finally:
            connection.close()
        for line in answer.cookies():
            for name, morsel in SimpleCookie(line).items():
                if morsel["max-age"] == "0" or not morsel.value:
                    self.cookies.pop(name, None)
                else:
                    self.cookies[name] = morsel.value
        return answer

    def get(self, path: str) -> Answer:
        return self.request("GET", path)

    def post(self, path: str, fields: Mapping[str, str], *, origin: str | None = None) -> Answer:
        headers = {"Content-Type": "application/x-www-form-urlencoded", "Origin": origin or self.origin}
        return self.request("POST", path, urlencode(fields).encode(), headers)

    def log_in(self, key: str) -> Answer:
        form = self.get("/console/login")
        answer = self.post("/console/login", {"csrf": form.csrf(), "key": key, "next": "/console/conversations"})
        assert answer.status == 303, answer.text[:500]
        return answer


class Console:
    """A running gateway and API server, their operator API and a console client."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.client = ConsoleClient(api.port)

    def fresh(self, *, headers: Mapping[str, str] | None = None, origin: str | None = None) -> ConsoleClient:
        return ConsoleClient(self.api.port, headers=headers, origin=origin)

    def logged_in(self) -> ConsoleClient:
        self.client.log_in(ADMIN)
        return self.client


@contextmanager
def open_console(directory: Path, config: ApiServerConfig | None = None) -> Iterator[Console]:
    """A gateway in ``directory`` and an API server of ``config`` (port 0, the client key ``KEY``) serving it."""
    with ExitStack() as stack:
        server = ApiServer(config or ApiServerConfig(port=0, key=KEY), environ={})
        gateway = Gateway(
            directory / "state.db", config=RuntimeConfig(protected_recent_messages=2), senders=server.senders()
        )
        stack.callback(gateway.stop, 10)
        server.start(GatewayInbox(gateway, admin_key=ADMIN))
        stack.callback(server.stop, 10)
        yield Console(Api(server, gateway))


@pytest.fixture
def console(tmp_path: Path) -> Iterator[Console]:
    with open_console(tmp_path) as running:
        yield running


def image_turn(api: Api, text: str) -> str:
    """A chat completion carrying a PNG; the id of the session it made."""
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    body = {
        "model": "hermes-agent",
        "user": "picture-user",
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}],
            }
        ],
    }
    status, headers, data = api.raw("POST", "/v1/chat/completions", body, key=KEY)
    assert status == 200, data
    return str(headers["X-Hermes-Session-Id"])
