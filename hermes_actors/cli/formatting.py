"""Text for the terminal: relative times, timestamps, sizes, aligned tables and safe one-line excerpts.

Everything printed here may come from a stranger on a chat platform, so text is stripped of control characters
(an escape sequence in a title must not repaint the user's terminal) and measured in display columns, where a
CJK character takes two.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from datetime import datetime, tzinfo

__all__ = [
    "ELLIPSIS",
    "display_width",
    "format_bytes",
    "format_timestamp",
    "one_line",
    "plural",
    "relative_time",
    "render_table",
    "terminal_safe",
    "truncate",
]

ELLIPSIS = "…"

_MINUTE = 60.0
_HOUR = 3_600.0
_DAY = 86_400.0
# C0 and C1 controls, DEL, and the bidi overrides that can reorder what follows them on screen.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def relative_time(timestamp: float, *, now: float, tz: tzinfo | None = None) -> str:
    """Return how long before ``now`` ``timestamp`` was, as Hermes lists it.

    ``just now`` under a minute (and for times slightly ahead of ``now``), ``5m ago``, ``3h ago``, ``yesterday``
    under 48 hours, ``4d ago`` under a week, then the date (``2026-11-02``) in ``tz`` (default: local time).
    """
    elapsed = now - timestamp
    if abs(elapsed) < _MINUTE:
        return "just now"
    if elapsed < 0 or elapsed >= 7 * _DAY:
        return datetime.fromtimestamp(timestamp, tz).strftime("%Y-%m-%d")
    if elapsed < _HOUR:
        return f"{int(elapsed // _MINUTE)}m ago"
    if elapsed < _DAY:
        return f"{int(elapsed // _HOUR)}h ago"
    if elapsed < 2 * _DAY:
        return "yesterday"
    return f"{int(elapsed // _DAY)}d ago"


def format_timestamp(timestamp: float, *, tz: tzinfo | None = None) -> str:
    """Return ``timestamp`` as ``2026-11-02 14:03:05`` in ``tz`` (default: local time)."""
    return datetime.fromtimestamp(timestamp, tz).strftime("%Y-%m-%d %H:%M:%S")


def format_bytes(size: int) -> str:
    """Return a byte count for people: ``512 B``, ``4.0 KB``, ``1.2 MB``, ``3.4 GB`` (powers of 1000)."""
    if size < 1000:
        return f"{size} B"
    value = size / 1000
    for unit in ("KB", "MB"):
        if value < 1000:
            return f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"


def plural(count: int, noun: str) -> str:
    """Return ``1 session`` or ``3 sessions`` (regular English plurals only)."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def terminal_safe(text: str) -> str:
    """Return ``text`` with control characters (newlines and tabs excepted) and bidi overrides removed."""
    return _UNSAFE.sub("", text)


def one_line(text: str) -> str:
    """Return ``text`` on one line: safe for the terminal, every run of white space collapsed to a space."""
    return " ".join(terminal_safe(text).split())


def _char_width(ch: str) -> int:
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def display_width(text: str) -> int:
    """Return how many terminal columns ``text`` takes (wide CJK characters count two, combining marks none)."""
    return sum(_char_width(ch) for ch in text)


def truncate(text: str, width: int) -> str:
    """Return ``text`` cut to at most ``width`` display columns, ending in ``…`` when something was cut."""
    if display_width(text) <= width:
        return text
    if width <= 0:
        return ""
    kept: list[str] = []
    used = 0
    for ch in text:
        w = _char_width(ch)
        if used + w > width - 1:
            break
        kept.append(ch)
        used += w
    return "".join(kept).rstrip() + ELLIPSIS


def _pad(text: str, width: int, *, right: bool) -> str:
    gap = " " * max(0, width - display_width(text))
    return gap + text if right else text + gap


def render_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, right_aligned: Sequence[int] = ()
) -> list[str]:
    """Return ``rows`` under ``headers`` as lines of columns two spaces apart, padded by display width.

    Columns whose index is in ``right_aligned`` are aligned right (counts); the last column is not padded.
    """
    widths = [display_width(h) for h in headers]
    for row in rows:
        widths = [max(w, display_width(cell)) for w, cell in zip(widths, row, strict=True)]
    lines: list[str] = []
    for row in (headers, *rows):
        cells = [_pad(cell, w, right=i in right_aligned) for i, (cell, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
    return lines
