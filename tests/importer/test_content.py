from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from hermes_actors.store.content import (
    HERMES_JSON_PREFIX,
    decode_text,
    hermes_content,
    render_parts,
    split_content,
    store_content,
)

# Text SQLite can store: every code point but the surrogates, NUL included.
storable = st.text(st.characters(exclude_categories=["Cs"]), max_size=60)
part = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=30)),
    st.builds(lambda u: {"type": "image_url", "image_url": {"url": u}}, st.text(max_size=30)),
    st.builds(lambda o: {"output": o, "exit_code": 0}, st.text(max_size=30)),
    st.text(max_size=30),
)


@given(storable)
def test_plain_content_is_stored_unchanged_and_read_back_unchanged(value: str) -> None:
    stored = store_content(value)
    assert hermes_content(stored) == value
    if not value.startswith(HERMES_JSON_PREFIX):
        assert stored == value


@given(st.lists(part, max_size=5), st.booleans())
def test_a_structured_value_survives_byte_for_byte_behind_its_text(parts: list[object], ascii_only: bool) -> None:
    value = HERMES_JSON_PREFIX + json.dumps(parts, ensure_ascii=ascii_only)
    stored = store_content(value)
    assert stored is not None
    text, kept = split_content(stored)
    assert kept == value
    assert hermes_content(stored) == value
    assert "\x00" not in text  # LIKE and GLOB see all of it
    assert stored == text + value


def test_the_rendering_takes_text_and_output_and_names_other_parts() -> None:
    parts = [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        "bare string",
        {"output": "tool said\x00this"},
        {"no": "type"},
        42,
    ]
    assert render_parts(json.dumps(parts)) == "look\n[image_url]\nbare string\ntool said this"
    assert render_parts(json.dumps({"type": "text", "text": "one part"})) == "one part"


def test_a_lone_surrogate_escape_renders_as_a_replacement_character() -> None:
    assert render_parts('[{"type": "text", "text": "a\\ud83db \\ud83d\\ude00"}]') == "a\ufffdb 😀"


def test_payloads_that_are_not_json_render_as_nothing() -> None:
    assert render_parts("{not json") is None
    assert render_parts("[" * 100_000) is None  # too deep for the parser: no crash
    assert store_content(HERMES_JSON_PREFIX + "{not json") == HERMES_JSON_PREFIX + "{not json"
    assert split_content(HERMES_JSON_PREFIX + "{not json") == ("", HERMES_JSON_PREFIX + "{not json")


def test_plain_content_that_contains_the_prefix_is_not_mistaken_for_structured() -> None:
    for content in ("abc\x00json:xyz", "a\x00b\x00json:[]", 'x\x00json:["y"]'):
        assert split_content(content) == (content, None)
        assert hermes_content(content) == content


@given(st.text(st.characters(exclude_categories=["Cs"])))
def test_valid_utf8_decodes_without_repair(text: str) -> None:
    assert decode_text(text.encode("utf-8")) == (text, False)


def test_bytes_that_are_not_utf8_are_repaired_keeping_what_can_be_read() -> None:
    assert decode_text(b"pair \xed\xa0\xbd\xed\xb8\x80 lone \xed\xa0\x80 byte \xff cut \xe4\xb8") == (
        "pair 😀 lone \ufffd byte \ufffd cut \ufffd",
        True,
    )
    assert decode_text(None) == (None, False)
    assert decode_text(12345) == ("12345", False)
    assert decode_text("already text") == ("already text", False)
