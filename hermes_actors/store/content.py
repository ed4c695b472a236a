"""Message content from the reference system: its structured-content encoding, and text that is not UTF-8.

The reference system stores a content value that is not a plain string (multimodal parts: text, images, audio,
tool envelopes) as ``"\\x00json:"`` followed by JSON. Kept as it is, that value would hide its text from our
trigram index: SQLite's ``LIKE`` and ``GLOB`` stop at the first NUL, and the value starts with one. So the
importer stores such a value as its *text rendering* followed by the value itself, byte for byte::

    "look at this\\n[image_url]" + "\\x00json:[{\\"type\\": \\"text\\", ...}]"

The rendering holds no NUL, so the first NUL of the stored content is where the original value starts.
:func:`split_content` takes the two apart again and checks the rendering against the value, so plain content
that merely contains ``"\\x00json:"`` somewhere is left alone. Plain values are stored unchanged, NULs included.

Text columns are read as bytes and decoded here. Python's sqlite3 (which the reference system uses) cannot
write a lone surrogate, but other writers can leave bytes that are not UTF-8 (a CESU-8 surrogate, say), which
APSW refuses to decode. :func:`decode_text` joins CESU-8 surrogate pairs into the character they encode and
replaces what is still undecodable with U+FFFD, telling the caller so it can keep the original bytes.
"""

from __future__ import annotations

import codecs
import json
from typing import Any

__all__ = [
    "HERMES_JSON_PREFIX",
    "decode_text",
    "hermes_content",
    "render_parts",
    "split_content",
    "store_content",
]

HERMES_JSON_PREFIX = "\x00json:"

# Keys whose string value is a part's text: "text" in chat parts, "output" in tool-result envelopes.
_TEXT_KEYS = ("text", "output")
_LENIENT = "hermes-actors-import"


def _surrogate_or_replace(error: UnicodeError) -> tuple[str, int]:
    """Decode a CESU-8 surrogate (ED A0-BF 80-BF) as the surrogate it encodes; replace any other bad byte."""
    if not isinstance(error, UnicodeDecodeError):
        raise error
    head = error.object[error.start : error.start + 3]
    if len(head) == 3 and head[0] == 0xED and 0xA0 <= head[1] <= 0xBF and 0x80 <= head[2] <= 0xBF:
        return chr(0xD000 | (head[1] & 0x3F) << 6 | head[2] & 0x3F), error.start + 3
    return "\ufffd", error.end


codecs.register_error(_LENIENT, _surrogate_or_replace)


def decode_text(raw: bytes | str | float | None) -> tuple[str | None, bool]:
    """Return ``raw`` as text and whether it had to be repaired (it was not valid UTF-8).

    A repaired value keeps every decodable character; CESU-8 surrogate pairs become the character they encode,
    and each undecodable byte sequence or lone surrogate becomes U+FFFD.
    """
    if raw is None or isinstance(raw, str):
        return raw, False
    if isinstance(raw, int | float):
        return str(raw), False
    try:
        return raw.decode("utf-8"), False
    except UnicodeDecodeError:
        return _without_lone_surrogates(raw.decode("utf-8", _LENIENT)), True


def _without_lone_surrogates(text: str) -> str:
    """Join surrogate pairs into characters and replace lone surrogates with U+FFFD (SQLite cannot store them)."""
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _part_text(part: Any) -> str:
    if isinstance(part, str):
        return part
    if isinstance(part, dict):
        for key in _TEXT_KEYS:
            value = part.get(key)
            if isinstance(value, str):
                return value
        kind = part.get("type")
        if isinstance(kind, str):
            return f"[{kind}]"
    return ""


def render_parts(payload: str) -> str | None:
    """Return the text of a structured value's JSON ``payload`` (what follows the prefix), or ``None``.

    Text parts give their text, tool envelopes their ``output``, other parts ``[their type]``; the pieces are
    joined by newlines. NULs become spaces and lone surrogates U+FFFD, so the result can be stored and searched.
    ``None`` means the payload is not JSON.
    """
    try:
        value = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    parts = value if isinstance(value, list) else [value]
    text = "\n".join(piece for piece in (_part_text(part) for part in parts) if piece)
    return _without_lone_surrogates(text.replace("\x00", " "))


def store_content(value: str | None) -> str | None:
    """Return what our ``content`` column holds for the reference system's content ``value``."""
    if value is None or not value.startswith(HERMES_JSON_PREFIX):
        return value
    return (render_parts(value[len(HERMES_JSON_PREFIX) :]) or "") + value


def split_content(content: str) -> tuple[str, str | None]:
    """Split stored content into its text and the reference system's structured value (``None`` for plain text).

    The inverse of :func:`store_content`: for every value ``v`` it was given,
    ``hermes_content(store_content(v)) == v``, except for a plain value built to look exactly like a rendering
    followed by a structured value, which the importer reports.
    """
    at = content.find(HERMES_JSON_PREFIX)
    if at < 0:
        return content, None
    value = content[at:]
    if at == 0:
        return render_parts(value[len(HERMES_JSON_PREFIX) :]) or "", value
    text = content[:at]
    if "\x00" not in text and render_parts(value[len(HERMES_JSON_PREFIX) :]) == text:
        return text, value
    return content, None


def hermes_content(content: str | None) -> str | None:
    """Return the content value the reference system stored for our stored ``content``."""
    if content is None:
        return None
    text, value = split_content(content)
    return text if value is None else value
