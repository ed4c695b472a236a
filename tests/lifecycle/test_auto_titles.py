"""Automatic titles made unique never look like lineage numbering (``#N`` is for compression children only)."""

from __future__ import annotations

from hermes_actors.lifecycle.auto_titles import store_auto_title
from hermes_actors.store import EndReason, Store
from hermes_actors.titles import lineage_base


def test_a_taken_automatic_title_gets_a_number_that_no_lookup_reads_as_a_lineage(store: Store) -> None:
    root = store.create_session("telegram", title="Conversation about x")
    store.end_session(root.id, EndReason.COMPRESSION)
    child = store.create_session(
        "telegram", title=store.next_lineage_title("Conversation about x"), parent_session_id=root.id
    )
    other = store.create_session("telegram")
    third = store.create_session("telegram")

    assert store_auto_title(store, other.id, "Conversation about x") == "Conversation about x (2)"
    assert store_auto_title(store, third.id, "Conversation about x") == "Conversation about x (3)"

    assert store.resolve_session("Conversation about x").id == child.id
    assert store.next_lineage_title("Conversation about x #2") == "Conversation about x #3"
    assert lineage_base("Conversation about x (3)") == "Conversation about x (3)"
    assert store.resolve_session("Conversation about x (2)").id == other.id


def test_an_automatic_title_is_stored_only_on_an_untitled_session(store: Store) -> None:
    titled = store.create_session("telegram", title="by hand")
    assert store_auto_title(store, titled.id, "automatic") is None
    assert store_auto_title(store, "no-such-session", "automatic") is None
    assert store.get_session(titled.id).title == "by hand"
