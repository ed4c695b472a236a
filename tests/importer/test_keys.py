from __future__ import annotations

import pytest

from hermes_actors.importer.keys import KeyOutcome, translate_key
from hermes_actors.routing import SessionSource


def test_a_key_without_special_characters_is_the_same_here() -> None:
    source = SessionSource(platform="telegram", chat_type="dm", chat_id="12345")
    translated = translate_key("agent:main:telegram:dm:12345", [source], scope_id=None)
    assert (translated.outcome, translated.key) == (KeyOutcome.SAME, "agent:main:telegram:dm:12345")
    # Without any recorded source it is still read as it is.
    assert translate_key("agent:main:telegram:dm:12345", [], scope_id=None).key == "agent:main:telegram:dm:12345"


@pytest.mark.parametrize(
    ("old_key", "source", "new_key"),
    [
        (
            "agent:main:matrix:dm:!room:hs.org",
            SessionSource(platform="matrix", chat_type="dm", chat_id="!room:hs.org"),
            "agent:main:matrix:dm:!room%3Ahs.org",
        ),
        (
            "agent:main:matrix:group:!r:hs.org:@al:hs.org",
            SessionSource(platform="matrix", chat_type="group", chat_id="!r:hs.org", user_id="@al:hs.org"),
            "agent:main:matrix:group:!r%3Ahs.org:@al%3Ahs.org",
        ),
        (
            "agent:main:webhook:dm:50%off",
            SessionSource(platform="webhook", chat_type="dm", chat_id="50%off"),
            "agent:main:webhook:dm:50%25off",
        ),
    ],
)
def test_ids_with_colons_or_percents_are_rebuilt_from_their_source(
    old_key: str, source: SessionSource, new_key: str
) -> None:
    translated = translate_key(old_key, [SessionSource(platform="matrix"), source], scope_id=None)
    assert (translated.outcome, translated.key) == (KeyOutcome.REWRITTEN, new_key)


def test_the_policy_that_built_a_key_is_found() -> None:
    alice = SessionSource(platform="telegram", chat_type="group", chat_id="-100", thread_id="17", user_id="alice")
    for old_key in (
        "agent:main:telegram:group:-100:17",  # a thread shared by everyone (the default)
        "agent:main:telegram:group:-100:17:alice",  # thread_sessions_per_user
        "agent:ops:telegram:group:-100:17",  # a profile's namespace
    ):
        assert translate_key(old_key, [alice], scope_id=None).key == old_key
    shared = SessionSource(platform="discord", chat_type="group", chat_id="C%1", user_id="bob")
    translated = translate_key("agent:main:discord:group:C%1", [shared], scope_id=None)  # group_sessions_per_user off
    assert translated.key == "agent:main:discord:group:C%251"


def test_a_key_with_a_percent_and_no_source_cannot_be_translated() -> None:
    translated = translate_key("agent:main:webhook:dm:50%off", [], scope_id=None)
    assert (translated.outcome, translated.key) == (KeyOutcome.UNREADABLE, None)
    assert "'%'" in translated.reason
    assert translate_key("not-a-key", [], scope_id=None).outcome is KeyOutcome.UNREADABLE


def test_slack_keys_follow_the_scope_less_rules() -> None:
    moved = translate_key("agent:main:slack:group:C1:U1", [], scope_id="T9")
    assert (moved.outcome, moved.key) == (KeyOutcome.MOVED, "agent:main:slack.T9:group:C1:U1")
    dm = translate_key("agent:main:slack:dm:D1", [], scope_id=None)
    assert (dm.outcome, dm.key) == (KeyOutcome.KEPT_FOR_CLAIM, "agent:main:slack:dm:D1")
    known_dm = translate_key("agent:main:slack:dm:D1", [], scope_id="T9")
    assert (known_dm.outcome, known_dm.key) == (KeyOutcome.MOVED, "agent:main:slack.T9:dm:D1")
    for old_key in ("agent:main:slack:channel:C2:U2", "agent:main:slack:group:C3"):
        refused = translate_key(old_key, [], scope_id=None)
        assert (refused.outcome, refused.key) == (KeyOutcome.REFUSED, None)
        assert "reachable by session id" in refused.reason
