from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hermes_actors.search.discovery as search
from hermes_actors.cli import hermesctl
from hermes_actors.search import SearchHit, SearchMessage, SearchResult, session_search
from hermes_actors.store import EndReason, NewMessage, Role, Store, StoreInterface
from hermes_actors.testing import FakeClock

Script = Sequence[tuple[Role, str]]


def chat(*texts: str) -> list[tuple[Role, str]]:
    """Alternate user and assistant messages."""
    return [(Role.USER if i % 2 == 0 else Role.ASSISTANT, text) for i, text in enumerate(texts)]


def add(
    store: Store,
    clock: FakeClock,
    script: Script,
    *,
    source: str = "telegram",
    title: str | None = None,
    parent: str | None = None,
) -> tuple[str, list[int]]:
    """A session holding ``script``, started a minute after the previous one; its id and message ids."""
    clock.advance(60)
    session = store.create_session(source, title=title, parent_session_id=parent)
    ids = store.append_messages(session.id, [NewMessage(role=role, content=text) for role, text in script])
    return session.id, ids


def compress(store: Store, clock: FakeClock, session_id: str, script: Script) -> tuple[str, list[int]]:
    """End ``session_id`` by compression and continue it in a child holding ``script``."""
    store.end_session(session_id, EndReason.COMPRESSION)
    return add(store, clock, script, parent=session_id)


def hit_ids(result: SearchResult) -> list[str]:
    assert result.ok, result.error
    return [hit.session_id for hit in result.hits]


def ids(messages: Sequence[SearchMessage]) -> list[int]:
    return [m.id for m in messages]


def filler(count: int, word: str = "filler") -> list[tuple[Role, str]]:
    return chat(*(f"{word} message {i}" for i in range(count)))


# -- scroll ----------------------------------------------------------------------------------------------------


def test_scroll_returns_the_window_around_a_message_with_the_anchor_flagged(store: Store, clock: FakeClock) -> None:
    session, message_ids = add(store, clock, filler(30))
    result = session_search(store, session_id=session, around_message_id=message_ids[12], window=3)
    assert result.ok
    assert result.shape == "scroll"
    assert result.session is not None
    assert result.session.session_id == session
    assert ids(result.messages) == message_ids[9:16]
    assert [m.id for m in result.messages if m.anchor] == [message_ids[12]]
    assert (result.messages_before, result.messages_after) == (9, 14)
    assert result.messages[0].content == "filler message 9"  # scroll never cuts content


def test_scroll_defaults_to_five_messages_each_side_and_stops_at_the_session_edges(
    store: Store, clock: FakeClock
) -> None:
    session, message_ids = add(store, clock, filler(30))
    middle = session_search(store, session_id=session, around_message_id=message_ids[15])
    assert ids(middle.messages) == message_ids[10:21]
    first = session_search(store, session_id=session, around_message_id=message_ids[0])
    assert ids(first.messages) == message_ids[:6]
    assert (first.messages_before, first.messages_after) == (0, 24)
    last = session_search(store, session_id=session, around_message_id=message_ids[-1])
    assert ids(last.messages) == message_ids[-6:]
    assert (last.messages_before, last.messages_after) == (24, 0)


@pytest.mark.parametrize(("window", "expected"), [(0, 1), (-7, 1), (1, 1), (20, 20), (21, 20), (10**12, 20)])
def test_the_scroll_window_is_clamped_to_1_through_20(
    store: Store, clock: FakeClock, window: int, expected: int
) -> None:
    session, message_ids = add(store, clock, filler(60))
    result = session_search(store, session_id=session, around_message_id=message_ids[30], window=window)
    assert ids(result.messages) == message_ids[30 - expected : 31 + expected]


def test_scroll_of_an_unknown_session_is_an_error_naming_it(store: Store) -> None:
    result = session_search(store, session_id="20990101_000000_deadbeef", around_message_id=1)
    assert result.shape == "scroll"
    assert result.error is not None
    assert "'20990101_000000_deadbeef'" in result.error
    assert not result.messages


