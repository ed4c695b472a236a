"""Hostile text made safe for the console's pages: the template filters.

Everything a user or a model wrote (messages, titles, names, snippets) is escaped. On top of that,
:func:`neutral` shows the bidirectional controls U+202A–U+202E and U+2066–U+2069 as visible ``[U+202E]`` marks
instead of letting them reorder the page, :func:`rich` makes only ``http``/``https`` URLs into links (with
``rel="noopener noreferrer nofollow"``; a ``javascript:`` or ``data:`` URL stays text), and :func:`marked` escapes a
search snippet before turning its ``>>>``/``<<<`` match markers into ``<mark>``. Each returns
:class:`markupsafe.Markup`, so Jinja's autoescape does not escape it twice.
"""

from __future__ import annotations

import datetime as dt
import json
import re

from markupsafe import Markup, escape

__all__ = ["ago", "marked", "neutral", "pretty_json", "rich", "size", "stamp"]

_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")
_URL = re.compile(r"https?://[^\s<>\"'`\u202a-\u202e\u2066-\u2069]+", re.IGNORECASE)
_TRAILING = ".,;:!?)]}'\""
_MARKERS = re.compile(r"(>>>|<<<)")


def neutral(text: str | None) -> str:
    """``text`` with each bidirectional control replaced by its visible name (``[U+202E]``)."""
    if not text:
        return ""
    return _BIDI.sub(lambda match: f"[U+{ord(match.group()):04X}]", text)


def rich(text: str | None) -> Markup:
    """Escaped ``text`` with bidi controls shown and http(s) URLs as links; nothing else becomes markup."""
    source = neutral(text)
    out: list[str] = []
    last = 0
    for match in _URL.finditer(source):
        url = match.group().rstrip(_TRAILING)
        end = match.start() + len(url)
        out.append(str(escape(source[last : match.start()])))
        href = escape(url)
        out.append(f'<a href="{href}" rel="noopener noreferrer nofollow" target="_blank">{href}</a>')
        last = end
    out.append(str(escape(source[last:])))
    return Markup("".join(out))


def marked(snippet: str | None) -> Markup:
    """A search snippet escaped, with its ``>>>``…``<<<`` matches as ``<mark>`` (balanced whatever the text)."""
    out: list[str] = []
    open_mark = False
    for part in _MARKERS.split(neutral(snippet)):
        if part == ">>>" and not open_mark:
            out.append("<mark>")
            open_mark = True
        elif part == "<<<" and open_mark:
            out.append("</mark>")
            open_mark = False
        else:
            out.append(str(escape(part)))
    if open_mark:
        out.append("</mark>")
    return Markup("".join(out))


def ago(when: float | None, now: float) -> str:
    """``when`` relative to ``now``: ``just now``, ``5 min ago``, ``3 h ago``, ``2 d ago`` (a date past 60 days)."""
    if when is None:
        return "never"
    seconds = max(0.0, now - when)
    if seconds < 10:
        return "just now"
    for unit, span in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= span:
            if unit == "d" and seconds >= 60 * 86400:
                return stamp(when)[:10]
            return f"{int(seconds // span)} {unit} ago"
    return f"{int(seconds)} s ago"


def stamp(when: float | None) -> str:
    """``when`` as ``YYYY-MM-DD HH:MM:SS`` UTC (empty for none)."""
    if when is None:
        return ""
    return dt.datetime.fromtimestamp(when, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def size(count: int | None) -> str:
    """A byte count for people: ``512 B``, ``3.4 KiB``, ``1.2 MiB``."""
    if count is None:
        return "size unknown"
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{count} B"  # pragma: no cover - the loop always returns


def pretty_json(text: str | None) -> str:
    """JSON text indented for reading (the text as it is when it is not JSON; a JSON string holding JSON is read
    through); the template escapes it."""
    if not text:
        return ""
    try:
        value = json.loads(text)
        if isinstance(value, str) and value.strip()[:1] in ("{", "["):
            value = json.loads(value)  # arguments some agents encode twice: a JSON string holding JSON
    except ValueError:
        return text
    return json.dumps(value, indent=2, ensure_ascii=False)
