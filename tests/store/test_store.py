from __future__ import annotations

import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_actors.errors import (
    AmbiguousSessionError,
    SessionClosedError,
    SessionNotFoundError,
    StoreError,
    TitleError,
    TitleInUseError,
)
from hermes_actors.routing import SessionSource
from hermes_actors.store import EndReason, NewMessage, Role, SessionFilter, Store, StoreInterface
from hermes_actors.testing import FakeClock


def user(text: str) -> NewMessage:
    return NewMessage(role=Role.USER, content=text)


def test_a_created_session_carries_its_source_fields(store: StoreInterface) -> None:
    source = SessionSource(
        platform="slack",
        scope_id="T9",
        account_id="B1",
        chat_type="group",
        chat_id="C1",
        user_id="U1",
        user_id_alt="alt-1",
        user_name="alice",
        chat_name="#general",
    )
    created = store.create_session(source, routing_key="agent:main:slack.T9~B1:group:C1:alt-1", model="m1")
    loaded = store.get_session(created.id)
    assert loaded == created
    assert (loaded.source, loaded.scope_id, loaded.account_id, loaded.user_id) == (
        "slack",
        "T9",
        "B1",
        "alt-1",
    )
    assert loaded.is_live


def test_gateway_and_cli_sessions_get_ids_of_their_kind(store: StoreInterface) -> None:
    from hermes_actors.ids import SessionKind

    gateway = store.create_session("telegram")
    cli = store.create_session("cli", kind=SessionKind.CLI)
    assert len(gateway.id.rsplit("_", 1)[1]) == 8
    assert len(cli.id.rsplit("_", 1)[1]) == 6


def test_a_duplicate_session_id_is_refused_with_a_clear_error(store: StoreInterface) -> None:
    store.create_session("cli", session_id="20261130_120000_abcdef")
    with pytest.raises(StoreError, match="already exists"):
        store.create_session("cli", session_id="20261130_120000_abcdef")


def test_the_first_end_reason_wins(store: StoreInterface, clock: FakeClock) -> None:
    session = store.create_session("cli")
    first = store.end_session(session.id, EndReason.IDLE)
    clock.advance(60)
    second = store.end_session(session.id, EndReason.SESSION_RESET)
    assert second.end_reason == "idle"
    assert second.ended_at == first.ended_at


def test_reopening_makes_an_ended_session_live_again(store: StoreInterface) -> None:
    session = store.create_session("cli")
    store.end_session(session.id, EndReason.USER_EXIT)
    reopened = store.reopen_session(session.id)
    assert reopened.is_live
    assert reopened.end_reason is None


def test_unknown_sessions_raise_not_found(store: StoreInterface) -> None:
    with pytest.raises(SessionNotFoundError, match="hermesctl sessions list"):
        store.get_session("nope")
    with pytest.raises(SessionNotFoundError):
        store.end_session("nope", EndReason.IDLE)
    with pytest.raises(SessionNotFoundError):
        store.load_transcript("nope")
    with pytest.raises(SessionNotFoundError):
        store.append_messages("nope", [user("hi")])


def test_a_batch_is_appended_in_one_transaction_and_counted(store: StoreInterface, clock: FakeClock) -> None:
    session = store.create_session("cli")
    clock.advance(10)
    ids = store.append_messages(
        session.id,
        [
            NewMessage(role=Role.USER, content="run ls", input_tokens=5),
            NewMessage(
                role=Role.ASSISTANT,
                content=None,
                tool_calls='[{"id": "c1", "name": "terminal"}, {"id": "c2", "name": "web_search"}]',
                output_tokens=7,
            ),
            NewMessage(role=Role.TOOL, content="a b c", tool_name="terminal", tool_call_id="c1"),
        ],
    )
    assert ids == sorted(ids)
    after = store.get_session(session.id)
    assert (after.message_count, after.tool_call_count) == (3, 2)
    assert (after.input_tokens, after.output_tokens) == (5, 7)
    assert after.last_active_at == clock.now
    transcript = store.load_transcript(session.id)
    assert [m.id for m in transcript] == ids
    assert [m.role for m in transcript] == ["user", "assistant", "tool"]
    assert transcript[2].tool_name == "terminal"


def test_a_bad_batch_appends_nothing(store: StoreInterface) -> None:
    session = store.create_session("cli")
    with pytest.raises(StoreError, match="tool_calls must be a JSON array"):
        store.append_messages(session.id, [user("ok"), NewMessage(role=Role.ASSISTANT, tool_calls="{broken")])
    assert store.load_transcript(session.id) == []
    assert store.get_session(session.id).message_count == 0


