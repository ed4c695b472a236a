from __future__ import annotations

import msgspec
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from hermes_actors import routing
from hermes_actors.errors import RoutingError
from hermes_actors.routing import (
    KeyPolicy,
    LegacyKeyAction,
    SessionKey,
    SessionSource,
    build_session_key,
    format_session_key,
    is_session_key,
    migrate_legacy_slack_key,
    migrate_scopeless_key,
    parse_session_key,
)

_GROUP = SessionSource(platform="telegram", chat_type="group", chat_id="-10012345", user_id="alice")
_TOPIC = msgspec.structs.replace(_GROUP, thread_id="17")


def test_the_public_names_are_pinned() -> None:
    assert routing.__all__ == [
        "KeyPolicy",
        "LegacyKeyAction",
        "LegacyKeyDecision",
        "SessionKey",
        "SessionSource",
        "build_session_key",
        "format_platform_segment",
        "format_session_key",
        "is_session_key",
        "migrate_legacy_slack_key",
        "migrate_scopeless_key",
        "parse_session_key",
    ]


# The four examples of SPEC section 2, byte for byte.


def test_a_telegram_dm_is_keyed_by_its_chat_id() -> None:
    source = SessionSource(platform="telegram", chat_type="dm", chat_id="12345", user_id="12345")
    assert build_session_key(source) == "agent:main:telegram:dm:12345"


def test_each_member_of_a_telegram_group_has_a_session_of_their_own() -> None:
    assert build_session_key(_GROUP) == "agent:main:telegram:group:-10012345:alice"


def test_a_forum_topic_is_shared_by_its_members() -> None:
    assert build_session_key(_TOPIC) == "agent:main:telegram:group:-10012345:17"


def test_a_forum_topic_is_per_member_with_thread_sessions_per_user() -> None:
    policy = KeyPolicy(thread_sessions_per_user=True)
    assert build_session_key(_TOPIC, policy) == "agent:main:telegram:group:-10012345:17:alice"


def test_a_thread_stays_shared_when_group_sessions_per_user_is_off() -> None:
    policy = KeyPolicy(group_sessions_per_user=False, thread_sessions_per_user=True)
    assert build_session_key(_TOPIC, policy) == "agent:main:telegram:group:-10012345:17"


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"chat_id": "c", "user_id": "u"}, "agent:main:x:dm:c"),
        ({"chat_id": "c", "thread_id": "t", "user_id": "u"}, "agent:main:x:dm:c:t"),
        ({"user_id": "u"}, "agent:main:x:dm:u"),
        ({"user_id": "u", "thread_id": "t"}, "agent:main:x:dm:u:t"),
        ({"thread_id": "t"}, "agent:main:x:dm:t"),
        ({}, "agent:main:x:dm"),
    ],
)
def test_a_dm_without_a_chat_id_falls_back_to_participant_then_thread(fields: dict[str, str], expected: str) -> None:
    assert build_session_key(SessionSource(platform="x", **fields)) == expected


def test_user_id_alt_wins_over_user_id() -> None:
    dm = SessionSource(platform="signal", user_id="+15550100", user_id_alt="b1f3-uuid")
    group = msgspec.structs.replace(dm, chat_type="group", chat_id="g1")
    assert dm.participant_id == "b1f3-uuid"
    assert build_session_key(dm) == "agent:main:signal:dm:b1f3-uuid"
    assert build_session_key(group) == "agent:main:signal:group:g1:b1f3-uuid"


def test_empty_strings_count_as_absent() -> None:
    blank = SessionSource(
        platform="x", account_id="", scope_id="", chat_id="", thread_id="", user_id="u", user_id_alt=""
    )
    assert blank.participant_id == "u"
    assert build_session_key(blank) == "agent:main:x:dm:u"
    assert build_session_key(msgspec.structs.replace(blank, user_id="")) == "agent:main:x:dm"
    assert msgspec.structs.replace(blank, user_id="").participant_id is None


def test_a_group_is_shared_when_group_sessions_per_user_is_off() -> None:
    policy = KeyPolicy(group_sessions_per_user=False)
    assert build_session_key(_GROUP, policy) == "agent:main:telegram:group:-10012345"