def test_scroll_around_a_message_of_another_session_is_an_error(store: Store, clock: FakeClock) -> None:
    session, _ = add(store, clock, filler(3))
    _, other_ids = add(store, clock, filler(3))
    for anchor in (other_ids[0], 10**9, -1, 2**70):
        result = session_search(store, session_id=session, around_message_id=anchor)
        assert result.error == (
            f"message {anchor} is not in session {session}; "
            "pass a message id from that session (a hit's match_message_id or one of its messages)"
        )


def test_around_message_id_without_session_id_is_an_error(store: Store) -> None:
    result = session_search(store, around_message_id=3)
    assert result.error == "around_message_id needs session_id: pass the session_id of the hit it came from"


# -- read ------------------------------------------------------------------------------------------------------


def test_read_returns_a_session_of_up_to_30_messages_whole(store: Store, clock: FakeClock) -> None:
    session, message_ids = add(store, clock, filler(30))
    result = session_search(store, session_id=session)
    assert result.ok
    assert result.shape == "read"
    assert ids(result.messages) == message_ids
    assert result.omitted == 0


def test_read_of_a_longer_session_gives_the_first_20_and_last_10_and_counts_the_rest(
    store: Store, clock: FakeClock
) -> None:
    session, message_ids = add(store, clock, filler(47))
    result = session_search(store, session_id=session)
    assert ids(result.messages) == message_ids[:20] + message_ids[-10:]
    assert result.omitted == 17
    assert result.session is not None
    assert result.session.message_count == 47


def test_read_resolves_an_id_prefix_or_title_and_names_an_unknown_id(store: Store, clock: FakeClock) -> None:
    session, _ = add(store, clock, filler(2), title="holiday plans")
    assert session_search(store, session_id="holiday plans").messages
    assert session_search(store, session_id=session[:-3]).session is not None
    missing = session_search(store, session_id="nope")
    assert missing.shape == "read"
    assert missing.error is not None
    assert "'nope'" in missing.error


def test_a_query_with_a_session_id_is_an_error_not_a_silent_choice(store: Store, clock: FakeClock) -> None:
    session, _ = add(store, clock, filler(2))
    result = session_search(store, session_id=session, query="filler")
    assert result.error is not None
    assert "do not go together" in result.error
    assert not result.messages


# -- browse ----------------------------------------------------------------------------------------------------


def test_browse_lists_lineage_tips_newest_first_and_skips_the_current_lineage(store: Store, clock: FakeClock) -> None:
    first, _ = add(store, clock, chat("about gardening"))
    root, _ = add(store, clock, chat("compressed talk"))
    tip, _ = compress(store, clock, root, chat("continued talk"))
    current, _ = add(store, clock, chat("the caller"))
    result = session_search(store, limit=10, current_session_id=current)
    assert result.shape == "browse"
    assert [s.session_id for s in result.sessions] == [tip, first]
    assert result.sessions[0].preview == "continued talk"
    assert [s.session_id for s in session_search(store, limit=10, sort="oldest").sessions] == [first, tip, current]


def test_browse_takes_the_limit_clamped_and_a_source_filter(store: Store, clock: FakeClock) -> None:
    made = [add(store, clock, chat(f"talk {i}"), source="slack" if i % 2 else "telegram")[0] for i in range(14)]
    assert len(session_search(store).sessions) == 3
    assert len(session_search(store, limit=0).sessions) == 1
    assert len(session_search(store, limit=1000).sessions) == 10
    slack = session_search(store, limit=10, source="slack").sessions
    assert [s.session_id for s in slack] == made[13::-2][:10]


# -- discovery -------------------------------------------------------------------------------------------------


def test_a_discovery_hit_carries_the_session_the_snippet_the_window_and_the_counts(
    store: Store, clock: FakeClock
) -> None:
    texts = [f"line {i}" for i in range(20)]
    texts[11] = "we deployed the kubernetes cluster on friday"
    session, message_ids = add(store, clock, chat(*texts), source="slack", title="infra work")
    result = session_search(store, query="kubernetes")
    assert result.shape == "discovery"
    (hit,) = result.hits
    record = store.get_session(session)
    assert (hit.session_id, hit.title, hit.source) == (session, "infra work", "slack")
    assert (hit.when, hit.last_active_at) == (record.started_at, record.last_active_at)
    assert (hit.matched, hit.match_message_id, hit.role) == ("message", message_ids[11], "assistant")
    assert ">>>kubernetes<<<" in hit.snippet
    assert ids(hit.messages) == message_ids[6:17]
    assert [m.id for m in hit.messages if m.anchor] == [message_ids[11]]
    assert ids(hit.bookend_start) == message_ids[:3]
    assert ids(hit.bookend_end) == message_ids[17:]
    assert (hit.messages_before, hit.messages_after) == (6, 3)


