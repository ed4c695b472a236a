"""Splitting a long reply into messages a platform accepts, at the most natural boundary that fits.

Limits are counted by the platform's own measure: Telegram counts UTF-16 code units (:func:`utf16_length`), most
others count characters. A split prefers a paragraph break, then a line break, then a sentence end, then a space,
and cuts hard only inside one overlong word; it never splits a surrogate pair and never yields an empty part.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["split_message", "utf16_length"]

_BOUNDARIES = ("\n\n", "\n", ". ", "。", "! ", "? ", " ")


def utf16_length(text: str) -> int:
    """Length in UTF-16 code units (characters outside the BMP count twice)."""
    return len(text) + sum(1 for c in text if ord(c) > 0xFFFF)


def _fit(text: str, limit: int, length: Callable[[str], int]) -> int:
    """The longest prefix length (in characters) of ``text`` whose measure is at most ``limit``."""
    if length is len:
        return min(len(text), limit)
    low, high = 0, min(len(text), limit)
    while low < high:  # the measure grows with the prefix: binary search
        middle = (low + high + 1) // 2
        if length(text[:middle]) <= limit:
            low = middle
        else:
            high = middle - 1
    return low


def split_message(text: str, limit: int, *, length: Callable[[str], int] = len) -> list[str]:
    """Split ``text`` into parts each at most ``limit`` by ``length``; whitespace at the cuts is dropped."""
    if limit < 2:
        raise ValueError("limit must be at least 2")
    parts: list[str] = []
    rest = text
    while length(rest) > limit:
        room = _fit(rest, limit, length)
        window = rest[:room]
        cut = -1
        for boundary in _BOUNDARIES:
            found = window.rfind(boundary)
            if found > room // 4:  # a boundary too early would leave a tiny part: look for a later kind
                cut = found + len(boundary)
                break
        if cut <= 0:
            cut = room
        head, rest = rest[:cut].rstrip(), rest[cut:].lstrip()
        if head:  # a window of only whitespace yields nothing
            parts.append(head)
    if rest.strip() or not parts:
        parts.append(rest)
    return parts
