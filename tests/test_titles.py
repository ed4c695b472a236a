from __future__ import annotations

import unicodedata

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from hermes_actors.errors import TitleError
from hermes_actors.titles import (
    MAX_TITLE_LENGTH,
    distinct_title,
    lineage_base,
    lineage_number,
    next_lineage_title,
    sanitize_title,
)

SANITISING = [
    ("refactoring auth", "refactoring auth"),
    ("  padded  ", "padded"),
    ("many   inner \t spaces", "many inner spaces"),
    ("line\nbreaks\r\nhere", "line breaks here"),
    ("bell\x07char", "bellchar"),
    ("nul\x00char", "nulchar"),
    ("esc\x1b[31mred", "esc[31mred"),
    ("del\x7fchar", "delchar"),
    ("zero\u200bwidth", "zerowidth"),
    ("zwnj\u200cjoiner\u200d", "zwnjjoiner"),
    ("ltr\u200emark\u200f", "ltrmark"),
    ("line\u2028separator", "lineseparator"),
    ("bidi \u202eevil\u202c override", "bidi evil override"),
    ("isolate \u2066x\u2069", "isolate x"),
    ("word\u2060joiner", "wordjoiner"),
    ("\ufeffbom first", "bom first"),
    ("emoji 🚀 ok", "emoji 🚀 ok"),
    ("中文标题", "中文标题"),
    ("café résumé", "café résumé"),
    ("", None),
    ("   ", None),
    ("\u200b\u200e\ufeff", None),
    ("soft\u00adhyphen", "softhyphen"),
    ("arabic\u061cmark", "arabicmark"),
    ("mongolian\u180evowel", "mongolianvowel"),
    ("deprecated \u206a\u206b\u206c\u206d\u206e\u206fformat", "deprecated format"),
    ("interlinear\ufff9\ufffa\ufffb", "interlinear"),
    ("tagged\U000e0001\U000e0065\U000e006e\U000e007f", "tagged"),
    ("flag 🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f", "flag 🏴"),
    ("\u2029paragraph", "paragraph"),
    ("next\x85line", "next line"),
    ("\U000e0020\u00ad\u180e", None),
    (None, None),
]


@pytest.mark.parametrize(("raw", "clean"), SANITISING)
def test_titles_are_sanitised(raw: str | None, clean: str | None) -> None:
    assert sanitize_title(raw) == clean


def test_a_title_of_exactly_100_characters_is_accepted() -> None:
    assert sanitize_title("x" * MAX_TITLE_LENGTH) == "x" * 100


def test_the_limit_counts_characters_after_sanitising() -> None:
    assert sanitize_title("x" * 100 + "\u200b" * 20 + "   ") == "x" * 100


def test_an_over_long_title_names_the_limit_and_the_fix() -> None:
    with pytest.raises(TitleError, match="title is 101 characters long; the limit is 100, so shorten it"):
        sanitize_title("y" * 101)


_INVISIBLE_CATEGORIES = ("Cf", "Cc")
_mixed = st.text(
    st.characters(categories=["Cf", "Cc", "Zs", "Zl", "Zp", "Ll", "Lo", "Nd", "So"])
    | st.sampled_from("\u00ad\U000e0001"),
    max_size=200,
)


@given(st.text(max_size=200) | _mixed)
@example("a\u200b\u00adb")
@example("\U000e0001\U000e0020x\U000e007f")
def test_sanitising_is_idempotent_and_leaves_no_control_or_format_character(raw: str) -> None:
    try:
        once = sanitize_title(raw)
    except TitleError:
        return
    assert sanitize_title(once) == once
    if once is not None:
        assert [ch for ch in once if unicodedata.category(ch) in _INVISIBLE_CATEGORIES] == []


@given(st.text(max_size=200))
def test_sanitising_is_idempotent_and_leaves_no_invisible_characters(raw: str) -> None:
    try:
        once = sanitize_title(raw)
    except TitleError:
        return
    assert sanitize_title(once) == once
    if once is not None:
        assert once == once.strip()
        assert "  " not in once
        assert not any(ch in once for ch in "\u200b\u200e\u202e\u2066\ufeff\x00\n\t")
        assert len(once) <= MAX_TITLE_LENGTH


def test_lineage_suffixes_are_parsed() -> None:
    assert (lineage_base("my project #3"), lineage_number("my project #3")) == ("my project", 3)
    assert (lineage_base("my project"), lineage_number("my project")) == ("my project", 1)
    assert lineage_base("issue #") == "issue #"
    assert lineage_base("#2") == "#2"


def test_the_next_lineage_title_skips_taken_numbers() -> None:
    assert next_lineage_title("my project", []) == "my project #2"
    assert next_lineage_title("my project", ["my project", "my project #2", "my project #5"]) == "my project #6"
    assert next_lineage_title("my project #2", ["my project #2"]) == "my project #3"


def test_a_lineage_title_stays_within_the_limit() -> None:
    child = next_lineage_title("z" * 100, [])
    assert len(child) == MAX_TITLE_LENGTH
    assert child.endswith(" #2")


def test_a_distinct_title_is_never_read_as_lineage_numbering() -> None:
    assert distinct_title("Hello there", 1) == "Hello there"
    assert distinct_title("Hello there", 2) == "Hello there (2)"
    assert (lineage_base(distinct_title("Hello there", 3)), lineage_number(distinct_title("Hello there", 3))) == (
        "Hello there (3)",
        1,
    )
    long = distinct_title("z" * 100, 12)
    assert len(long) == MAX_TITLE_LENGTH
    assert long.endswith("z (12)")
