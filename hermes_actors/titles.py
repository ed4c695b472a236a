"""Session titles: sanitising and lineage numbering.

A title is unique across all sessions, at most :data:`MAX_TITLE_LENGTH` characters after sanitising, which removes
control and format characters (so two titles cannot differ only by a zero-width or tag character) and collapses
white space. A compression child of "my project" is titled "my project #2", then "#3"; resolving a title prefers
the newest numbered variant along the lineage of the session holding it. ``#N`` is for lineages only: a title made
unique for any other reason (an automatic title another session holds) takes ``" (N)"`` (:func:`distinct_title`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from hermes_actors.errors import TitleError

__all__ = [
    "MAX_TITLE_LENGTH",
    "check_chosen_title",
    "distinct_title",
    "lineage_base",
    "lineage_number",
    "lineage_title",
    "next_lineage_title",
    "sanitize_title",
    "unnumbered_title",
]

MAX_TITLE_LENGTH = 100

# Zero-width and bidi-override characters: U+200B-U+200F, U+2028-U+202E, U+2060-U+2069, U+FEFF. Most are format
# characters (category Cf), which go anyway; the line and paragraph separators U+2028 and U+2029 are not.
_INVISIBLE = re.compile("[\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
_LINEAGE_SUFFIX = re.compile(r"^(?P<base>.*\S) #(?P<n>[1-9]\d{0,8})$")


def _visible(ch: str) -> str:
    """``ch`` itself, or what replaces it: nothing for a format character (category Cf: soft hyphens, bidi
    marks, tag characters, ...) or a control character, a space for a control character that is white space."""
    category = unicodedata.category(ch)
    if category == "Cf":
        return ""
    if category == "Cc":
        return " " if ch.isspace() else ""
    return ch


def sanitize_title(raw: str | None) -> str | None:
    """Return ``raw`` cleaned for use as a title, or ``None`` when nothing is left (which clears a title).

    Removes control characters, every format character (Unicode category Cf, which holds the zero-width and
    bidi-override ones), the line and paragraph separators, and collapses runs of white space. Raises
    :class:`TitleError` when the result is longer than :data:`MAX_TITLE_LENGTH` characters.
    """
    if raw is None:
        return None
    # A printable string (most titles) holds no control, format or separator character but the space: only the
    # white space is collapsed. Every character _INVISIBLE names is of one of those categories.
    visible = raw if raw.isprintable() else _INVISIBLE.sub("", "".join(_visible(ch) for ch in raw))
    title = " ".join(visible.split())
    if not title:
        return None
    if len(title) > MAX_TITLE_LENGTH:
        raise TitleError(f"title is {len(title)} characters long; the limit is {MAX_TITLE_LENGTH}, so shorten it")
    return title


def lineage_number(title: str) -> int:
    """Return N for ``"base #N"``, 1 for a title without a lineage suffix."""
    match = _LINEAGE_SUFFIX.match(title)
    return int(match["n"]) if match else 1


def lineage_base(title: str) -> str:
    """Return ``title`` without its ``" #N"`` lineage suffix."""
    match = _LINEAGE_SUFFIX.match(title)
    return match["base"] if match else title


def lineage_title(base: str, number: int) -> str:
    """Return the title of the ``number``-th session of the lineage of ``base`` (1 is ``base`` itself)."""
    return base if number <= 1 else f"{base} #{number}"


def next_lineage_title(title: str, taken: Iterable[str]) -> str:
    """Return the next free lineage title after ``title``, given the titles already ``taken`` in its lineage.

    The result is cut so it stays within :data:`MAX_TITLE_LENGTH`.
    """
    base = lineage_base(title)
    used = {lineage_number(t) for t in taken if lineage_base(t) == base}
    number = max(used | {lineage_number(title)}) + 1
    suffix = f" #{number}"
    return base[: MAX_TITLE_LENGTH - len(suffix)].rstrip() + suffix


def distinct_title(base: str, number: int) -> str:
    """Return ``"<base> (N)"``, the ``number``-th title made unique from ``base`` (1 is ``base`` itself): never
    read as lineage numbering, which ``" #N"`` is. The result is cut so it stays within :data:`MAX_TITLE_LENGTH`."""
    if number <= 1:
        return base
    suffix = f" ({number})"
    return base[: MAX_TITLE_LENGTH - len(suffix)].rstrip() + suffix


def check_chosen_title(title: str | None, *, own: Iterable[str | None] = ()) -> None:
    """Refuse a title a person chose (``/title``, ``/new <title>``, a rename) that ends in ``" #N"``: that suffix
    numbers the sessions of a compression lineage, and a title holding it would take the number from the
    lineage it names. ``own`` are the lineage titles of the session being titled, which it may keep or take back.

    ``title`` is sanitised already (``None`` clears a title and is always allowed). Raises :class:`TitleError`.
    """
    if title is None or lineage_number(title) == 1 or title in set(own):
        return
    base, number = lineage_base(title), lineage_number(title)
    raise TitleError(
        f"'{title}' ends in ' #{number}', which is kept for the sessions a compression continues a conversation "
        f"in ('{base}', '{base} #2', ...); choose another title, such as '{distinct_title(base, number)}'"
    )


def unnumbered_title(title: str) -> str:
    """Return ``title`` with a ``" #N"`` suffix written ``" (#N)"``, so it is not read as lineage numbering (an
    automatic title such as ``"Fix issue #42"``); any other title as it is."""
    if lineage_number(title) == 1:
        return title
    suffix = f" (#{lineage_number(title)})"
    return lineage_base(title)[: MAX_TITLE_LENGTH - len(suffix)].rstrip() + suffix