def test_a_group_message_without_a_participant_goes_to_the_shared_session() -> None:
    anonymous = msgspec.structs.replace(_GROUP, user_id=None)
    assert build_session_key(anonymous) == "agent:main:telegram:group:-10012345"


@pytest.mark.parametrize(
    ("namespace", "expected"),
    [("", "main"), ("default", "main"), ("main", "main"), ("work", "work")],
)
def test_default_and_empty_namespaces_mean_main(namespace: str, expected: str) -> None:
    key = build_session_key(_GROUP, KeyPolicy(namespace=namespace))
    assert key == f"agent:{expected}:telegram:group:-10012345:alice"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            SessionSource(platform="slack", scope_id="T9", chat_type="group", chat_id="C1", user_id="U1"),
            "agent:main:slack.T9:group:C1:U1",
        ),
        (
            SessionSource(platform="weixin", account_id="bot2", chat_id="wxid_a"),
            "agent:main:weixin~bot2:dm:wxid_a",
        ),
        (
            SessionSource(platform="slack", scope_id="T9", account_id="B1", chat_id="D1"),
            "agent:main:slack.T9~B1:dm:D1",
        ),
    ],
)
def test_scope_and_account_extend_the_platform_segment(source: SessionSource, expected: str) -> None:
    assert build_session_key(source) == expected


def test_colons_in_matrix_ids_are_encoded() -> None:
    source = SessionSource(platform="matrix", chat_type="group", chat_id="!room:hs.org", user_id="@u:hs.org")
    assert build_session_key(source) == "agent:main:matrix:group:!room%3Ahs.org:@u%3Ahs.org"


def test_percent_signs_in_ids_are_encoded() -> None:
    source = SessionSource(platform="x", chat_type="group", chat_id="50%off", user_id="%3A")
    assert build_session_key(source) == "agent:main:x:group:50%25off:%253A"


def test_dots_and_tildes_are_encoded_only_in_the_tenancy_parts() -> None:
    source = SessionSource(platform="p.q~r", scope_id="a.b", account_id="c~d", chat_type="t.~", chat_id="e.f~g")
    key = build_session_key(source, KeyPolicy(namespace="n.s~"))
    assert key == "agent:n%2Es%7E:p%2Eq%7Er.a%2Eb~c%7Ed:t.~:e.f~g"


def test_unicode_is_kept_as_is() -> None:
    source = SessionSource(platform="feishu", chat_type="group", chat_id="群聊", user_id="用户")
    assert build_session_key(source) == "agent:main:feishu:group:群聊:用户"


def test_an_empty_platform_is_refused_with_the_fix() -> None:
    with pytest.raises(RoutingError, match=r"SessionSource\.platform is empty; the adapter must set it"):
        build_session_key(SessionSource(platform="", chat_id="1"))


def test_an_empty_chat_type_is_refused_with_the_fix() -> None:
    with pytest.raises(RoutingError, match=r"SessionSource\.chat_type is empty for platform 'x'; set it to"):
        build_session_key(SessionSource(platform="x", chat_type="", chat_id="1"))


def test_a_key_parses_into_its_fields() -> None:
    assert parse_session_key("agent:main:slack.T9~B1:group:C1%3Ax:U1") == SessionKey(
        namespace="main",
        platform="slack",
        scope_id="T9",
        account_id="B1",
        chat_type="group",
        ids=("C1:x", "U1"),
    )