def test_results_encode_to_json_and_decode_back(store: Store, clock: FakeClock) -> None:
    add(store, clock, chat("kubernetes again", "sure"))
    result = session_search(store, query="kubernetes")
    decoded = msgspec.json.decode(msgspec.json.encode(result), type=SearchResult)
    assert decoded == result
    assert "error" not in msgspec.json.decode(msgspec.json.encode(result))  # defaults are left out


def test_discovery_reports_one_hit_per_lineage_and_names_its_root(store: Store, clock: FakeClock) -> None:
    root, _ = add(store, clock, chat("kubernetes in the first part"))
    middle, _ = compress(store, clock, root, chat("nothing here"))
    tip, tip_ids = compress(store, clock, middle, chat("kubernetes again in the last part"))
    alone, _ = add(store, clock, chat("a kubernetes question elsewhere"))
    result = session_search(store, query="kubernetes", sort="newest", limit=10)
    assert hit_ids(result) == [alone, tip]
    assert result.hits[1].lineage_root == root
    assert result.hits[1].match_message_id == tip_ids[0]
    assert result.hits[0].lineage_root is None
    oldest = session_search(store, query="kubernetes", sort="oldest", limit=10)
    assert hit_ids(oldest) == [root, alone]


def test_discovery_skips_the_whole_lineage_of_the_current_session(store: Store, clock: FakeClock) -> None:
    root, _ = add(store, clock, chat("kubernetes in the first part"))
    tip, _ = compress(store, clock, root, chat("kubernetes in the last part"))
    alone, _ = add(store, clock, chat("a kubernetes question elsewhere"))
    for current in (root, tip):
        assert hit_ids(session_search(store, query="kubernetes", current_session_id=current, limit=10)) == [alone]
    assert hit_ids(session_search(store, query="kubernetes", current_session_id="not-stored-yet", limit=10)) == [
        alone,
        tip,
    ]


def test_title_matches_come_first_and_count_once_per_lineage(store: Store, clock: FakeClock) -> None:
    by_title, _ = add(store, clock, chat("nothing relevant", "really"), title="Kubernetes upgrade")
    by_text, _ = add(store, clock, chat("how do I upgrade kubernetes?"))
    both, _ = add(store, clock, chat("kubernetes here too"), title="more kubernetes")
    result = session_search(store, query="kubernetes", limit=10)
    assert hit_ids(result) == [both, by_title, by_text]
    assert [h.matched for h in result.hits] == ["title", "title", "message"]
    assert result.hits[1].snippet == ">>>Kubernetes<<< upgrade"
    assert result.hits[1].match_message_id is None
    assert [m.content for m in result.hits[1].messages] == ["nothing relevant", "really"]


def test_title_matching_follows_the_query_syntax(store: Store, clock: FakeClock) -> None:
    add(store, clock, chat("x"), title="Kubernetes upgrade plan")
    assert session_search(store, query="kube*").hits[0].snippet == ">>>Kubernetes<<< upgrade plan"
    assert session_search(store, query='"upgrade plan"').hits[0].matched == "title"
    assert not session_search(store, query='"plan upgrade"').hits
    assert not session_search(store, query="kubernetes NOT plan").hits
    assert session_search(store, query="kubernetes OR nothing").hits[0].matched == "title"
    assert not session_search(store, query="kube").hits  # a word, not a substring


def test_relevance_ranks_the_better_match_first_newest_and_oldest_by_time(store: Store, clock: FakeClock) -> None:
    strong, _ = add(store, clock, chat("docker docker docker compose with docker"))
    old_weak, _ = add(store, clock, chat("we could use docker for this, among a great many other things to try"))
    new_weak, _ = add(store, clock, chat("maybe docker would help here, among a great many other things to try"))
    assert hit_ids(session_search(store, query="docker")) == [strong, new_weak, old_weak]
    assert hit_ids(session_search(store, query="docker", sort="newest")) == [new_weak, old_weak, strong]
    assert hit_ids(session_search(store, query="docker", sort="oldest")) == [strong, old_weak, new_weak]


