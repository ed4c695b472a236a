"""A scripted OpenAI-compatible chat-completions server on loopback, for tests.

Each ``POST /v1/chat/completions`` takes the next scripted :class:`Scripted` response; ``GET /v1/models`` lists
one model. A tool loop is scripted as ``completion(None, tool_calls=[tool_call(...)])`` then a final
``completion("answer")``. Every request is recorded (parsed JSON body, lower-cased headers) before it is answered.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

__all__ = ["ChatServer", "Recorded", "Scripted", "completion", "failure", "open_chat_server", "tool_call"]

_CONNECTION_ERRORS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


@dataclass(frozen=True)
class Scripted:
    """One scripted answer: status, JSON body, extra headers and a delay before answering."""

    status: int = 200
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    # For a request with "stream": true: the content in these pieces (else the body's content in one), each
    # ``gap_s`` after the last; ``cut_after`` pieces and the connection closes without finishing.
    pieces: tuple[str, ...] | None = None
    gap_s: float = 0.0
    cut_after: int | None = None
    # Held until the test sets ``hold``: the answer (after ``delay_s``), or with ``hold_before`` the streamed piece
    # of that number, so the test decides when the model goes on, not a guess of how long the other side takes.
    hold: threading.Event | None = None
    hold_before: int | None = None


@dataclass(frozen=True)
class Recorded:
    """One request the server received."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any


def completion(
    content: str | None,
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    prompt_tokens: int | None = 11,
    completion_tokens: int | None = 7,
    model: str = "test-model",
) -> Scripted:
    """A 200 chat completion with one assistant choice; ``None`` token counts leave ``usage`` out."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    body: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"},
        ],
    }
    if prompt_tokens is not None and completion_tokens is not None:
        body["usage"] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
    return Scripted(body=body)


def tool_call(call_id: str, name: str, arguments: Mapping[str, Any] | str) -> dict[str, Any]:
    """One function tool call as a model returns it; a mapping is sent as JSON text, a string as it is."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def failure(status: int, message: str, *, retry_after_ms: int | None = 1) -> Scripted:
    """An OpenAI-shaped error; ``retry_after_ms`` keeps client retries quick (``None`` omits the header)."""
    headers = {} if retry_after_ms is None else {"retry-after-ms": str(retry_after_ms)}
    body = {"error": {"message": message, "type": "server_error", "param": None, "code": None}}
    return Scripted(status=status, body=body, headers=headers)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    chat: ChatServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out has hung up; that is the test's point, not a server fault.
        if not self.chat.released.is_set():
            super().handle_error(request, client_address)


