"""What the PostgreSQL store indexes of a message's text (``store/pg/text.py``): a text without CJK characters takes a
shorter way (unicode61 alone, words only), which must give the very columns the general way gives."""

from __future__ import annotations

import random

import pytest

from hermes_actors.store.pg import text
from hermes_actors.store.pg.text import MAX_POSITION, index_text, tokenize

_ALPHABET = [*"abcdefgh ÀéÉüßǅ'\\,.!?-_:0123456789—", "\u00a0", "\t", "\u0301", "Ⅻ", "ﬁ", "Ａ", "😀", "\n"]


def _general(content: str) -> tuple[str, str, int]:
    indexed = text._indexed([token for _, _, token in tokenize(content)])
    return indexed.words, indexed.cjk, indexed.n_tokens


def _columns(content: str) -> tuple[str, str, int]:
    indexed = index_text(content)
    return indexed.words, indexed.cjk, indexed.n_tokens


def test_a_text_without_cjk_gets_the_columns_the_general_way_gives() -> None:
    chooser = random.Random(20261207)
    texts = ["".join(chooser.choice(_ALPHABET) for _ in range(chooser.randint(1, 60))) for _ in range(3000)]
    texts += [
        "echo: message 5 of session 17",
        "It's a back\\slash and a 'quote' again, it's",
        "ÉCOLE école Straße STRASSE",
        "word " * (MAX_POSITION + 50),  # positions clamp at the last one PostgreSQL keeps
        " ".join(f"w{n}" for n in range(120_000)),  # the budget of a tsvector
        "x" * 3000 + " kept",  # a lexeme PostgreSQL refuses is left out, its place kept
    ]
    for content in texts:
        assert _columns(content) == _general(content), content[:80]


def test_the_short_way_is_taken_only_without_cjk_and_cjk_still_gets_its_lexemes() -> None:
    assert _columns("echo: hello hello") == ("'echo':1 'hello':2,3", "", 3)
    words, cjk, tokens = _columns("你好 hello")
    assert (words, cjk, tokens) == _general("你好 hello")
    assert cjk == "'你' '你好' '好'"
    assert words == "'hello':3"


@pytest.mark.parametrize("content", ["", None])
def test_an_empty_text_indexes_nothing(content: str | None) -> None:
    assert _columns(content or "") == ("", "", 0)
    assert index_text(content).n_tokens == 0