def test_role_filter_changes_which_messages_are_searched(store: Store, clock: FakeClock) -> None:
    session, _ = add(store, clock, [(Role.USER, "check the disk"), (Role.TOOL, "sda1 usage 97 percent")])
    assert not session_search(store, query="sda1").hits
    assert hit_ids(session_search(store, query="sda1", role_filter=["tool"])) == [session]
    assert not session_search(store, query="disk", role_filter=["assistant"]).hits
    bad = session_search(store, query="disk", role_filter=["robot"])
    assert bad.error == "role_filter has 'robot'; roles are system, user, assistant, tool"


def test_role_filter_also_takes_the_comma_separated_string_of_the_reference_tool(
    store: Store, clock: FakeClock
) -> None:
    session, _ = add(store, clock, [(Role.USER, "check the disk"), (Role.TOOL, "sda1 usage 97 percent")])
    assert hit_ids(session_search(store, query="sda1", role_filter="user,assistant,tool")) == [session]
    assert hit_ids(session_search(store, query="sda1", role_filter=" tool ")) == [session]
    assert not session_search(store, query="sda1", role_filter="user, assistant").hits
    bad = session_search(store, query="disk", role_filter="user,robot")
    assert bad.error == "role_filter has 'robot'; roles are system, user, assistant, tool"


def test_a_source_filter_limits_discovery_to_one_platform(store: Store, clock: FakeClock) -> None:
    add(store, clock, chat("kubernetes on telegram"), source="telegram")
    on_slack, _ = add(store, clock, chat("kubernetes on slack"), source="slack", title="kubernetes slack")
    assert hit_ids(session_search(store, query="kubernetes", source="slack", limit=10)) == [on_slack]


@pytest.mark.parametrize(("limit", "expected"), [(None, 3), (0, 1), (-4, 1), (2, 2), (10, 10), (10**9, 10)])
def test_the_discovery_limit_defaults_to_3_and_is_clamped_to_1_through_10(
    store: Store, clock: FakeClock, limit: int | None, expected: int
) -> None:
    for i in range(12):
        add(store, clock, chat(f"kubernetes note {i}"))
    result = (
        session_search(store, query="kubernetes")
        if limit is None
        else session_search(store, query="kubernetes", limit=limit)
    )
    assert len(result.hits) == expected


@pytest.mark.parametrize(
    ("query", "marked"),
    [("库", ">>>库<<<"), ("数据", ">>>数据<<<"), ("数据库表", ">>>数据库表<<<"), ("検索", ">>>検索<<<")],
)
def test_cjk_queries_of_one_two_and_four_characters_find_their_message(
    store: Store, clock: FakeClock, query: str, marked: str
) -> None:
    add(store, clock, chat("完全无关的内容"))
    session, message_ids = add(store, clock, chat("我们把数据库表建好了", "全文検索も動く"))
    result = session_search(store, query=query)
    assert hit_ids(result) == [session]
    assert result.hits[0].match_message_id in message_ids
    assert marked in "".join(result.hits[0].snippet.split())


MALFORMED = [
    '"unbalanced',
    "unbalanced)",
    "(docker",
    "((docker)",
    "AND",
    "OR",
    "NOT",
    "docker AND",
    "OR docker",
    "NOT docker",
    "docker NOT",
    ":",
    "docker:",
    "title:docker",
    "{a b}: c",
    "!!!",
    "...",
    "?",
    "*",
    "c++",
    "-docker",
    "^",
    "NEAR(",
    "docker +",
    "dock\x00er",
    "x" * 5000,
    "docker " * 800,
]


@pytest.mark.slow
@pytest.mark.parametrize("query", MALFORMED)
def test_a_malformed_query_is_an_error_envelope_not_an_exception(store: Store, clock: FakeClock, query: str) -> None:
    add(store, clock, chat("docker compose up", "c d e"), title="docker notes")
    result = session_search(store, query=query)
    assert result.shape == "discovery"
    assert result.error, f"{query[:40]!r} gave no error"
    assert not result.hits


