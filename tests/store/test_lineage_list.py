"""``list_lineages``: one row per conversation, shown by the tip of its compression lineage."""

from __future__ import annotations

import pytest

from hermes_actors.routing import SessionSource
from hermes_actors.store import EndReason, NewMessage, Role, SessionFilter, Store, StoreInterface
from hermes_actors.store.records import LineageRow
from hermes_actors.testing import FakeClock


def start(
    store: StoreInterface,
    clock: FakeClock,
    *texts: str,
    parent: str | None = None,
    chat: str = "c1",
    source: str = "telegram",
) -> str:
    clock.advance(60)
    record = store.create_session(SessionSource(platform=source, chat_id=chat), parent_session_id=parent)
    if texts:
        store.append_messages(record.id, [NewMessage(role=Role.USER, content=t) for t in texts])
    return record.id


def compress(store: StoreInterface, clock: FakeClock, session_id: str, *texts: str, chat: str = "c1") -> str:
    store.end_session(session_id, EndReason.COMPRESSION)
    summary = NewMessage(role=Role.SYSTEM, content="[Summary of the conversation so far]\n...")
    child = start(store, clock, parent=session_id, chat=chat)
    store.append_messages(child, [summary, *(NewMessage(role=Role.USER, content=t) for t in texts)])
    return child


def by_tip(rows: list[LineageRow]) -> dict[str, LineageRow]:
    return {row.tip.id: row for row in rows}


def test_a_lineage_of_fifteen_segments_is_one_row_with_its_totals(store: StoreInterface, clock: FakeClock) -> None:
    chain = [start(store, clock, "how do I  deploy\nthe cluster?", "and then?")]
    for i in range(14):
        chain.append(compress(store, clock, chain[-1], f"step {i}"))
    alone = start(store, clock, "unrelated")

    page = store.list_lineages()

    assert page.total == 2
    assert [row.tip.id for row in page.rows] == [alone, chain[-1]]
    row = by_tip(page.rows)[chain[-1]]
    assert (row.root_id, row.members, row.compressions) == (chain[0], chain, 14)
    assert row.message_count == 2 + 14 * 2 == sum(store.get_session(s).message_count for s in chain)
    assert row.preview == "how do I deploy the cluster?"
    single = by_tip(page.rows)[alone]
    assert (single.root_id, single.members, single.compressions, single.message_count) == (alone, [alone], 0, 1)


def test_the_page_is_cut_by_limit_and_says_how_many_there_are(store: StoreInterface, clock: FakeClock) -> None:
    tips = []
    for i in range(5):
        root = start(store, clock, f"topic {i}")
        tips.append(compress(store, clock, root, "more") if i % 2 else root)

    page = store.list_lineages(limit=2)

    assert page.total == 5
    assert [row.tip.id for row in page.rows] == tips[::-1][:2]
    everything = store.list_lineages(limit=None)
    assert [row.tip.id for row in everything.rows] == tips[::-1]
    assert store.list_lineages(limit=0) == type(page)(rows=[], total=5)


def test_an_offset_skips_whole_lineages_and_segments_page_the_same_way(store: StoreInterface, clock: FakeClock) -> None:
    tips = []
    for i in range(5):
        root = start(store, clock, f"topic {i}")
        tips.append(compress(store, clock, root, "more") if i % 2 else root)

    assert [row.tip.id for row in store.list_lineages(limit=2, offset=2).rows] == tips[::-1][2:4]
    assert [row.tip.id for row in store.list_lineages(limit=None, offset=4).rows] == tips[:1]
    assert store.list_lineages(limit=2, offset=5) == type(store.list_lineages())(rows=[], total=5)
    segments = [r.id for r in store.list_sessions(limit=None)]
    assert [r.id for r in store.list_sessions(limit=3, offset=2)] == segments[2:5]
    with pytest.raises(ValueError, match="offset"):
        store.list_lineages(offset=-1)


def test_a_child_of_a_session_that_ended_otherwise_is_a_conversation_of_its_own(
    store: StoreInterface, clock: FakeClock
) -> None:
    first = start(store, clock, "first")
    store.end_session(first, EndReason.NEW_SESSION)
    second = start(store, clock, "second", parent=first)

    rows = by_tip(store.list_lineages().rows)

    assert set(rows) == {first, second}
    assert rows[second].members == [second]
    assert rows[second].preview == "second"


def test_ended_applies_to_the_tip(store: StoreInterface, clock: FakeClock) -> None:
    root = start(store, clock, "live conversation")
    tip = compress(store, clock, root, "still going")
    done = start(store, clock, "over")
    store.end_session(done, EndReason.IDLE)

    assert [row.tip.id for row in store.list_lineages(ended=False).rows] == [tip]
    assert [row.tip.id for row in store.list_lineages(ended=True).rows] == [done]
    assert store.list_lineages(ended=False).rows[0].members == [root, tip]


