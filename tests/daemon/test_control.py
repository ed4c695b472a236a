"""The control socket: frames, errors, permissions."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from hermes_actors.daemon.control import (
    Bind,
    Chat,
    ChatReply,
    ChatText,
    ChatTool,
    ControlError,
    ControlServer,
    Emit,
    JobsReply,
    JobsRequest,
    Request,
    SessionAction,
    SessionAdmin,
    SessionAdminReply,
    Status,
    check_socket_path,
    connect,
)
from hermes_actors.errors import SessionNotFoundError
from hermes_actors.testing import poll_until


def _handler(request: Request, emit: Emit) -> msgspec.Struct:
    match request:
        case SessionAdmin(action=SessionAction.RENAME):
            return SessionAdminReply(session_id=request.session_id, title=request.title)
        case SessionAdmin():
            raise SessionNotFoundError(f"no session {request.session_id!r} to {request.action}")
        case Chat(stream=True) if request.text.startswith("stream "):
            words = request.text.removeprefix("stream ").split()
            emit(ChatTool(name="search", call_id="c1", status="running"))
            for word in words:
                emit(ChatText(delta=word + " "))
            return ChatReply(session_id="s1", text=" ".join(words) + " ")
        case Chat():
            return ChatReply(session_id="s1", text=f"echo: {request.text}")
        case Bind():
            raise SessionNotFoundError(f"no session {request.session_id!r}")
        case Status():
            raise RuntimeError("boom")
        case JobsRequest():
            return JobsReply(jobs=[])


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ControlServer]:
    control = ControlServer(tmp_path / "c.sock", _handler)
    control.start()
    try:
        yield control
    finally:
        control.stop()


def test_requests_and_replies_round_trip_on_one_connection(server: ControlServer) -> None:
    client = connect(server.path)
    assert client is not None
    with client:
        for text in ("one", "two", "三"):
            reply = client.chat(Chat(chat_id="t", user_id="u", text=text, message_id=text))
            assert reply == ChatReply(session_id="s1", text=f"echo: {text}")


def test_a_streamed_chat_hands_each_event_over_before_its_reply_and_the_connection_goes_on(
    server: ControlServer,
) -> None:
    client = connect(server.path)
    assert client is not None
    seen: list[object] = []
    with client:
        request = Chat(chat_id="t", user_id="u", text="stream a b", message_id="m1", stream=True)
        reply = client.chat(request, seen.append)
        assert seen == [
            ChatTool(name="search", call_id="c1", status="running"),
            ChatText(delta="a "),
            ChatText(delta="b "),
        ]
        assert reply == ChatReply(session_id="s1", text="a b ")
        assert client.chat(Chat(chat_id="t", user_id="u", text="next", message_id="m2")).text == "echo: next"


def test_a_client_gone_mid_stream_leaves_the_turn_to_finish_without_an_error(tmp_path: Path) -> None:
    closed = threading.Event()
    finished: list[str] = []

    def handler(request: Request, emit: Emit) -> msgspec.Struct:
        emit(ChatText(delta="first "))
        assert closed.wait(10)
        for _ in range(50):  # into a closed connection: dropped, never raised
            emit(ChatText(delta="more "))
        finished.append("turn done")
        return ChatReply(session_id="s1", text="first more")

    control = ControlServer(tmp_path / "g.sock", handler)
    control.start()
    try:
        client = connect(control.path)
        assert client is not None
        events: list[object] = []

        def first_then_leave(event: object) -> None:
            events.append(event)
            client.close()
            closed.set()

        with pytest.raises(ControlError):
            client.chat(Chat(chat_id="t", user_id="u", text="x", message_id="m", stream=True), first_then_leave)
        poll_until(lambda: finished, what="the handler to finish its turn")
    finally:
        control.stop()
    assert events == [ChatText(delta="first ")]


def test_a_daemon_that_does_not_stream_answers_a_streamed_chat_with_its_reply_alone(server: ControlServer) -> None:
    # The handler streams only "stream ..." lines: any other is answered as a daemon before streaming would.
    client = connect(server.path)
    assert client is not None
    seen: list[object] = []
    with client:
        reply = client.chat(Chat(chat_id="t", user_id="u", text="plain", message_id="m", stream=True), seen.append)
    assert (reply.text, seen) == ("echo: plain", [])


def test_a_chat_request_from_a_client_before_streaming_decodes_with_stream_off() -> None:
    legacy = msgspec.msgpack.encode(
        {"type": "Chat", "chat_id": "t", "user_id": "u", "text": "x", "message_id": "m", "timeout_s": 5.0}
    )
    decoded = msgspec.msgpack.decode(legacy, type=Chat)
    assert decoded.stream is False


def test_handler_errors_come_back_as_clear_errors_and_the_connection_survives(server: ControlServer) -> None:
    client = connect(server.path)
    assert client is not None
    with client:
        with pytest.raises(ControlError, match="no session 'nope'"):
            client.bind(Bind(chat_id="t", user_id="u", session_id="nope"))
        with pytest.raises(ControlError, match="failed on Status: boom"):
            client.status()
        assert client.chat(Chat(chat_id="t", user_id="u", text="still", message_id="m")).text == "echo: still"


def test_session_admin_requests_round_trip_and_refusals_come_back(server: ControlServer) -> None:
    client = connect(server.path)
    assert client is not None
    with client:
        rename = SessionAdmin(action=SessionAction.RENAME, session_id="s1", title="new")
        assert client.admin(rename) == SessionAdminReply(session_id="s1", title="new")
        with pytest.raises(ControlError, match="no session 's2' to delete"):
            client.admin(SessionAdmin(action=SessionAction.DELETE, session_id="s2"))


def test_a_malformed_frame_gets_an_error_reply_and_an_oversized_one_closes_the_connection(
    server: ControlServer,
) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
        raw.settimeout(5)
        raw.connect(str(server.path))
        body = b"\x93not msgpack of a request"
        raw.sendall(struct.pack(">I", len(body)) + body)
        (size,) = struct.unpack(">I", raw.recv(4))
        reply = msgspec.msgpack.decode(raw.recv(size))
        assert reply["type"] == "ErrorReply"
        assert "same version" in reply["message"]
        raw.sendall(struct.pack(">I", 1 << 30))
        assert raw.recv(4) == b""  # refused: closed, no allocation of a gigabyte
    client = connect(server.path)
    assert client is not None
    with client:
        assert client.chat(Chat(chat_id="t", user_id="u", text="ok", message_id="m")).text == "echo: ok"


def test_the_socket_is_private_and_removed_on_stop(tmp_path: Path) -> None:
    control = ControlServer(tmp_path / "p.sock", _handler)
    control.start()
    assert control.path.stat().st_mode & 0o777 == 0o600
    control.stop()
    assert not control.path.exists()
    assert connect(control.path) is None


def test_a_path_too_long_for_a_unix_socket_is_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ControlError, match=r"daemon\.socket"):
        check_socket_path(tmp_path / ("x" * 120))