def test_malformed_queries_say_what_is_wrong_and_suggest_a_literal_search(store: Store) -> None:
    assert session_search(store, query="c++").error == (
        "the query is not valid search syntax: expected a search term at character 3; "
        "quote words to search them literally"
    )
    assert session_search(store, query="c++").suggestion == '"c++"'
    assert session_search(store, query="dock\x00er").error == "the query contains a NUL character; remove it"
    long = session_search(store, query="x" * 5000)
    assert long.error == "the query is 5000 characters long; the limit is 1000, so use fewer words"
    assert long.query is not None
    assert len(long.query) < 200
    column = session_search(store, query="title:docker")
    assert column.error is not None
    assert "column 'title'" in column.error
    assert column.suggestion == '"title:docker"'


def test_a_query_of_only_punctuation_is_an_error_rather_than_an_empty_answer(store: Store, clock: FakeClock) -> None:
    add(store, clock, chat("!!! ??? ..."))
    result = session_search(store, query='"!!! ???"')
    assert result.error == ("the query has no words to search for (only punctuation or spaces); give at least one word")


def test_a_bad_sort_or_a_non_matching_query_is_clear(store: Store, clock: FakeClock) -> None:
    add(store, clock, chat("docker"))
    bad = session_search(store, query="docker", sort="sideways")  # type: ignore[arg-type]
    assert bad.error == "sort must be one of relevance, newest, oldest, not 'sideways'"
    nothing = session_search(store, query="zebra")
    assert nothing.ok
    assert nothing.hits == []


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(query=st.text(alphabet=st.sampled_from(list("ab中文 \"()*:^+-{}NOTANDOR\x00\\'.")), max_size=40))
def test_no_query_makes_discovery_raise(store: Store, query: str) -> None:
    result = session_search(store, query=query)
    assert result.shape in ("discovery", "browse")
    assert result.ok or result.error


# -- bookends never overlap the window (hypothesis over lengths, anchors and windows) ----------------------------


@pytest.fixture(scope="module")
def ladder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, dict[int, list[int]]]]:
    """Sessions of 1 to 45 messages; message ``i`` of the session of length ``n`` says ``wn_i``; every third
    message is a tool result and every seventh an assistant tool call without text."""
    path: Path = tmp_path_factory.mktemp("ladder") / "state.db"
    with Store.open(path) as store:
        layout: dict[int, list[int]] = {}
        for length in range(1, 46):
            session = store.create_session("cli")
            messages = [
                NewMessage(role=Role.ASSISTANT, content=None, tool_calls="[]")
                if i % 7 == 6
                else NewMessage(role=Role.TOOL if i % 3 == 2 else Role.USER, content=f"w{length}x{i}")
                for i in range(length)
            ]
            layout[length] = store.append_messages(session.id, messages)
        yield store, layout


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_bookends_never_overlap_the_window(ladder: tuple[Store, dict[int, list[int]]], data: st.DataObject) -> None:
    store, layout = ladder
    length = data.draw(st.integers(1, 45), label="length")
    message_ids = layout[length]
    index = data.draw(st.sampled_from([i for i in range(length) if i % 7 != 6]), label="anchor")
    span = data.draw(st.integers(1, 8), label="window")
    result = session_search(store, query=f"w{length}x{index}", role_filter=["user", "tool"], window=span)
    (hit,) = result.hits
    assert_bookends(hit, message_ids, index, span, store)


def assert_bookends(hit: SearchHit, message_ids: list[int], index: int, span: int, store: Store) -> None:
    window = ids(hit.messages)
    assert window == message_ids[max(0, index - span) : index + span + 1]
    assert [m.id for m in hit.messages if m.anchor] == [message_ids[index]]
    kept = {m.id for m in store.load_transcript(hit.session_id) if m.role in ("user", "assistant") and m.content}
    before = [i for i in message_ids if i < window[0] and i in kept]
    after = [i for i in message_ids if i > window[-1] and i in kept]
    assert ids(hit.bookend_start) == before[:3]
    assert ids(hit.bookend_end) == after[-3:]
    assert not set(ids(hit.bookend_start) + ids(hit.bookend_end)) & set(window)
    assert hit.messages_before == message_ids.index(window[0])
    assert hit.messages_after == len(message_ids) - 1 - message_ids.index(window[-1])