def test_another_principals_sessions_never_appear_nor_count(store: StoreInterface, clock: FakeClock) -> None:
    mine = start(store, clock, "my question", chat="mine")
    theirs = start(store, clock, "their secret", chat="theirs")
    their_tip = compress(store, clock, theirs, "more secrets", chat="theirs")
    # A continuation under another principal (corrupt or hostile data) does not reach into their sessions.
    my_root = start(store, clock, "my other question", chat="mine")
    store.end_session(my_root, EndReason.COMPRESSION)
    foreign = start(store, clock, "not yours", parent=my_root, chat="theirs")

    page = store.list_lineages(visible=SessionFilter(chat_id="mine"))

    assert page.total == 2
    rows = by_tip(page.rows)
    assert set(rows) == {mine, my_root}
    assert rows[my_root].members == [my_root]
    assert "their" not in repr(page)
    assert "not yours" not in repr(page)
    assert by_tip(store.list_lineages(visible=SessionFilter(chat_id="theirs")).rows)[their_tip].members == [
        theirs,
        their_tip,
    ]
    assert foreign in by_tip(store.list_lineages().rows)
    assert store.list_lineages(visible=SessionFilter(nothing=True)).total == 0


def test_source_filters_the_sessions_listed(store: StoreInterface, clock: FakeClock) -> None:
    cli = start(store, clock, "from the terminal", source="cli")
    start(store, clock, "from telegram")

    page = store.list_lineages(source="cli")

    assert (page.total, [row.tip.id for row in page.rows]) == (1, [cli])


def test_the_newest_child_of_a_compressed_session_continues_it_and_an_older_one_stands_alone(
    store: StoreInterface, clock: FakeClock
) -> None:
    parent = start(store, clock, "original")
    older = compress(store, clock, parent, "first try")
    newer = start(store, clock, "second try", parent=parent)

    rows = by_tip(store.list_lineages().rows)

    assert rows[newer].members == [parent, newer] == [store.lineage_root(newer), store.lineage_tip(parent)]
    assert rows[older].members == [older]


def test_the_preview_is_the_first_user_message_cut_and_on_one_line(store: StoreInterface, clock: FakeClock) -> None:
    root = start(store, clock)
    store.append_messages(
        root,
        [
            NewMessage(role=Role.SYSTEM, content="system text"),
            NewMessage(role=Role.USER, content="word " * 100 + "\x00json:[...]"),
        ],
    )
    untouched = start(store, clock)

    rows = by_tip(store.list_lineages(preview_chars=20).rows)

    preview = rows[root].preview
    assert preview is not None
    assert len(preview) == 20
    assert preview.endswith("…")
    assert "  " not in preview
    assert "json" not in preview
    assert rows[untouched].preview is None
    with pytest.raises(ValueError, match="limit must be 0 or more"):
        store.list_lineages(limit=-1)


def test_a_parent_cycle_does_not_hang_the_listing(sqlite_store: Store, clock: FakeClock) -> None:
    a = start(sqlite_store, clock, "a")
    b = compress(sqlite_store, clock, a, "b")
    sqlite_store.end_session(b, EndReason.COMPRESSION)
    sqlite_store._connection.execute("UPDATE sessions SET parent_session_id = ? WHERE id = ?", (b, a))
    c = start(sqlite_store, clock, "c")

    page = sqlite_store.list_lineages()

    assert [row.tip.id for row in page.rows] == [c]  # a and b continue each other: no tip to show them by


def test_find_sessions_keeps_the_order_given_and_leaves_out_unknown_ids(
    store: StoreInterface, clock: FakeClock
) -> None:
    made = [start(store, clock) for _ in range(3)]

    found = store.find_sessions([made[2], "nope", made[0], made[2]])

    assert [r.id for r in found] == [made[2], made[0]]
    many = [start(store, clock) for _ in range(600)]
    assert [r.id for r in store.find_sessions(many)] == many


def test_tips_keeps_only_the_lineages_named_by_their_tips(store: StoreInterface, clock: FakeClock) -> None:
    root = start(store, clock, "one")
    tip = compress(store, clock, root, "two")
    other = start(store, clock, "other")

    page = store.list_lineages(tips=[tip, root, "nope"])

    assert (page.total, [row.members for row in page.rows]) == (1, [[root, tip]])
    assert store.list_lineages(tips=[]).total == 0
    assert [row.tip.id for row in store.list_lineages(tips=[other, tip]).rows] == [other, tip]