def test_parsing_does_not_guess_whether_an_id_is_a_thread_or_a_participant() -> None:
    in_topic = build_session_key(msgspec.structs.replace(_TOPIC, user_id="bob"))
    member_17 = build_session_key(msgspec.structs.replace(_GROUP, user_id="17"))
    assert in_topic == member_17
    assert parse_session_key(in_topic).ids == ("-10012345", "17")


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("", "must start with 'agent:'"),
        ("session:main:x:dm", "must start with 'agent:'"),
        ("agent", "too few segments"),
        ("agent:main:x", "too few segments"),
        ("agent::x:dm", "the namespace is empty"),
        ("agent:main::dm", "the platform is empty"),
        ("agent:main:x:", "the chat type is empty"),
        ("agent:main:x:dm::y", "id 1 is empty"),
        ("agent:main:x:dm:a:", "id 2 is empty"),
        ("agent:main:x.:dm", "the scope is empty"),
        ("agent:main:.T9:dm", "the platform is empty"),
        ("agent:main:x~:dm", "the account is empty"),
        ("agent:main:x:dm:%3a", "bad percent escape '%3a' in id 1"),
        ("agent:main:x:dm:50%", "bad percent escape '%' in id 1"),
        ("agent:main:x:dm:%41", "bad percent escape '%41' in id 1"),
        ("agent:main:x:dm:%2E", "bad percent escape '%2E' in id 1"),
        ("agent:main:x:d%7Em", "bad percent escape '%7E' in the chat type"),
        ("agent:m.n:x:dm", "unescaped '.' in the namespace"),
        ("agent:main:x.a.b:dm", "unescaped '.' in the scope"),
        ("agent:main:x~a~b:dm", "unescaped '~' in the account"),
        ("agent:main:x~a.b:dm", "unescaped '.' in the account"),
    ],
)
def test_a_malformed_key_is_refused_naming_the_defect(key: str, problem: str) -> None:
    with pytest.raises(RoutingError) as caught:
        parse_session_key(key)
    assert str(caught.value).startswith(f"{key!r} is not a session key: ")
    assert problem in str(caught.value)
    assert not is_session_key(key)


def test_is_session_key_accepts_a_built_key() -> None:
    assert is_session_key(build_session_key(_TOPIC))


def test_a_key_with_an_empty_component_cannot_be_formatted() -> None:
    with pytest.raises(RoutingError, match="a component is empty"):
        format_session_key(SessionKey(platform="x", chat_type="dm", ids=("a", "")))
    with pytest.raises(RoutingError, match="use None for an absent scope"):
        format_session_key(SessionKey(platform="x", scope_id="", chat_type="dm"))


# Properties.

_TEXT = st.text(st.sampled_from(":%.~aZ9-_ 群é") | st.characters(codec="utf-8"), max_size=8)
_NONEMPTY = _TEXT.filter(bool)
_OPTIONAL = st.none() | _TEXT
_SOURCES = st.builds(
    SessionSource,
    platform=_NONEMPTY,
    account_id=_OPTIONAL,
    scope_id=_OPTIONAL,
    chat_type=st.sampled_from(["dm", "group", "channel", "thread"]) | _NONEMPTY,
    chat_id=_OPTIONAL,
    thread_id=_OPTIONAL,
    user_id=_OPTIONAL,
    user_id_alt=_OPTIONAL,
    chat_name=_OPTIONAL,
    user_name=_OPTIONAL,
    message_id=_OPTIONAL,
)
_POLICIES = st.builds(
    KeyPolicy,
    namespace=st.sampled_from(["", "default", "main"]) | _TEXT,
    group_sessions_per_user=st.booleans(),
    thread_sessions_per_user=st.booleans(),
)
_KEYS = st.builds(
    SessionKey,
    namespace=_NONEMPTY,
    platform=_NONEMPTY,
    scope_id=st.none() | _NONEMPTY,
    account_id=st.none() | _NONEMPTY,
    chat_type=_NONEMPTY,
    ids=st.lists(_NONEMPTY, max_size=4).map(tuple),
)


def _expected_ids(source: SessionSource, policy: KeyPolicy) -> tuple[str, ...]:
    """The trailing ids SPEC section 2 asks for, written out case by case."""
    chat, thread, who = source.chat_id, source.thread_id, source.user_id_alt or source.user_id
    if source.chat_type == "dm":
        head = chat if chat else who
        return tuple(part for part in (head, thread) if part)
    if thread:
        per_user = policy.group_sessions_per_user and policy.thread_sessions_per_user
    else:
        per_user = policy.group_sessions_per_user
    return tuple(part for part in (chat, thread, who if per_user else None) if part)