# -- relevance -------------------------------------------------------------------------------------------------


def scatter(store: Store, clock: FakeClock) -> list[str]:
    """Forty one-message sessions of distinct lengths with alpha, beta and gamma sprinkled in; their ids."""
    rng = random.Random(7)
    filler_words = ["lorem", "ipsum", "dolor", "sit", "amet", "the", "of", "and"]
    created = []
    for index in range(40):
        words = [rng.choice(filler_words) for _ in range(6 + index)]
        for term, chance in (("alpha", 0.5), ("beta", 0.3), ("gamma", 0.2)):
            for _ in range(rng.randint(1, 3) if rng.random() < chance else 0):
                words.insert(rng.randrange(len(words) + 1), term)
        created.append(add(store, clock, [(Role.USER, " ".join(words))])[0])
    return created


@pytest.fixture
def scattered(store: Store, clock: FakeClock) -> list[str]:
    return scatter(store, clock)


def fts5_order(store: Store, query: str) -> list[str]:
    """The session ids of the best ten matches of ``query`` by FTS5's own bm25 on the SQLite ``store``."""
    return [
        str(sid)
        for (sid,) in store._connection.execute(
            "SELECT s.id FROM messages_fts JOIN messages AS m ON m.id = messages_fts.rowid "
            "JOIN sessions AS s ON s.ref = m.session_ref WHERE messages_fts MATCH ? ORDER BY rank LIMIT 10",
            (query,),
        )
    ]


@pytest.mark.parametrize("query", ["alpha", "alpha OR beta", "alpha beta", '"alpha beta" OR gamma', "beta NOT gamma"])
def test_relevance_orders_sessions_as_fts5_bm25_does(
    store: StoreInterface, scattered: list[str], query: str, db_path: Path
) -> None:
    if isinstance(store, Store):
        expected = fts5_order(store, query)
    else:  # the same sessions in a SQLite twin give FTS5's order, by position
        with Store.open(db_path, clock=FakeClock()) as twin:
            position = {sid: i for i, sid in enumerate(scatter(twin, FakeClock()))}
            expected = [scattered[position[sid]] for sid in fts5_order(twin, query)]
    assert expected
    assert hit_ids(session_search(store, query=query, limit=10)) == expected


@pytest.mark.parametrize("sample", [500, 2])
def test_a_word_in_most_messages_weighs_less_than_a_rare_one(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, sample: int
) -> None:
    # With DF_SAMPLE = 2 the frequency of "the" is extrapolated from its newest two matches, not counted.
    monkeypatch.setattr(search, "DF_SAMPLE", sample)
    wordy, _ = add(store, clock, chat("the the the the the the cat sat on the mat"))
    rare, _ = add(store, clock, chat("kubernetes pod restarted twice during a night shift"))
    for i in range(6):
        add(store, clock, chat(f"the weather is fine {i}"))
    assert hit_ids(session_search(store, query="kubernetes OR the"))[:2] == [rare, wordy]
    assert hit_ids(session_search(store, query="the"))[0] == wordy


def test_relevance_pages_past_a_full_window_and_says_it_was_bounded(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search, "RELEVANCE_WINDOW", 2)
    busy, _ = add(store, clock, chat("kubernetes one", "kubernetes two", "kubernetes three"))
    quiet, _ = add(store, clock, chat("nothing", "at all"))
    older, _ = add(store, clock, chat("kubernetes in another session"))
    store.append_messages(busy, [NewMessage(role=Role.USER, content="kubernetes four")])
    result = session_search(store, query="kubernetes", limit=10)
    assert hit_ids(result) == [busy, older]
    assert result.note is not None
    assert result.note.startswith("more than 2 messages matched: relevance ranked the newest 2 (older ones only")
    assert quiet not in hit_ids(result)


def test_newest_skips_the_rest_of_a_session_it_already_reported(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search, "_FIRST_PAGE", 2)
    older, _ = add(store, clock, chat("kubernetes long ago"))
    busy, busy_ids = add(store, clock, chat(*(f"kubernetes note {i}" for i in range(12))))
    result = session_search(store, query="kubernetes", sort="newest", limit=5)
    assert hit_ids(result) == [busy, older]
    assert result.hits[0].match_message_id == busy_ids[-1]
    assert result.note is None


