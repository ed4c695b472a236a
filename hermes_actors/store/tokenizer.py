"""The ``hermes_words`` FTS5 tokenizer: unicode61 words, CJK characters one token each.

SQLite's unicode61 treats a run of Chinese or Japanese text as a single token, so a query for one or two
characters of it finds nothing. ``hermes_words`` runs the built-in unicode61 tokenizer (in C) over the text and
splits any token containing CJK characters into one token per CJK character, keeping other characters of the
token together. A CJK query then becomes a phrase of single-character tokens: an indexed lookup at any length.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import cast

import apsw

__all__ = ["CJK_CHARACTER", "TOKENIZER_NAME", "UNICODE61_ARGS", "contains_cjk", "register_tokenizer"]

TOKENIZER_NAME = "hermes_words"
UNICODE61_ARGS = ("remove_diacritics", "2")  # the unicode61 tokenizer hermes_words runs (and splits CJK runs of)

# Hangul Jamo, kana, Hangul compatibility Jamo, CJK extension A, unified ideographs, Hangul syllables,
# compatibility ideographs, half-width katakana, supplementary ideographs (extensions B-G).
# schema.sql's GLOB classes list the same blocks.
CJK_CHARACTER = re.compile(
    "[\u1100-\u11ff\u3040-\u30ff\u3131-\u318e\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134a]"
)
_CJK_SPLIT = re.compile(CJK_CHARACTER.pattern + "|[^" + CJK_CHARACTER.pattern[1:] + "+")

_CJK_LEAD_BYTE = re.compile(b"[\xe1-\xf0]")

_Token = tuple[int, int, str]
_Tokenizer = Callable[[bytes, int, str | None], list[_Token]]


def contains_cjk(text: str) -> bool:
    """Return whether ``text`` holds at least one character that ``hermes_words`` splits out."""
    return CJK_CHARACTER.search(text) is not None


def _split_token(base: apsw.FTS5Tokenizer, utf8: bytes, start: int, end: int, flags: int, out: list[_Token]) -> None:
    """Append the pieces of the unicode61 token ``utf8[start:end]`` that contains CJK characters."""
    position = start
    for piece in _CJK_SPLIT.findall(utf8[start:end].decode("utf-8")):
        encoded = piece.encode("utf-8")
        if CJK_CHARACTER.fullmatch(piece):
            out.append((position, position + len(encoded), piece))
        else:
            # Re-tokenize the non-CJK run so its folding matches what unicode61 does elsewhere.
            for sub_start, sub_end, token in cast(list[_Token], base(encoded, flags, None)):
                out.append((position + sub_start, position + sub_end, token))
        position += len(encoded)


def _hermes_words(connection: apsw.Connection, args: list[str]) -> _Tokenizer:
    base = connection.fts5_tokenizer("unicode61", [*UNICODE61_ARGS, *args])

    def tokenize(utf8: bytes, flags: int, locale: str | None) -> list[_Token]:
        tokens = cast(list[_Token], base(utf8, flags, locale))
        if _CJK_LEAD_BYTE.search(utf8) is None:
            # Every CJK character starts with a UTF-8 lead byte from 0xE1 to 0xF0: most text stops here.
            return tokens
        out: list[_Token] = []
        for start, end, token in tokens:
            if CJK_CHARACTER.search(token):
                _split_token(base, utf8, start, end, flags, out)
            else:
                out.append((start, end, token))
        return out

    return tokenize


def register_tokenizer(connection: apsw.Connection) -> None:
    """Make ``hermes_words`` available on ``connection``; every connection that touches the FTS tables needs it."""
    connection.register_fts5_tokenizer(TOKENIZER_NAME, _hermes_words)
