"""A platform's own state kept as its poll cursor: a Struct stored as JSON text with the inbox rows it covers.

Matrix keeps ``since`` and what it knows of each room, WeChat its upstream buffer and the messages waiting to be
batched. The text comes back at start; text that is not such a state (an older format, a hand edit) is handed to
the platform's own fallback instead of failing the start.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import msgspec

__all__ = ["CursorState"]

S = TypeVar("S", bound=msgspec.Struct)


class CursorState(Generic[S]):
    """Encodes and decodes the state Struct ``kind`` as cursor text."""

    def __init__(self, kind: type[S]) -> None:
        self._decoder = msgspec.json.Decoder(kind)

    def encode(self, state: S) -> str:
        """The cursor text for ``state``."""
        return msgspec.json.encode(state).decode()

    def decode(self, text: str | None, *, fresh: Callable[[], S], invalid: Callable[[str], S]) -> S:
        """The state stored as ``text``: ``fresh()`` when nothing is stored, ``invalid(text)`` when it does not
        decode (the caller logs what it does instead)."""
        if not text:
            return fresh()
        try:
            return self._decoder.decode(text)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return invalid(text)
