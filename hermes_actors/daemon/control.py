"""The daemon's control socket: ``$HERMES_HOME/hermesd.sock``, a Unix socket only its owner can open (mode 0600).

Frames are a 4-byte big-endian length and a msgpack-encoded msgspec Struct; requests and replies are tagged
unions, so a client and a daemon of different versions fail with a clear "unknown request" instead of garbage.
One connection carries any number of request/reply pairs in order (``hermesctl chat`` keeps one open). A
:class:`Chat` with ``stream`` set is answered by :class:`ChatText` and :class:`ChatTool` frames as the turn runs,
then its :class:`ChatReply`; a client stops the turn with a ``/stop`` :class:`Chat` on a second connection. A daemon
that predates ``stream`` ignores it and sends the reply alone, so a newer client works with it unchanged.

The server is a thread per connection: the clients are a handful of terminals and admin commands, and a blocking
chat request may wait minutes for its turn.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import struct
import threading
from collections.abc import Callable
from pathlib import Path

import msgspec

from hermes_actors.daemon.control_messages import (
    Bind,
    BindReply,
    Chat,
    ChatEvent,
    ChatReply,
    ChatText,
    ChatTool,
    Emit,
    ErrorReply,
    JobsAction,
    JobsReply,
    JobsRequest,
    PlatformState,
    Reply,
    Request,
    SessionAction,
    SessionAdmin,
    SessionAdminReply,
    Status,
    StatusReply,
)
from hermes_actors.errors import HermesError
from hermes_actors.ports import PlatformStatus

__all__ = [
    "Bind",
    "BindReply",
    "Chat",
    "ChatEvent",
    "ChatReply",
    "ChatText",
    "ChatTool",
    "ControlClient",
    "ControlError",
    "ControlLostError",
    "ControlServer",
    "Emit",
    "ErrorReply",
    "JobsAction",
    "JobsReply",
    "JobsRequest",
    "PlatformState",
    "PlatformStatus",
    "Reply",
    "Request",
    "SessionAction",
    "SessionAdmin",
    "SessionAdminReply",
    "Status",
    "StatusReply",
    "connect",
]

_log = logging.getLogger(__name__)

MAX_FRAME = 16 * 1024 * 1024
_HEADER = struct.Struct(">I")
# A sockaddr_un path holds 108 bytes with its terminating NUL on Linux.
MAX_SOCKET_PATH = 107
ADMIN_TIMEOUT_S = 120.0  # how long the daemon waits for a session's actor to apply a change (after a running turn)


class ControlError(HermesError):
    """The control socket failed: no daemon, a broken frame, or the daemon answered an error."""


class ControlLostError(ControlError):
    """The control connection broke or the daemon closed it (it stopped): nothing more will come on it."""


_encoder = msgspec.msgpack.Encoder()
_requests = msgspec.msgpack.Decoder(Request)
_replies = msgspec.msgpack.Decoder(Reply)


def _send(sock: socket.socket, message: msgspec.Struct) -> None:
    body = _encoder.encode(message)
    sock.sendall(_HEADER.pack(len(body)) + body)


def _receive_exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        chunk = sock.recv(min(remaining, 1 << 20))
        if not chunk:
            if remaining == size:
                return None  # clean end between frames
            raise ControlError("the control connection closed in the middle of a frame")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _receive(sock: socket.socket) -> bytes | None:
    header = _receive_exactly(sock, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > MAX_FRAME:
        raise ControlError(f"control frame of {size} bytes is over the {MAX_FRAME}-byte limit")
    body = _receive_exactly(sock, size)
    if body is None:
        raise ControlError("the control connection closed after a frame header")
    return body


def check_socket_path(path: Path) -> None:
    """Raise :class:`ControlError` if ``path`` is too long for a Unix socket, naming the fix."""
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise ControlError(
            f"control socket path {path} is longer than {MAX_SOCKET_PATH} bytes; "
            "set daemon.socket in config.yaml to a shorter absolute path"
        )


class _Events:
    """A connection's :data:`Emit`: frames ahead of the reply; once the client is gone the rest are dropped (the
    turn goes on, and its reply, which cannot be sent either, ends the connection)."""

    __slots__ = ("_broken", "_connection")

    def __init__(self, connection: socket.socket) -> None:
        self._connection = connection
        self._broken = False

    def __call__(self, event: ChatEvent) -> None:
        if self._broken:
            return
        try:
            _send(self._connection, event)
        except OSError:
            self._broken = True


class ControlServer:
    """Serves control requests on a Unix socket with ``handler``; one thread per connection. ``handler`` gets the
    request and an :data:`Emit` that sends a frame ahead of the reply (a streamed chat's events)."""

    def __init__(self, path: Path, handler: Callable[[Request, Emit], msgspec.Struct]) -> None:
        check_socket_path(path)
        self.path = path
        self._handler = handler
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._closing = threading.Event()
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()

    def start(self) -> None:
        """Bind the socket with mode 0600 (replacing a stale one) and start accepting."""
        if self.path.exists() or self.path.is_symlink():
            self.path.unlink()  # the caller holds the pid lock: no live daemon owns this socket
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)  # the socket is created 0600: no window where others could connect
        try:
            listener.bind(os.fspath(self.path))
        finally:
            os.umask(old_umask)
        os.chmod(self.path, 0o600)
        listener.listen(16)
        self._listener = listener
        self._thread = threading.Thread(target=self._accept_loop, name="hermes-control", daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._closing.is_set():
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return  # closed by stop()
            with self._lock:
                self._connections.add(connection)
            threading.Thread(target=self._serve, args=(connection,), name="hermes-control-conn", daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        try:
            while not self._closing.is_set():
                try:
                    body = _receive(connection)
                except (ControlError, OSError) as exc:
                    _log.warning("control connection dropped: %s", exc)
                    return
                if body is None:
                    return
                try:
                    request = _requests.decode(body)
                except msgspec.DecodeError as exc:
                    reply: msgspec.Struct = ErrorReply(
                        message=f"unknown or malformed control request ({exc}); are hermesctl and hermesd the same"
                        " version?"
                    )
                else:
                    try:
                        reply = self._handler(request, _Events(connection))
                    except HermesError as exc:
                        reply = ErrorReply(message=str(exc))
                    except Exception as exc:
                        _log.exception("control request %s failed", type(request).__name__)
                        reply = ErrorReply(message=f"the daemon failed on {type(request).__name__}: {exc}")
                try:
                    _send(connection, reply)
                except OSError:
                    return
        finally:
            with self._lock:
                self._connections.discard(connection)
            connection.close()

    def stop(self) -> None:
        """Stop accepting, close open connections and remove the socket file."""
        self._closing.set()
        if self._listener is not None:
            with contextlib.suppress(OSError):  # wakes the thread blocked in accept(); close() alone does not
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
        with self._lock:
            for connection in list(self._connections):
                with contextlib.suppress(OSError):  # already closed by the peer
                    connection.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(5)
        self.path.unlink(missing_ok=True)


class ControlClient:
    """A connection to a running daemon; use :func:`connect`."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def request(self, message: Request, *, timeout: float | None = 30.0) -> Reply:
        """Send ``message`` and return the reply; an :class:`ErrorReply` becomes :class:`ControlError`."""
        self._sock.settimeout(timeout)
        try:
            _send(self._sock, message)
            body = _receive(self._sock)
        except TimeoutError:
            raise ControlError(f"the daemon did not answer {type(message).__name__} within {timeout} s") from None
        except OSError as exc:
            raise ControlLostError(f"the control connection failed: {exc}") from None
        if body is None:
            raise ControlLostError("the daemon closed the control connection (is it stopping?)")
        return self._decoded(body)

    @staticmethod
    def _decoded(body: bytes) -> Reply:
        try:
            reply = _replies.decode(body)
        except msgspec.DecodeError as exc:
            raise ControlError(
                f"malformed reply from the daemon ({exc}); are hermesctl and hermesd the same version?"
            ) from None
        if isinstance(reply, ErrorReply):
            raise ControlError(reply.message)
        return reply

    def status(self) -> StatusReply:
        """The daemon's state."""
        reply = self.request(Status())
        if not isinstance(reply, StatusReply):
            raise ControlError(f"expected a status reply, got {type(reply).__name__}")
        return reply

    def chat(self, message: Chat, on_event: Emit | None = None) -> ChatReply:
        """Run one terminal turn and return its reply; a streamed one (``message.stream``) hands each event to
        ``on_event`` as it comes."""
        reply = self.request(message, timeout=message.timeout_s + 5)
        while isinstance(reply, ChatText | ChatTool):
            if on_event is not None:
                on_event(reply)
            reply = self._next(message.timeout_s + 5)
        if not isinstance(reply, ChatReply):
            raise ControlError(f"expected a chat reply, got {type(reply).__name__}")
        return reply

    def _next(self, timeout: float) -> Reply:
        """The next frame of a reply in progress (a streamed chat's)."""
        try:
            self._sock.settimeout(timeout)
            body = _receive(self._sock)
        except TimeoutError:
            raise ControlError(f"the daemon sent nothing more of the turn within {timeout} s") from None
        except OSError as exc:
            raise ControlLostError(f"the control connection failed: {exc}") from None
        if body is None:
            raise ControlLostError("the daemon closed the control connection (is it stopping?)")
        return self._decoded(body)

    def bind(self, message: Bind) -> BindReply:
        """Point a terminal chat at a session."""
        reply = self.request(message)
        if not isinstance(reply, BindReply):
            raise ControlError(f"expected a bind reply, got {type(reply).__name__}")
        return reply

    def admin(self, message: SessionAdmin, *, timeout: float = ADMIN_TIMEOUT_S + 10) -> SessionAdminReply:
        """Rename, end or delete a session through the daemon."""
        reply = self.request(message, timeout=timeout)
        if not isinstance(reply, SessionAdminReply):
            raise ControlError(f"expected a session admin reply, got {type(reply).__name__}")
        return reply

    def jobs(self, message: JobsRequest) -> JobsReply:
        """Read or change the scheduled jobs through the daemon."""
        reply = self.request(message)
        if not isinstance(reply, JobsReply):
            raise ControlError(f"expected a jobs reply, got {type(reply).__name__}")
        return reply

    def close(self) -> None:
        """Close the connection."""
        self._sock.close()

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def connect(path: Path, *, timeout: float = 5.0) -> ControlClient | None:
    """Connect to the daemon at ``path``; ``None`` when no daemon listens there."""
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(os.fspath(path))
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        return None
    except OSError as exc:
        sock.close()
        raise ControlError(f"cannot connect to the daemon at {path}: {exc}") from None
    return ControlClient(sock)
