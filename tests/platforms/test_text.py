"""Splitting long replies."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from platforms.support.text import split_message, utf16_length


def test_short_text_is_one_part() -> None:
    assert split_message("hello", 10) == ["hello"]
    assert split_message("", 10) == [""]


def test_paragraphs_win_over_lines_and_words() -> None:
    text = "first paragraph here\n\nsecond one is here too"
    assert split_message(text, 30) == ["first paragraph here", "second one is here too"]


def test_an_overlong_word_is_cut_hard() -> None:
    assert split_message("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]


def test_utf16_measure_never_splits_a_surrogate_pair() -> None:
    text = "😀" * 10  # each is 2 UTF-16 units
    parts = split_message(text, 5, length=utf16_length)
    assert all(utf16_length(p) <= 5 for p in parts)
    assert "".join(parts) == text


@given(st.text(min_size=0, max_size=400), st.integers(min_value=2, max_value=60))
def test_parts_fit_and_keep_every_non_space_character_in_order(text: str, limit: int) -> None:
    parts = split_message(text, limit, length=utf16_length)
    assert all(utf16_length(p) <= limit for p in parts)
    assert all(p for p in parts) or parts == [text]
    squeeze = "".join(c for c in text if not c.isspace())
    assert "".join(c for p in parts for c in p if not c.isspace()) == squeeze
