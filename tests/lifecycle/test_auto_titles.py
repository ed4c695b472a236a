"""Automatic titles made unique never look like lineage numbering (``#N`` is for compression children only)."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from hermes_actors.errors import TitleInUseError
from hermes_actors.lifecycle.auto_titles import free_distinct_title, store_auto_title
from hermes_actors.store import EndReason, Store, StoreInterface
from hermes_actors.store.sql import tracing
from hermes_actors.titles import distinct_title, lineage_base


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


class _CountingLookups:
    """A store whose title lookups are counted."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.lookups = 0

    def title_holder(self, title: str) -> str | None:
        self.lookups += 1
        return self.store.title_holder(title)


def test_the_next_free_number_after_the_last_one_given_costs_two_lookups(store: Store) -> None:
    base = "Hello there, counted"
    for n in range(1, 41):  # "Hello there, counted", "... (2)", ... "... (40)"
        session = store.create_session("telegram")
        assert store_auto_title(store, session.id, base) == distinct_title(base, n)
    counting = _CountingLookups(store)
    assert free_distinct_title(cast(StoreInterface, counting), base) == f"{base} (41)"
    assert counting.lookups == 2


def test_a_number_remembered_from_another_store_is_checked_and_not_trusted(store: Store, tmp_path: Path) -> None:
    base = "Hello there, elsewhere"
    for n in range(1, 4):
        assert store_auto_title(store, store.create_session("telegram").id, base) == distinct_title(base, n)
    with Store.open(tmp_path / "other.db") as other:
        for _ in range(30):  # the number remembered is now 30, which this store does not hold
            store_auto_title(other, other.create_session("telegram").id, base)
    assert store_auto_title(store, store.create_session("telegram").id, base) == f"{base} (4)"


def test_a_free_title_is_one_statement_and_the_next_number_after_the_last_given_three(store: Store) -> None:
    base = "Hello there, in few statements"
    first = store.create_session("telegram")
    with tracing(store.sql) as trace:
        assert store_auto_title(store, first.id, base) == base
    assert len(trace.statements) == 1  # the claim: untitled, and the title free
    for n in range(2, 6):
        session = store.create_session("telegram")
        assert store_auto_title(store, session.id, base) == distinct_title(base, n)
    session = store.create_session("telegram")
    with tracing(store.sql) as trace:
        assert store_auto_title(store, session.id, base) == distinct_title(base, 6)
    # the bare title (taken), the last number this process gave (still held), the next one (claimed)
    assert len(trace.statements) == 3
    titled = store.create_session("telegram", title="by hand")
    assert store_auto_title(store, titled.id, base) is None
    assert store.get_session(titled.id).title == "by hand"


def test_a_number_taken_between_the_look_up_and_the_claim_is_refused_not_stored_elsewhere(store: Store) -> None:
    base = "Hello there, raced"
    store.create_session("telegram", title=base)
    session = store.create_session("telegram")

    class _Racing:
        """The store, with another session taking each number right after it is looked up free."""

        def __init__(self) -> None:
            self.taken: list[str] = []

        def __getattr__(self, name: str) -> object:
            return getattr(store, name)

        def title_holder(self, title: str) -> str | None:
            holder = store.title_holder(title)
            if holder is None and title != base:
                store.create_session("telegram", title=title)
                self.taken.append(title)
            return holder

    racing = _Racing()
    with pytest.raises(TitleInUseError):
        store_auto_title(cast(StoreInterface, racing), session.id, base)
    assert racing.taken
    assert store.get_session(session.id).title is None