def test_an_ended_session_takes_no_more_messages(store: StoreInterface) -> None:
    session = store.create_session("cli")
    store.end_session(session.id, EndReason.NEW_SESSION)
    with pytest.raises(SessionClosedError, match="has ended"):
        store.append_messages(session.id, [user("late reply")])


def test_a_transaction_groups_several_writes_and_rolls_back_together(store: StoreInterface) -> None:
    session = store.create_session("cli")

    def failing_turn() -> None:
        with store.transaction():
            store.append_messages(session.id, [user("one")])
            store.set_route("agent:main:cli:dm", session.id)
            raise RuntimeError("turn failed")

    with pytest.raises(RuntimeError, match="turn failed"):
        failing_turn()
    assert store.load_transcript(session.id) == []
    assert store.get_route("agent:main:cli:dm") is None


def test_listing_filters_by_source_and_state_and_orders_by_activity(store: StoreInterface, clock: FakeClock) -> None:
    a = store.create_session("telegram")
    clock.advance(1)
    b = store.create_session("cli")
    clock.advance(1)
    c = store.create_session("telegram")
    clock.advance(1)
    store.append_messages(a.id, [user("bump")])
    store.end_session(c.id, EndReason.IDLE)
    assert [s.id for s in store.list_sessions()] == [a.id, c.id, b.id]
    assert [s.id for s in store.list_sessions(source="telegram")] == [a.id, c.id]
    assert [s.id for s in store.list_sessions(ended=True)] == [c.id]
    assert [s.id for s in store.list_sessions(ended=False)] == [a.id, b.id]
    assert [s.id for s in store.list_sessions(limit=1)] == [a.id]
    assert [s.id for s in store.list_sessions(order="started")] == [c.id, b.id, a.id]


def test_deleting_a_session_orphans_its_children_and_clears_its_search_rows(store: StoreInterface) -> None:
    parent = store.create_session("cli")
    store.append_messages(parent.id, [user("kubernetes deployment notes")])
    store.set_route("agent:main:cli:dm", parent.id)
    child = store.create_session("cli", parent_session_id=parent.id)
    assert store.fts_query("kubernetes").hits
    assert store.delete_session(parent.id)
    assert store.find_session(parent.id) is None
    assert store.get_session(child.id).parent_session_id is None
    assert store.get_route("agent:main:cli:dm") is None
    assert store.fts_query("kubernetes").hits == []
    assert store.stats().messages == 0
    assert not store.delete_session(parent.id)
    if isinstance(store, Store):  # FTS5's own check of its external-content index against the messages
        store._connection.execute("INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 1)")


def test_titles_are_sanitised_unique_and_clearable(store: StoreInterface) -> None:
    a = store.create_session("cli")
    b = store.create_session("cli")
    assert store.set_title(a.id, "  refactoring\u200b   auth\n") == "refactoring auth"
    with pytest.raises(TitleInUseError) as info:
        store.set_title(b.id, "refactoring auth")
    assert str(info.value) == f"Title 'refactoring auth' is already in use by session {a.id}"
    assert store.set_title(a.id, "refactoring auth") == "refactoring auth"  # its own title is no collision
    assert store.set_title(a.id, " \u200e ") is None
    assert store.get_session(a.id).title is None
    assert store.set_title(b.id, "refactoring auth") == "refactoring auth"
    with pytest.raises(TitleError, match="limit is 100"):
        store.set_title(b.id, "x" * 101)
    with pytest.raises(TitleInUseError):
        store.create_session("cli", title="refactoring  auth")


def test_a_title_is_claimed_only_by_an_untitled_session_and_only_while_no_session_holds_it(
    store: StoreInterface,
) -> None:
    a = store.create_session("cli")
    b = store.create_session("cli")
    assert store.claim_title(a.id, "  weekly\u200b  report\n") == "weekly report"  # sanitised as set_title does
    assert store.claim_title(b.id, "weekly report") is None  # held by a
    assert store.claim_title(a.id, "another") is None  # a has a title: a claim never replaces one
    assert store.claim_title("no-such-session", "free one") is None
    assert store.claim_title(b.id, " \u200e ") is None  # nothing left of it
    assert (store.get_session(a.id).title, store.get_session(b.id).title) == ("weekly report", None)
    with pytest.raises(TitleError, match="limit is 100"):
        store.claim_title(b.id, "x" * 101)
    assert store.claim_title(b.id, "weekly report (2)") == "weekly report (2)"


