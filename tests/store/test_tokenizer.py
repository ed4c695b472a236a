from __future__ import annotations

from typing import cast

import apsw
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes_actors.store.tokenizer import TOKENIZER_NAME, contains_cjk, register_tokenizer

_Token = tuple[int, int, str]


@pytest.fixture(scope="module")
def tokenize() -> apsw.FTS5Tokenizer:
    connection = apsw.Connection(":memory:")
    register_tokenizer(connection)
    return connection.fts5_tokenizer(TOKENIZER_NAME, [])


def tokens(tokenize: apsw.FTS5Tokenizer, text: str) -> list[tuple[str, str]]:
    utf8 = text.encode()
    spans = cast(list[_Token], tokenize(utf8, apsw.FTS5_TOKENIZE_DOCUMENT, None))
    return [(utf8[s:e].decode(), t) for s, e, t in spans]


def test_latin_words_are_folded_as_unicode61_does(tokenize: apsw.FTS5Tokenizer) -> None:
    assert tokens(tokenize, "Héllo, Wörld!") == [("Héllo", "hello"), ("Wörld", "world")]


def test_each_cjk_character_is_its_own_token(tokenize: apsw.FTS5Tokenizer) -> None:
    assert [t for _, t in tokens(tokenize, "全文搜索")] == ["全", "文", "搜", "索"]
    assert [t for _, t in tokens(tokenize, "今日は")] == ["今", "日", "は"]
    assert [t for _, t in tokens(tokenize, "한국어")] == ["한", "국", "어"]


def test_latin_inside_a_cjk_run_stays_one_folded_word(tokenize: apsw.FTS5Tokenizer) -> None:
    assert tokens(tokenize, "用Python写") == [("用", "用"), ("Python", "python"), ("写", "写")]
    assert tokens(tokenize, "abc中déf") == [("abc", "abc"), ("中", "中"), ("déf", "def")]


def test_supplementary_ideographs_are_split_too(tokenize: apsw.FTS5Tokenizer) -> None:
    assert [t for _, t in tokens(tokenize, "𠀀𠀁")] == ["𠀀", "𠀁"]


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=80))
def test_token_offsets_are_ordered_utf8_spans_of_the_input(text: str) -> None:
    connection = apsw.Connection(":memory:")
    register_tokenizer(connection)
    tokenize = connection.fts5_tokenizer(TOKENIZER_NAME, [])
    utf8 = text.encode()
    previous_end = 0
    for start, end, token in cast(list[_Token], tokenize(utf8, apsw.FTS5_TOKENIZE_DOCUMENT, None)):
        assert previous_end <= start < end <= len(utf8)
        span = utf8[start:end].decode()  # raises if not on character boundaries
        if contains_cjk(span):
            assert span == token
            assert len(span) == 1
        previous_end = end
    connection.close()