@pytest.mark.slow
@given(_SOURCES, _POLICIES)
def test_a_built_key_parses_back_to_its_source(source: SessionSource, policy: KeyPolicy) -> None:
    parsed = parse_session_key(build_session_key(source, policy))
    assert parsed.namespace == (policy.namespace if policy.namespace not in ("", "default") else "main")
    assert parsed.platform == source.platform
    assert parsed.scope_id == (source.scope_id or None)
    assert parsed.account_id == (source.account_id or None)
    assert parsed.chat_type == source.chat_type
    assert parsed.ids == _expected_ids(source, policy)


@given(_KEYS)
def test_parse_inverts_format(key: SessionKey) -> None:
    assert parse_session_key(format_session_key(key)) == key


@given(_KEYS)
def test_format_inverts_parse_on_formatted_keys(key: SessionKey) -> None:
    text = format_session_key(key)
    assert format_session_key(parse_session_key(text)) == text


# Segments built from escapes, bad escapes and separators, so that parse accepts some and refuses most.
_KEYLIKE_SEGMENTS = st.lists(
    st.lists(st.sampled_from(["a", "b", ".", "~", "%3A", "%25", "%2E", "%7E", "%3a", "%"]), min_size=1, max_size=3).map(
        "".join
    ),
    min_size=3,
    max_size=6,
)


@given(_KEYLIKE_SEGMENTS)
def test_format_inverts_parse_on_every_string_parse_accepts(segments: list[str]) -> None:
    text = ":".join(["agent", *segments])
    try:
        parsed = parse_session_key(text)
    except RoutingError:
        return
    assert format_session_key(parsed) == text


_TENANT_TEXT = st.text(st.sampled_from("ab.~%:"), max_size=3)
_TENANTS = st.tuples(_TENANT_TEXT.filter(bool), _TENANT_TEXT, _TENANT_TEXT)


@given(_SOURCES, _POLICIES, _TENANTS, _TENANTS)
def test_different_tenants_never_share_a_key(
    source: SessionSource, policy: KeyPolicy, first: tuple[str, str, str], second: tuple[str, str, str]
) -> None:
    assume((first[0], first[1] or None, first[2] or None) != (second[0], second[1] or None, second[2] or None))
    keys = {
        build_session_key(
            msgspec.structs.replace(source, platform=platform, scope_id=scope, account_id=account), policy
        )
        for platform, scope, account in (first, second)
    }
    assert len(keys) == 2


def test_a_dotted_platform_does_not_collide_with_a_scoped_one() -> None:
    dotted = SessionSource(platform="slack.T9", chat_id="D1")
    scoped = SessionSource(platform="slack", scope_id="T9", chat_id="D1")
    assert build_session_key(dotted) != build_session_key(scoped)


@given(_SOURCES, _POLICIES)
def test_build_is_deterministic_across_a_wire_round_trip(source: SessionSource, policy: KeyPolicy) -> None:
    copy = msgspec.json.decode(msgspec.json.encode(source), type=SessionSource)
    assert build_session_key(source, policy) == build_session_key(copy, policy)


_PLAIN = st.text(st.sampled_from("abcXYZ019-_@!+群é"), max_size=6)


@given(
    st.builds(
        SessionSource,
        platform=_PLAIN.filter(bool),
        chat_type=st.sampled_from(["dm", "group", "channel", "thread"]),
        chat_id=st.none() | _PLAIN,
        thread_id=st.none() | _PLAIN,
        user_id=st.none() | _PLAIN,
        user_id_alt=st.none() | _PLAIN,
    ),
    st.builds(
        KeyPolicy,
        namespace=st.sampled_from(["", "default"]) | _PLAIN,
        group_sessions_per_user=st.booleans(),
        thread_sessions_per_user=st.booleans(),
    ),
)
def test_keys_without_reserved_characters_or_tenancy_equal_hermes_keys(
    source: SessionSource, policy: KeyPolicy
) -> None:
    namespace = "main" if policy.namespace in ("", "default") else policy.namespace
    hermes = ":".join(["agent", namespace, source.platform, source.chat_type, *_expected_ids(source, policy)])
    assert build_session_key(source, policy) == hermes


# Legacy scope-less Slack keys.


