"""What the PostgreSQL store indexes of a message's text, computed in Python at insert.

The tokens are exactly the SQLite store's: ``hermes_words`` (SQLite's unicode61 with diacritics folded, each CJK
character a token of its own) run on a private in-memory SQLite connection per thread, so a query means the same
on both stores and :func:`~hermes_actors.store.search_query.parse_search_query` cuts phrases the same way.

* ``words``: a ``tsvector`` (``simple`` lexemes, no stemming) of the non-CJK tokens with their positions in the
  whole token stream, so a phrase is ``a <-> b`` and words on either side of a CJK run are never adjacent. A token
  over 2,046 bytes (a pasted blob) is left out, its place kept: PostgreSQL refuses such a lexeme (SQLite's index
  has no such limit).
* ``cjk``: a ``tsvector`` of every CJK character and every pair of adjacent CJK characters (bigrams), no
  positions. A CJK phrase of two or more characters is the AND of its bigrams plus a substring recheck; one
  character is its unigram lexeme (same GIN index) plus the recheck.
"""

from __future__ import annotations

import threading
from typing import Any, cast

import apsw

from hermes_actors.store.search_query import Token
from hermes_actors.store.tokenizer import (
    CJK_CHARACTER,
    TOKENIZER_NAME,
    UNICODE61_ARGS,
    contains_cjk,
    register_tokenizer,
)

__all__ = ["IndexedText", "cjk_lexemes", "from_db", "index_text", "is_cjk", "quote_lexeme", "to_db", "tokenize"]

MAX_POSITION = 16_383  # tsvector positions stop here (PostgreSQL clamps larger ones)
MAX_POSITIONS = 256  # positions kept per lexeme (PostgreSQL keeps no more)
MAX_LEXEME_BYTES = 2046  # a longer word is not indexed: PostgreSQL refuses it in a tsvector (and the message with it)
# A tsvector holds under 1 MB. Each column gets a budget of this many bytes (a lexeme costs its UTF-8 bytes and
# 4 more, a position 2): a pathological message (a huge log of distinct tokens) keeps its first lexemes whole.
_BUDGET = 900_000


NUL_STAND_IN = "\uffff"
"""PostgreSQL text cannot hold NUL, which an imported multimodal message's content may: it is stored as U+FFFF, a
noncharacter no text is meant to contain, and turned back on every read of message content."""


def to_db(content: str | None) -> str | None:
    """Message content as stored (NUL as :data:`NUL_STAND_IN`)."""
    return content.replace("\x00", NUL_STAND_IN) if content and "\x00" in content else content


def from_db(content: str | None) -> str | None:
    """Message content as read back."""
    return content.replace(NUL_STAND_IN, "\x00") if content and NUL_STAND_IN in content else content


class _Tokenizers(threading.local):
    pair: tuple[apsw.FTS5Tokenizer, apsw.FTS5Tokenizer] | None = None


_local = _Tokenizers()


def _tokenizers() -> tuple[apsw.FTS5Tokenizer, apsw.FTS5Tokenizer]:
    """This thread's ``hermes_words`` and plain unicode61 tokenizers, on one private in-memory connection."""
    pair = _local.pair
    if pair is None:
        connection = apsw.Connection(":memory:")
        register_tokenizer(connection)
        words = connection.fts5_tokenizer(TOKENIZER_NAME, [])
        pair = _local.pair = (words, connection.fts5_tokenizer("unicode61", list(UNICODE61_ARGS)))
    return pair


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text`` as the SQLite messages index sees a document: (start byte, end byte, token)."""
    tokenizer = _tokenizers()[0]
    found = cast(list[tuple[Any, ...]], tokenizer(text.encode("utf-8"), apsw.FTS5_TOKENIZE_DOCUMENT, None))
    return [(int(token[0]), int(token[1]), str(token[2])) for token in found]


def is_cjk(token: str) -> bool:
    """Whether ``token`` is one CJK character (``hermes_words`` emits them one per token)."""
    return len(token) == 1 and CJK_CHARACTER.fullmatch(token) is not None


def quote_lexeme(lexeme: str) -> str:
    """``lexeme`` quoted for a ``tsvector`` or ``tsquery`` literal."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def cjk_lexemes(run: str) -> list[str]:
    """The lexemes a CJK run is found by: its bigrams, or the character itself when it is one."""
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


