"""Decode JSON that strangers send without recursing on their say-so: one guarded path for every HTTP body.

msgspec (like the standard library) recurses once per nested array or object and gives up with a
``RecursionError`` somewhere near the interpreter's limit, which depends on how deep the stack already is; so
a body nested a thousand levels deep could be a clean 400 on one endpoint and a 500 on another. :func:`decode`
measures the nesting first and refuses anything deeper than :data:`MAX_DEPTH` with :class:`NestingError`, a
:class:`msgspec.DecodeError`, so every caller's existing "not valid JSON" answer covers it, and nothing past the
check recurses deeper than that either. The measurement costs nothing for ordinary bodies (they hold fewer
brackets than the limit); other bodies are scanned once, outside their strings.
"""

from __future__ import annotations

import array
import itertools
from typing import TypeVar

import msgspec

__all__ = ["MAX_DEPTH", "NestingError", "check_depth", "decode"]

MAX_DEPTH = 64  # arrays and objects inside each other; platform payloads nest about ten deep

T = TypeVar("T")

_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
# An opening bracket becomes 1 and a closing one 255, which a signed byte array reads as -1.
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


class NestingError(msgspec.DecodeError):
    """JSON nested deeper than the decoder allows (a :class:`msgspec.DecodeError`, so it is malformed input)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"JSON nested deeper than {limit} levels, the maximum recursion depth allowed")
        self.limit = limit


def check_depth(data: bytes | str, limit: int = MAX_DEPTH) -> None:
    """Raise :class:`NestingError` if the arrays and objects of ``data`` nest deeper than ``limit``.

    Brackets inside strings do not count. Text that is not JSON may be refused here or left to the decoder.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return
    if b"\\" in raw:  # drop escaped backslashes, then escaped quotes: every quote left opens or closes a string
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    outside_strings = b"".join(raw.split(b'"')[::2])
    steps = array.array("b", outside_strings.translate(_STEPS, _NOT_BRACKETS))
    if next(filter(limit.__lt__, itertools.accumulate(steps)), None) is not None:
        raise NestingError(limit)


def decode(decoder: msgspec.json.Decoder[T], data: bytes | str, *, limit: int = MAX_DEPTH) -> T:
    """``decoder.decode(data)`` once its nesting is known to be within ``limit``.

    Raises what the decoder raises (:class:`msgspec.ValidationError` for the wrong shape,
    :class:`msgspec.DecodeError` for malformed JSON) and :class:`NestingError` for JSON nested too deep, never a
    ``RecursionError``.
    """
    check_depth(data, limit)
    try:
        return decoder.decode(data)
    except RecursionError:  # the stack was deep already when the decode began
        raise NestingError(limit) from None