def test_lineage_titles_number_compression_children(store: StoreInterface) -> None:
    root = store.create_session("cli", title="my project")
    assert store.next_lineage_title("my project") == "my project #2"
    store.end_session(root.id, EndReason.COMPRESSION)
    two = store.create_session("cli", title=store.next_lineage_title("my project"), parent_session_id=root.id)
    assert store.next_lineage_title(two.title or "") == "my project #3"
    store.end_session(two.id, EndReason.COMPRESSION)
    three = store.create_session("cli", title="my project #3", parent_session_id=two.id)
    store.create_session("cli", title="my project plan")  # another title sharing the prefix
    assert store.resolve_session("my project").id == three.id
    assert store.resolve_session("my project #2").id == two.id
    assert store.next_lineage_title("my project") == "my project #4"


def test_references_resolve_by_id_then_unique_prefix_then_title(store: StoreInterface) -> None:
    a = store.create_session("cli", session_id="20261130_101500_a1b2c3d4", title="alpha")
    b = store.create_session("cli", session_id="20261130_101500_a1ffffff")
    store.create_session("cli", session_id="20261129_090000_00000000", title="20261130_1")
    assert store.resolve_session(a.id).id == a.id
    assert store.resolve_session("20261130_101500_a1b").id == a.id
    with pytest.raises(AmbiguousSessionError) as info:
        store.resolve_session("20261130_101500_a1")
    assert info.value.candidates == [a.id, b.id]
    assert a.id in str(info.value)
    assert b.id in str(info.value)
    # An id prefix wins over a title that happens to look like one.
    with pytest.raises(AmbiguousSessionError):
        store.resolve_session("20261130_1")
    assert store.resolve_session("alpha").id == a.id
    with pytest.raises(SessionNotFoundError, match="by id, id prefix or title"):
        store.resolve_session("beta")
    with pytest.raises(SessionNotFoundError):
        store.resolve_session("  ")


def test_prefix_resolution_is_not_fooled_by_like_wildcards(store: StoreInterface) -> None:
    store.create_session("cli", session_id="20261130_101500_abcdef")
    with pytest.raises(SessionNotFoundError):
        store.resolve_session("2026113__10")
    with pytest.raises(SessionNotFoundError):
        store.resolve_session("%")


def test_routes_bind_rebind_list_and_unbind(store: StoreInterface, clock: FakeClock) -> None:
    a = store.create_session("telegram")
    b = store.create_session("telegram")
    store.set_route("agent:main:telegram:dm:1", a.id)
    store.set_route("agent:main:cli:dm", a.id)
    assert store.get_route("agent:main:telegram:dm:1") == a.id
    store.set_route("agent:main:telegram:dm:1", b.id)
    assert store.get_route("agent:main:telegram:dm:1") == b.id
    assert store.routes_to(a.id) == ["agent:main:cli:dm"]
    assert store.repoint_routes(a.id, b.id) == 1
    assert store.routes_to(b.id) == ["agent:main:cli:dm", "agent:main:telegram:dm:1"]
    assert store.unbind_route("agent:main:cli:dm")
    assert not store.unbind_route("agent:main:cli:dm")
    with pytest.raises(SessionNotFoundError, match="no such session"):
        store.set_route("agent:main:x:dm", "missing")


def test_a_session_s_owner_comes_with_the_route_of_the_key_asked_about_in_one_read(store: StoreInterface) -> None:
    opened = store.create_session("api_server")
    other = store.create_session("api_server")
    store.set_route("key-a", other.id)
    owner = store.session_owner(opened.id)
    assert owner is not None
    record = store.get_session(opened.id)
    assert (owner.source, owner.scope_id, owner.user_id) == (record.source, record.scope_id, record.user_id)
    assert (owner.live, owner.route) == (True, None)
    with_route = store.session_owner(opened.id, "key-a")
    assert with_route is not None
    assert with_route.route == other.id
    unrouted = store.session_owner(opened.id, "key-b")
    assert unrouted is not None
    assert unrouted.route is None
    assert store.session_owner("no-such-session", "key-a") is None
    store.end_session(opened.id, "new_session")
    ended = store.session_owner(opened.id)
    assert ended is not None
    assert not ended.live