class IndexedText:
    """The index columns of one message: ``words`` and ``cjk`` as ``tsvector`` literals, and its token count."""

    __slots__ = ("cjk", "n_tokens", "words")

    def __init__(self, words: str, cjk: str, n_tokens: int) -> None:
        self.words = words
        self.cjk = cjk
        self.n_tokens = n_tokens


_EMPTY = IndexedText("", "", 0)


def index_text(content: str | None) -> IndexedText:
    """The index columns of a message with ``content`` (``None``: a tool call, indexed as an empty document)."""
    if not content:
        return _EMPTY
    if not contains_cjk(content):
        return _words_only(_plain_tokens(content))
    return _indexed([token for _, _, token in tokenize(content)])


def _indexed(tokens: list[str]) -> IndexedText:
    """The index columns of a message whose ``hermes_words`` tokens are ``tokens``, CJK characters among them."""
    positions: dict[str, list[int]] = {}
    cjk: set[str] = set()
    words_bytes = cjk_bytes = 0
    previous: str | None = None
    for index, token in enumerate(tokens):
        if is_cjk(token):
            for lexeme in (token,) if previous is None else (token, previous + token):
                if lexeme not in cjk and cjk_bytes < _BUDGET:
                    cjk.add(lexeme)
                    cjk_bytes += len(lexeme.encode()) + 4
            previous = token
            continue
        previous = None
        held = positions.get(token)
        if held is None:
            size = len(token.encode())
            if words_bytes >= _BUDGET or size > MAX_LEXEME_BYTES:
                continue
            held = positions[token] = []
            words_bytes += size + 4
        if len(held) < MAX_POSITIONS and (not held or held[-1] != min(index + 1, MAX_POSITION)):
            held.append(min(index + 1, MAX_POSITION))
            words_bytes += 2
    words = " ".join(f"{quote_lexeme(t)}:{','.join(map(str, p))}" for t, p in positions.items())
    return IndexedText(words, " ".join(quote_lexeme(c) for c in sorted(cjk)), len(tokens))


def _plain_tokens(text: str) -> list[str]:
    """The tokens of a text without CJK characters: ``hermes_words`` gives unicode61's own there, so unicode61 (in C)
    runs alone, without the wrapper that splits CJK runs."""
    plain = _tokenizers()[1]
    found = cast(
        list[tuple[str, ...]], plain(text.encode("utf-8"), apsw.FTS5_TOKENIZE_DOCUMENT, None, include_offsets=False)
    )
    return [token[0] for token in found]


def _words_only(tokens: list[str]) -> IndexedText:
    """:func:`index_text` of a text without CJK characters (most messages): the same columns in fewer steps."""
    positions: dict[str, list[int]] = {}
    words_bytes = 0
    index = 0
    for token in tokens:
        index += 1
        held = positions.get(token)
        if held is None:
            size = len(token) if token.isascii() else len(token.encode())
            if words_bytes >= _BUDGET or size > MAX_LEXEME_BYTES:
                continue
            positions[token] = [index if index < MAX_POSITION else MAX_POSITION]
            words_bytes += size + 6
        else:
            position = index if index < MAX_POSITION else MAX_POSITION
            if len(held) < MAX_POSITIONS and held[-1] != position:
                held.append(position)
                words_bytes += 2
    parts = []
    for token, places in positions.items():
        lexeme = f"'{token}'" if "'" not in token and "\\" not in token else quote_lexeme(token)
        parts.append(f"{lexeme}:{places[0]}" if len(places) == 1 else f"{lexeme}:{','.join(map(str, places))}")
    return IndexedText(" ".join(parts), "", len(tokens))
