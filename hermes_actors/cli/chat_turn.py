"""What ``hermesctl chat`` shows and hears while a turn runs in a terminal.

:class:`TurnView` writes the reply as it streams and keeps tool progress on one status line (``⚙ search …``,
rewritten in place, cleared when text goes on). :func:`stoppable` lets the user stop the turn: Ctrl-C sends
``/stop`` for it (a second Ctrl-C leaves the chat, as Ctrl-C at the prompt always does), and so does a ``/stop``
line typed while the turn runs; any other line typed meanwhile is kept for after the turn.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TextIO

from hermes_actors.daemon.control import ChatEvent, ChatReply, ChatText, ChatTool

__all__ = ["STOP", "TurnView", "TypedAhead", "stoppable"]

STOP = "/stop"
_CLEAR_LINE = "\r\x1b[K"


class TurnView:
    """Shows one streamed turn on ``out`` (a terminal): :meth:`show` each event, then :meth:`finish` with the
    reply."""

    def __init__(self, out: TextIO | None = None) -> None:
        self._out = out or sys.stdout
        self._streamed: list[str] = []
        self._status = False  # a tool status line is showing
        self._column = False  # text was written on the current line
        self._lock = threading.Lock()  # stopping() comes from the thread that stops the turn

    def show(self, event: ChatEvent) -> None:
        """Write a piece of text, or put a tool call's progress on the status line."""
        with self._lock:
            self._show(event)

    def _show(self, event: ChatEvent) -> None:
        if isinstance(event, ChatText):
            self._clear_status()
            self._out.write(event.delta)
            self._streamed.append(event.delta)
            self._column = not event.delta.endswith("\n")
        elif isinstance(event, ChatTool):
            if self._column:
                self._out.write("\n")
                self._column = False
            mark = "…" if event.status == "running" else "✓"
            self._out.write(f"{_CLEAR_LINE}⚙ {event.name} {mark}")
            self._status = True
        self._out.flush()

    def stopping(self) -> None:
        """Say the turn is being stopped (after Ctrl-C or ``/stop``)."""
        with self._lock:
            self._stopping()

    def _stopping(self) -> None:
        self._clear_status()
        self._out.write(("\n" if self._column else "") + "⏹ stopping the turn…\n")
        self._column = False
        self._out.flush()

    def finish(self, reply: ChatReply) -> None:
        """End the turn's output with ``reply``: what the stream did not show of it, or all of it."""
        with self._lock:
            self._finish(reply)

    def _finish(self, reply: ChatReply) -> None:
        self._clear_status()
        streamed = "".join(self._streamed)
        if reply.stopped:
            self._out.write(
                ("\n" if self._column else "") + "⏹ turn stopped (your message is kept, without an answer)\n"
            )
        elif streamed and reply.text.startswith(streamed):
            self._out.write(reply.text[len(streamed) :] + "\n")
        else:
            self._out.write(("\n" if self._column else "") + reply.text + "\n")
        self._out.flush()

    def _clear_status(self) -> None:
        if self._status:
            self._out.write(_CLEAR_LINE)
            self._status = False


class TypedAhead:
    """Lines typed at the terminal while a turn runs (the terminal is in line mode then): ``/stop`` calls
    ``on_stop``, any other line is kept (:attr:`lines`) and an end of input is noted (:attr:`ended`)."""

    def __init__(self, fd: int, on_stop: Callable[[], None]) -> None:
        self.lines: list[str] = []
        self.ended = False
        self._fd = fd
        self._on_stop = on_stop
        self._wake_read, self._wake_write = os.pipe()
        self._thread = threading.Thread(target=self._read, name="hermes-chat-typed", daemon=True)

    def __enter__(self) -> TypedAhead:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        os.write(self._wake_write, b"x")
        self._thread.join(5)
        os.close(self._wake_read)
        os.close(self._wake_write)

    def _read(self) -> None:
        while True:
            ready, _, _ = select.select([self._fd, self._wake_read], [], [])
            if self._wake_read in ready:
                return
            data = os.read(self._fd, 4096)
            if not data:
                self.ended = True
                return
            for line in data.decode(errors="replace").splitlines():
                if line.strip() == STOP:
                    self._on_stop()
                elif line.strip():
                    self.lines.append(line)


@contextlib.contextmanager
def stoppable(stop: Callable[[], None], *, stdin_fd: int | None) -> Iterator[TypedAhead | None]:
    """While the block runs a turn: the first Ctrl-C (and a ``/stop`` line typed on ``stdin_fd``, when given) calls
    ``stop`` once, on its own thread; a second Ctrl-C raises :class:`KeyboardInterrupt` as usual. Yields what was
    typed meanwhile (``None`` without ``stdin_fd``)."""
    once = threading.Lock()

    def stop_once() -> None:
        if once.acquire(blocking=False):
            threading.Thread(target=stop, name="hermes-chat-stop", daemon=True).start()

    def interrupted(signum: int, frame: FrameType | None) -> None:
        if once.locked():
            raise KeyboardInterrupt
        stop_once()

    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, interrupted) if main else None
    try:
        if stdin_fd is None:
            yield None
        else:
            with TypedAhead(stdin_fd, stop_once) as typed:
                yield typed
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)
