"""An incremental parser for ``text/event-stream`` (Server-Sent Events), as the WHATWG HTML standard defines it.

signal-cli writes each received envelope as one event (``event:receive`` and one ``data:`` line, an ``id:`` line in
versions that buffer events for ``Last-Event-ID``) and a ``:`` comment line as a keep-alive. The parser takes
bytes as they come off the socket, in pieces of any size, and yields whole events: lines end in CRLF, LF or CR
(a CRLF split between two pieces is one line end), ``data`` lines are joined with LF, a leading space after the
colon is dropped, comments and unknown fields are ignored, an ``id`` containing NUL is ignored, and the id is
kept from event to event. Bytes that are not UTF-8 decode to U+FFFD, as the standard says.

An event larger than ``max_event_bytes`` is not buffered: the parser drops it as it arrives and yields
:class:`Oversized` where it ended, so a hostile or broken daemon cannot exhaust memory and the stream goes on.
"""

from __future__ import annotations

import re

import msgspec

__all__ = ["Oversized", "SseEvent", "SseParser"]

_EOL = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"


class SseEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One dispatched event: its type (``message`` unless an ``event`` field said otherwise), data and last id."""

    event: str = "message"
    data: str
    id: str | None = None


class Oversized(msgspec.Struct, frozen=True, kw_only=True):
    """An event that was dropped for being larger than the limit; ``size`` is how many bytes it had reached."""

    size: int


class SseParser:
    """Turns a byte stream into :class:`SseEvent` and :class:`Oversized` items; one parser per connection."""

    def __init__(self, max_event_bytes: int = 1024 * 1024, *, last_id: str | None = None) -> None:
        self._limit = max_event_bytes
        self._buffer = bytearray()
        self._data: list[str] = []
        self._event = ""
        self._size = 0  # bytes of the event so far (its complete lines)
        self.last_id = last_id
        self._started = False  # the BOM check is done
        self._skip_lf = False  # the previous piece ended in CR: an LF first in this one ends no line
        self._dropping_line = False  # inside an overlong line: drop bytes up to its end
        self._dropping_event = False  # inside an oversized event: drop lines up to the blank one

    def feed(self, chunk: bytes) -> list[SseEvent | Oversized]:
        """Parse ``chunk``; return the events it completed."""
        out: list[SseEvent | Oversized] = []
        if self._skip_lf and chunk[:1] == b"\n":
            chunk = chunk[1:]
        if chunk:
            self._skip_lf = False
        self._buffer += chunk
        if not self._started:
            if len(self._buffer) < len(_BOM) and _BOM.startswith(bytes(self._buffer)):
                return out  # could still be a BOM
            if self._buffer.startswith(_BOM):
                del self._buffer[: len(_BOM)]
            self._started = True
        position = 0
        while True:
            end = _EOL.search(self._buffer, position)
            if end is None:
                break
            if end.group() == b"\r" and end.end() == len(self._buffer):
                self._skip_lf = True  # an LF may open the next piece
            line = bytes(self._buffer[position : end.start()])
            position = end.end()
            if self._dropping_line:
                self._dropping_line = False
                continue
            self._line(line, out)
        del self._buffer[:position]
        if len(self._buffer) + self._size > self._limit:
            self._size += len(self._buffer)
            self._buffer.clear()
            self._data.clear()
            self._dropping_line = True
            self._dropping_event = True
        return out

    def _line(self, line: bytes, out: list[SseEvent | Oversized]) -> None:
        if not line:
            self._dispatch(out)
            return
        if self._dropping_event:
            self._size += len(line)
            return
        self._size += len(line) + 1
        if self._size > self._limit:
            self._dropping_event = True
            self._data.clear()
            return
        if line.startswith(b":"):
            return  # a comment: signal-cli's keep-alive
        name, colon, value = line.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        field = name.decode("utf-8", "replace")
        text = value.decode("utf-8", "replace")
        if field == "data":
            self._data.append(text)
        elif field == "event":
            self._event = text
        elif field == "id" and "\0" not in text:
            self.last_id = text

    def _dispatch(self, out: list[SseEvent | Oversized]) -> None:
        if self._dropping_event:
            out.append(Oversized(size=self._size))
        elif self._data:
            out.append(SseEvent(event=self._event or "message", data="\n".join(self._data), id=self.last_id))
        self._data = []
        self._event = ""
        self._size = 0
        self._dropping_event = False
