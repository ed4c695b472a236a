"""The SearchReads contract, on every store's implementation (``store`` is parametrised, see tests/stores.py)."""

from __future__ import annotations

import pytest

from hermes_actors.search.rank import Ranker
from hermes_actors.store import EndReason, NewMessage, Role, SessionFilter, Store
from hermes_actors.store.search_query import And, Phrase, SearchQuery
from hermes_actors.store.search_reads import IndexRefusedError, SearchReads
from hermes_actors.testing import FakeClock

EVERYONE = SessionFilter()


@pytest.fixture
def reads(store: Store) -> SearchReads:
    return store.search_reads()


def session(store: Store, clock: FakeClock, *texts: str, parent: str | None = None) -> tuple[str, list[int]]:
    clock.advance(60)
    created = store.create_session("telegram", parent_session_id=parent)
    roles = [Role.USER if i % 2 == 0 else Role.ASSISTANT for i in range(len(texts))]
    return created.id, store.append_messages(
        created.id, [NewMessage(role=r, content=t) for r, t in zip(roles, texts, strict=True)]
    )


def ref_of(reads: SearchReads, session_id: str) -> int:
    row = reads.session(session_id, EVERYONE)
    assert row is not None
    return row[0]


def parsed(reads: SearchReads, text: str) -> SearchQuery:
    query = reads.parse_query(text)
    assert isinstance(query, SearchQuery), query
    return query


def test_a_query_is_parsed_into_phrases_of_index_tokens(reads: SearchReads) -> None:
    query = parsed(reads, 'Déploy* "Docker image"')
    assert query.root == And(
        (
            Phrase(terms=(("deploy", True),), initial=False, match="Déploy*"),
            Phrase(terms=(("docker", False), ("image", False)), initial=False, match='"Docker image"'),
        )
    )
    assert query.substrings is None
    assert parsed(reads, "会话").root == Phrase(terms=(("会", False), ("话", False)), initial=False, match="会话")
    assert parsed(reads, "会话记录").substrings == ("会话记录",)


@pytest.mark.parametrize("text", ["c++ docker:", "", "a\x00b", "x" * 1001, '"unclosed'])
def test_a_refused_query_gets_the_words_of_fts_query(store: Store, reads: SearchReads, text: str) -> None:
    refused = reads.parse_query(text)
    assert not isinstance(refused, SearchQuery)
    assert (refused.error, refused.suggestion) == (store.fts_query(text).error, store.fts_query(text).suggestion)


def test_match_pages_walk_the_index_by_keyset_and_leave_out_excluded_sessions(
    store: Store, clock: FakeClock, reads: SearchReads
) -> None:
    first, first_ids = session(store, clock, "kubernetes one", "nothing")
    second, second_ids = session(store, clock, "kubernetes two", "kubernetes three")
    query = parsed(reads, "kubernetes")

    def page(excluded: set[int], beyond: int | None, *, oldest_first: bool = False) -> list[int]:
        rows = reads.match_page(
            query,
            roles=[Role.USER.value, Role.ASSISTANT.value],
            scope=EVERYONE,
            ranked=False,
            oldest_first=oldest_first,
            excluded=excluded,
            beyond=beyond,
            size=2,
        )
        return [mid for mid, _, _ in rows]

    assert page(set(), None) == [second_ids[1], second_ids[0]]
    assert page(set(), second_ids[0]) == [first_ids[0]]
    assert page({ref_of(reads, second)}, None) == [first_ids[0]]
    assert page(set(), None, oldest_first=True) == [first_ids[0], second_ids[0]]
    assert first != second


def test_a_ranked_page_carries_the_rank_function_s_scores(store: Store, clock: FakeClock, reads: SearchReads) -> None:
    session(store, clock, "kubernetes kubernetes kubernetes", "kubernetes once among many other words here")
    ranker = reads.rank_function(Ranker)
    assert reads.rank_function(Ranker) is ranker  # one per connection
    ranker.prepare([None])
    rows = reads.match_page(
        parsed(reads, "kubernetes"),
        roles=[Role.USER.value, Role.ASSISTANT.value],
        scope=EVERYONE,
        ranked=True,
        oldest_first=False,
        excluded=set(),
        beyond=None,
        size=10,
    )
    scores = [score for _, score, _ in rows]
    assert all(isinstance(score, float) for score in scores)
    assert scores[1] is not None
    assert scores[0] is not None
    assert scores[1] > scores[0]


def test_what_the_index_refuses_raises_index_refused(reads: SearchReads) -> None:
    with pytest.raises(IndexRefusedError) as raised:
        reads.match_page(
            parsed(reads, "nosuchcolumn: word"),
            roles=[Role.USER.value],
            scope=EVERYONE,
            ranked=False,
            oldest_first=False,
            excluded=set(),
            beyond=None,
            size=10,
        )
    error = raised.value.refusal("nosuchcolumn: word").error
    assert error is not None
    assert error.startswith("the search index refused the query")
    with pytest.raises(IndexRefusedError):
        reads.phrase_sample("nosuchcolumn: word", 10)


def test_a_phrase_sample_counts_up_to_the_sample_and_names_the_oldest(
    store: Store, clock: FakeClock, reads: SearchReads
) -> None:
    _, message_ids = session(store, clock, "docker a", "docker b", "docker c", "other")
    assert reads.phrase_sample("docker", 2) == (2, message_ids[1])
    assert reads.phrase_sample("docker", 10) == (3, message_ids[0])
    assert reads.phrase_sample("absent", 10) == (0, 0)
    assert reads.newest_message_id() == message_ids[-1]


def test_the_messages_of_a_session_are_read_in_bounded_slices(
    store: Store, clock: FakeClock, reads: SearchReads
) -> None:
    sid, m = session(store, clock, *(f"message {i}" for i in range(10)))
    ref = ref_of(reads, sid)
    assert [row[0] for row in reads.first_messages(ref, 3)] == m[:3]
    assert [row[0] for row in reads.last_messages(ref, 3)] == m[-3:]
    assert [row[0] for row in reads.messages_before(ref, m[5], 2)] == m[3:5]
    assert [row[0] for row in reads.messages_from(ref, m[5], 2)] == m[5:7]
    assert [row[0] for row in reads.conversation_head(ref, m[5], 3)] == m[:3]
    assert [row[0] for row in reads.conversation_tail(ref, m[5], 3)] == m[-3:]
    assert (reads.count_messages(ref), reads.count_before(ref, m[5]), reads.count_after(ref, m[5])) == (10, 5, 4)
    assert reads.first_user_text(ref) == "message 0"
    assert (reads.message_session(m[2]), reads.message_content(m[2])) == (ref, "message 2")
    assert reads.message_session(m[-1] + 1) is None


def test_a_lineage_is_read_as_its_root_and_the_refs_of_its_members(
    store: Store, clock: FakeClock, reads: SearchReads
) -> None:
    root, _ = session(store, clock, "first")
    store.end_session(root, EndReason.COMPRESSION)
    child, _ = session(store, clock, "second", parent=root)
    other, _ = session(store, clock, "unrelated")
    assert reads.lineage_root(child) == root
    assert reads.lineage_root("no-such-session") is None
    assert reads.lineage_root_of_ref(ref_of(reads, child)) == root
    assert reads.lineage_members(root) == {ref_of(reads, root), ref_of(reads, child)}
    tips = reads.lineage_tips(10, oldest_first=False, skip={ref_of(reads, other)}, scope=EVERYONE)
    assert [row[1] for row in tips] == [child]