def _held(scripted: Scripted, chat: ChatServer) -> bool:
    """Wait for ``scripted.hold`` (if any); False when the server closes first (drop the connection)."""
    if scripted.hold is None:
        return True
    while not scripted.hold.wait(0.02):
        if chat.released.is_set():
            return False
    return True


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        chat = self.server.chat
        chat.record(self._recorded(None))
        if self.path.rstrip("/") == "/v1/models":
            self._send(Scripted(body={"object": "list", "data": [{"id": chat.model, "object": "model"}]}))
        else:
            self._send(Scripted(status=404, body={"error": {"message": f"no route {self.path}"}}))

    def do_POST(self) -> None:
        chat = self.server.chat
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        chat.record(self._recorded(body))
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(Scripted(status=404, body={"error": {"message": f"no route {self.path}"}}))
            return
        scripted = chat.next_response(body)
        if scripted.delay_s > 0 and chat.released.wait(scripted.delay_s):
            return  # the server is closing: drop the connection instead of answering late
        if scripted.hold_before is None and not _held(scripted, chat):
            return
        if isinstance(body, dict) and body.get("stream") and scripted.status == 200:
            self._stream(scripted)
            return
        self._send(scripted)

    def _stream(self, scripted: Scripted) -> None:
        """Answer as a streamed completion: role, content pieces, tool calls, finish, usage, [DONE]."""
        chat = self.server.chat
        message = scripted.body["choices"][0]["message"]
        content = message.get("content")
        pieces = scripted.pieces if scripted.pieces is not None else ((content,) if content else ())
        base = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 0, "model": chat.model}

        def chunk(delta: dict[str, Any] | None, finish: str | None = None, usage: Any = None) -> bytes:
            choices = [{"index": 0, "delta": delta, "finish_reason": finish}] if delta is not None else []
            event = {**base, "choices": choices, **({"usage": usage} if usage is not None else {})}
            return b"data: " + json.dumps(event).encode() + b"\n\n"

        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(chunk({"role": "assistant", "content": ""}))
            self.wfile.flush()
            for number, piece in enumerate(pieces):
                if scripted.cut_after is not None and number >= scripted.cut_after:
                    return  # the handler closes the connection mid-answer
                if scripted.gap_s > 0 and chat.released.wait(scripted.gap_s):
                    return
                if number == scripted.hold_before and not _held(scripted, chat):
                    return
                self.wfile.write(chunk({"content": piece}))
                self.wfile.flush()
            calls = message.get("tool_calls") or []
            if calls:
                indexed = [{"index": i, **call} for i, call in enumerate(calls)]
                self.wfile.write(chunk({"tool_calls": indexed}))
            self.wfile.write(chunk({}, "tool_calls" if calls else "stop"))
            if scripted.body.get("usage") is not None:
                self.wfile.write(chunk(None, usage=scripted.body["usage"]))
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except _CONNECTION_ERRORS:
            pass

    def _recorded(self, body: Any) -> Recorded:
        headers = {name.lower(): value for name, value in self.headers.items()}
        return Recorded(method=self.command, path=self.path, headers=headers, body=body)

    def _send(self, scripted: Scripted) -> None:
        data = scripted.body if isinstance(scripted.body, bytes) else json.dumps(scripted.body).encode()
        try:
            self.send_response(scripted.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in scripted.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except _CONNECTION_ERRORS:
            pass  # the client gave up waiting


class ChatServer:
    """The scripted server; use :func:`open_chat_server` to run one."""

    def __init__(self, *, model: str = "test-model") -> None:
        self.model = model
        self.released = threading.Event()
        self._lock = threading.Lock()
        self._queue: deque[Scripted] = deque()
        self._responder: Callable[[Any], Scripted] | None = None
        self._requests: list[Recorded] = []
        self._http = _Server(("127.0.0.1", 0), _Handler)
        self._http.chat = self
        self._thread = threading.Thread(
            target=self._http.serve_forever, kwargs={"poll_interval": 0.02}, name="chat-server", daemon=True
        )

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL, ending in ``/v1``."""
        host, port = cast(tuple[str, int], self._http.server_address[:2])
        return f"http://{host}:{port}/v1"

    @property
    def requests(self) -> list[Recorded]:
        """A snapshot of the requests received so far, oldest first."""
        with self._lock:
            return list(self._requests)

    @property
    def completion_bodies(self) -> list[Any]:
        """The JSON bodies of the chat-completion requests received so far."""
        return [r.body for r in self.requests if r.path.rstrip("/") == "/v1/chat/completions"]

    def script(self, *responses: Scripted) -> None:
        """Queue responses for the next chat-completion requests, in order."""
        with self._lock:
            self._queue.extend(responses)

    def record(self, request: Recorded) -> None:
        """Keep a received request."""
        with self._lock:
            self._requests.append(request)

    def respond_with(self, responder: Callable[[Any], Scripted] | None) -> None:
        """Answer requests nothing is scripted for with ``responder(body)`` (a model that reads its input)."""
        with self._lock:
            self._responder = responder

    def next_response(self, body: Any = None) -> Scripted:
        """Take the next scripted response, else the responder's; an unanswerable request gets a 500 that must not
        be retried."""
        with self._lock:
            if self._queue:
                return self._queue.popleft()
            responder = self._responder
        if responder is not None:
            return responder(body)
        body = {"error": {"message": "chat_server: no scripted response left; call script() first"}}
        return Scripted(status=500, body=body, headers={"x-should-retry": "false"})

    def start(self) -> None:
        """Serve in a daemon thread."""
        self._thread.start()

    def close(self) -> None:
        """Release delayed answers, stop serving and close the socket."""
        self.released.set()
        if self._thread.is_alive():
            self._http.shutdown()
            self._thread.join(timeout=5)
        self._http.server_close()


@contextmanager
def open_chat_server(*, model: str = "test-model") -> Iterator[ChatServer]:
    """Run a :class:`ChatServer` on an ephemeral loopback port and always shut it down."""
    server = ChatServer(model=model)
    server.start()
    try:
        yield server
    finally:
        server.close()