def test_a_snippet_is_a_marked_excerpt_of_a_long_message(store: Store, clock: FakeClock) -> None:
    words = [f"word{i}" for i in range(60)]
    words[30:32] = ["docker", "image"]
    add(store, clock, chat(" ".join(words)))
    (hit,) = session_search(store, query='"docker image"').hits
    expected = " ".join(["…word26", *words[27:30], ">>>docker", "image<<<", *words[32:41], "word41…"])
    assert hit.snippet == expected
    assert hit.messages[0].truncated
    assert hit.messages[0].content is not None
    assert len(hit.messages[0].content) == search.WINDOW_CHARS


def test_cjk_substrings_of_three_or_more_characters_rank_newest_first(store: Store, clock: FakeClock) -> None:
    old, _ = add(store, clock, chat("数据库表数据库表数据库表"))
    new, _ = add(store, clock, chat("新的数据库表"))
    assert hit_ids(session_search(store, query="数据库表")) == [new, old]
    assert hit_ids(session_search(store, query="数据库表", sort="oldest")) == [old, new]


# -- hermesctl sessions search -----------------------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def ctl(home: Path, *args: str) -> Result:
    return CliRunner().invoke(hermesctl.main, ["sessions", "search", *args, "--home", str(home)])


@pytest.fixture
def filled(home: Path) -> dict[str, str]:
    home.mkdir()
    clock = FakeClock()
    with Store.open(home / "state.db", clock=clock) as store:
        return {
            "tg": add(store, clock, chat("the kubernetes cluster is down", "restart it"), source="telegram")[0],
            "slack": add(store, clock, chat("kubernetes upgrade tonight"), source="slack", title="k8s")[0],
            "tool": add(store, clock, [(Role.USER, "check"), (Role.TOOL, "kubernetes: 3 pods")], source="cli")[0],
        }


def test_the_command_prints_one_line_per_conversation_and_the_snippet(home: Path, filled: dict[str, str]) -> None:
    result = ctl(home, "kubernetes")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith(f'{filled["slack"]}  "k8s"  slack  ')
    assert lines[0].endswith("(#3 user)")
    assert lines[1] == "    >>>kubernetes<<< upgrade tonight"
    assert lines[2].startswith(f"{filled['tg']}  telegram  ")
    assert len(lines) == 4


def test_the_command_takes_sort_role_source_and_limit(home: Path, filled: dict[str, str]) -> None:
    oldest = ctl(home, "kubernetes", "--sort", "oldest", "--limit", "1")
    assert oldest.output.splitlines()[0].startswith(filled["tg"])
    assert len(oldest.output.splitlines()) == 2
    tools = ctl(home, "kubernetes", "--role", "tool")
    assert tools.output.splitlines()[0].startswith(filled["tool"])
    assert ctl(home, "kubernetes", "--source", "slack").output.count("\n") == 2
    assert ctl(home, "zebra").output == "no matches\n"
    assert ctl(home, "kubernetes", "--limit", "11").exit_code == 2


def test_the_command_prints_json_and_exits_1_on_a_malformed_query(home: Path, filled: dict[str, str]) -> None:
    found = json.loads(ctl(home, "kubernetes", "--json").stdout)
    assert found["shape"] == "discovery"
    assert [h["session_id"] for h in found["hits"]] == [filled["slack"], filled["tg"]]
    assert found["hits"][0]["messages"]
    bad = ctl(home, '"kubernetes', "--json")
    assert bad.exit_code == 1
    assert json.loads(bad.stdout)["error"].startswith("the query is not valid search syntax")
    blank = ctl(home, "  ")
    assert blank.exit_code == 1
    assert blank.output == "Error: the query is empty; give at least one word (list sessions with 'sessions list')\n"


def test_the_command_help_shows_examples(home: Path) -> None:
    result = CliRunner().invoke(hermesctl.main, ["sessions", "search", "--help"])
    assert result.exit_code == 0
    assert "Examples:" in result.output
    assert "hermesctl sessions search 'deploy* NOT staging' --limit 3" in result.output