def test_stats_count_sessions_messages_and_bytes(store: StoreInterface) -> None:
    a = store.create_session("telegram")
    store.create_session("cli")
    store.create_session("telegram")
    store.append_messages(a.id, [user("one"), user("two")])
    store.end_session(a.id, EndReason.IDLE)
    stats = store.stats()
    assert (stats.sessions, stats.live_sessions, stats.messages) == (3, 2, 2)
    assert [(c.source, c.sessions, c.messages) for c in stats.by_source] == [
        ("telegram", 2, 2),
        ("cli", 1, 0),
    ]
    assert stats.database_bytes > 0
    assert stats.schema_version == store.schema_version() > 0


_texts = st.one_of(st.none(), st.text(max_size=300))


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batch=st.lists(
        st.tuples(st.sampled_from(list(Role)), _texts, st.one_of(st.none(), st.text(string.ascii_letters))),
        min_size=1,
        max_size=6,
    )
)
def test_appended_messages_load_back_unchanged(
    store: StoreInterface, batch: list[tuple[Role, str | None, str | None]]
) -> None:
    session = store.create_session("cli")
    messages = [NewMessage(role=r, content=c, tool_name=t) for r, c, t in batch]
    store.append_messages(session.id, messages)
    loaded = store.load_transcript(session.id)
    assert [(m.role, m.content, m.tool_name) for m in loaded] == [(r.value, c, t) for r, c, t in batch]


def test_a_unique_reference_names_exactly_one_session_or_lists_the_candidates(store: StoreInterface) -> None:
    """Destructive commands resolve with ``unique=True``: a title that only numbered variants hold is refused."""
    other = store.create_session("cli", title="Conversation about x #3")
    with pytest.raises(AmbiguousSessionError, match=r"matches 1 session: .*#3.*no session has exactly that title"):
        store.resolve_session("Conversation about x", unique=True)
    exact = store.create_session("cli", title="Conversation about x")
    assert store.resolve_session("Conversation about x", unique=True).id == exact.id
    assert store.resolve_session(other.id[:-2], unique=True).id == other.id  # ids and prefixes as before
    with pytest.raises(SessionNotFoundError, match="by id, id prefix or title"):
        store.resolve_session("nothing like it", unique=True)


def test_a_title_reaches_a_numbered_variant_only_along_its_own_lineage(store: StoreInterface) -> None:
    root = store.create_session("cli", title="x")
    store.end_session(root.id, EndReason.COMPRESSION)
    two = store.create_session("cli", title=store.next_lineage_title("x"), parent_session_id=root.id)
    store.end_session(two.id, EndReason.COMPRESSION)
    three = store.create_session("cli", title=store.next_lineage_title("x #2"), parent_session_id=two.id)
    unrelated = store.create_session("cli", title="x #5")  # a user's own title, or an import

    assert three.title == "x #3"
    assert store.resolve_session("x").id == three.id
    assert store.find_by_title("x") == store.get_session(three.id)
    assert store.resolve_session("x #2").id == two.id  # a numbered title names its own segment
    assert store.resolve_session("x #5").id == unrelated.id
    store.end_session(three.id, EndReason.NEW_SESSION)
    after = store.create_session("cli", title="x #6", parent_session_id=three.id)  # a new conversation
    assert store.resolve_session("x").id == three.id
    assert store.resolve_session("x #6").id == after.id


def test_a_title_only_unrelated_variants_hold_is_never_guessed(store: StoreInterface) -> None:
    """``sessions delete "Conversation about x"`` once offered (and with --yes deleted) ``"... #3"``: an unrelated
    session. No lookup, lenient or unique, lands on it from the bare title."""
    other = store.create_session("cli", title="Conversation about x #3")

    assert store.find_by_title("Conversation about x") is None
    for unique in (False, True):
        with pytest.raises(AmbiguousSessionError, match=rf"{other.id} \('Conversation about x #3'\)"):
            store.resolve_session("Conversation about x", unique=unique)


def test_a_title_resolves_to_the_newest_segment_the_caller_may_see(store: StoreInterface) -> None:
    mine = SessionSource(platform="cli", chat_id="mine")
    root = store.create_session(mine, title="plan")
    store.end_session(root.id, EndReason.COMPRESSION)
    two = store.create_session(mine, title="plan #2", parent_session_id=root.id)
    store.end_session(two.id, EndReason.COMPRESSION)
    store.create_session(SessionSource(platform="cli", chat_id="theirs"), title="plan #3", parent_session_id=two.id)

    assert store.resolve_session("plan", visible=SessionFilter(chat_id="mine")).id == two.id
    with pytest.raises(SessionNotFoundError):
        store.resolve_session("plan", visible=SessionFilter(chat_id="elsewhere"))