@pytest.mark.parametrize(
    ("old_key", "new_key"),
    [
        ("agent:main:slack:group:C1:U1", "agent:main:slack.T9:group:C1:U1"),
        ("agent:main:slack:dm:D1", "agent:main:slack.T9:dm:D1"),
        ("agent:main:slack~B1:channel:C1", "agent:main:slack.T9~B1:channel:C1"),
    ],
)
def test_an_entry_whose_workspace_is_recorded_moves_to_its_scoped_key(old_key: str, new_key: str) -> None:
    decision = migrate_legacy_slack_key(
        old_key, recorded_scope_id="T9", observed_scope_id="T7", dm_already_claimed=True
    )
    assert decision.action is LegacyKeyAction.MOVE
    assert decision.new_key == new_key
    assert "T9" in decision.reason


def test_the_first_workspace_to_see_a_scope_less_dm_claims_it() -> None:
    decision = migrate_legacy_slack_key(
        "agent:main:slack~B1:dm:D1", recorded_scope_id=None, observed_scope_id="T9", dm_already_claimed=False
    )
    assert decision.action is LegacyKeyAction.CLAIM
    assert decision.new_key == "agent:main:slack.T9~B1:dm:D1"


def test_the_scope_less_rule_holds_for_every_platform_whose_keys_carry_a_tenant() -> None:
    claimed = migrate_scopeless_key(
        "agent:main:feishu~app:dm:oc_1", recorded_scope_id=None, observed_scope_id="tk9", dm_already_claimed=False
    )
    assert (claimed.action, claimed.new_key) == (LegacyKeyAction.CLAIM, "agent:main:feishu.tk9~app:dm:oc_1")
    shared = migrate_scopeless_key(
        "agent:main:teams~bot:group:19x", recorded_scope_id=None, observed_scope_id="t1", dm_already_claimed=False
    )
    assert shared.action is LegacyKeyAction.REFUSE
    slack_only = migrate_legacy_slack_key(
        "agent:main:feishu:dm:oc_1", recorded_scope_id=None, observed_scope_id="tk9", dm_already_claimed=False
    )
    assert slack_only.action is LegacyKeyAction.NOT_LEGACY


def test_a_dm_already_claimed_by_another_workspace_is_refused() -> None:
    decision = migrate_legacy_slack_key(
        "agent:main:slack:dm:D1", recorded_scope_id=None, observed_scope_id="T7", dm_already_claimed=True
    )
    assert decision.action is LegacyKeyAction.REFUSE
    assert decision.new_key is None
    assert "another workspace already claimed this DM" in decision.reason


def test_a_dm_no_workspace_has_seen_is_refused() -> None:
    decision = migrate_legacy_slack_key(
        "agent:main:slack:dm:D1", recorded_scope_id="", observed_scope_id=None, dm_already_claimed=False
    )
    assert decision.action is LegacyKeyAction.REFUSE
    assert decision.new_key is None
    assert "no workspace has seen this DM" in decision.reason


@pytest.mark.parametrize("chat_type", ["group", "channel", "thread"])
def test_a_shared_chat_of_unknown_workspace_is_never_migrated(chat_type: str) -> None:
    decision = migrate_legacy_slack_key(
        f"agent:main:slack:{chat_type}:C1",
        recorded_scope_id=None,
        observed_scope_id="T9",
        dm_already_claimed=False,
    )
    assert decision.action is LegacyKeyAction.REFUSE
    assert decision.new_key is None
    assert "leaking one tenant's transcript to another" in decision.reason
    assert "reachable by session id" in decision.reason


@pytest.mark.parametrize("old_key", ["agent:main:slack.T9:group:C1:U1", "agent:main:telegram:dm:12345"])
def test_keys_that_are_not_scope_less_slack_keys_are_not_legacy(old_key: str) -> None:
    decision = migrate_legacy_slack_key(
        old_key, recorded_scope_id="T1", observed_scope_id="T1", dm_already_claimed=False
    )
    assert decision.action is LegacyKeyAction.NOT_LEGACY
    assert decision.new_key is None


def test_a_malformed_legacy_key_is_refused_as_not_a_key() -> None:
    with pytest.raises(RoutingError, match="is not a session key"):
        migrate_legacy_slack_key(
            "slack:dm:D1", recorded_scope_id="T9", observed_scope_id=None, dm_already_claimed=False
        )
