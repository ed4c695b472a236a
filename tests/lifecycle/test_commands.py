from __future__ import annotations

import pytest

from hermes_actors.lifecycle.commands import (
    Command,
    CommandName,
    choose_resume_target,
    list_resumable,
    list_sessions_text,
    parse_command,
    resume_listing_text,
)
from hermes_actors.routing import SessionSource
from hermes_actors.store import EndReason, NewMessage, Role, Store
from hermes_actors.testing import FakeClock

CASES = [
    ("/new", Command(name=CommandName.NEW)),
    ("/NEW payments refactor", Command(name=CommandName.NEW, argument="payments refactor")),
    ("/reset", Command(name=CommandName.RESET)),
    ("  /resume 2 ", Command(name=CommandName.RESUME, argument="2")),
    ("/resume@hermes_bot my project", Command(name=CommandName.RESUME, argument="my project")),
    ("/title", Command(name=CommandName.TITLE)),
    ("/title\nmulti word", Command(name=CommandName.TITLE, argument="multi word")),
    ("/compress", Command(name=CommandName.COMPRESS)),
    ("/sessions kubernetes", Command(name=CommandName.SESSIONS, argument="kubernetes")),
    ("/stop", Command(name=CommandName.STOP)),
    ("/sethome", Command(name=CommandName.SETHOME)),
    ("/handoff telegram", Command(name=CommandName.HANDOFF, argument="telegram")),
    ("hello /new", None),
    ("/weather Las Vegas", None),
    ("/newish", None),
    ("", None),
    ("/", None),
]


@pytest.mark.parametrize(("text", "expected"), CASES, ids=[repr(t) for t, _ in CASES])
def test_slash_commands_are_recognised_only_as_the_first_word(text: str, expected: Command | None) -> None:
    assert parse_command(text) == expected


def test_reset_triggers_are_configurable() -> None:
    triggers = ("/new", "/clear")
    assert parse_command("/clear", reset_triggers=triggers) == Command(name=CommandName.RESET)
    assert parse_command("/reset", reset_triggers=triggers) is None
    assert parse_command("/new", reset_triggers=triggers) == Command(name=CommandName.NEW)


# -- /sessions and /resume list conversations, not segments --------------------------------------------------------

ALICE = SessionSource(platform="telegram", chat_id="alice-chat", user_id="alice", account_id="bot")
MALLORY = SessionSource(platform="telegram", chat_id="mallory-chat", user_id="mallory", account_id="bot")


def conversation(store: Store, clock: FakeClock, source: SessionSource, title: str, segments: int) -> list[str]:
    """A conversation compressed ``segments - 1`` times, as the runtime leaves it: lineage titles, one user message
    per segment."""
    chain: list[str] = []
    for number in range(1, segments + 1):
        clock.advance(60)
        if chain:
            store.end_session(chain[-1], EndReason.COMPRESSION)
        name = title if not chain else store.next_lineage_title(store.get_session(chain[-1]).title or title)
        record = store.create_session(source, title=name, parent_session_id=chain[-1] if chain else None)
        store.append_messages(record.id, [NewMessage(role=Role.USER, content=f"{title} {number}")])
        chain.append(record.id)
    return chain


def test_sessions_lists_one_line_per_conversation_with_its_totals(store: Store, clock: FakeClock) -> None:
    plan = conversation(store, clock, ALICE, "plan", 15)
    other = conversation(store, clock, ALICE, "other", 1)
    conversation(store, clock, MALLORY, "secret", 3)

    text = list_sessions_text(store, ALICE, "")

    assert text.splitlines() == [
        f"other ({other[0]}, 1 message)",
        f"plan #15 ({plan[-1]}, 15 messages, 14 compressions)",
    ]


def test_sessions_search_names_each_conversation_once_by_its_newest_segment(store: Store, clock: FakeClock) -> None:
    plan = conversation(store, clock, ALICE, "plan", 3)

    text = list_sessions_text(store, ALICE, "plan")

    assert text.splitlines() == [f"plan #3 ({plan[-1]}, 3 messages, 2 compressions)"]


def test_resume_offers_each_conversation_once_and_resumes_its_tip(store: Store, clock: FakeClock) -> None:
    plan = conversation(store, clock, ALICE, "plan", 4)
    other = conversation(store, clock, ALICE, "other", 1)
    conversation(store, clock, MALLORY, "secret", 2)

    offered = list_resumable(store, ALICE)

    assert [s.id for s in offered] == [other[0], plan[-1]]
    assert resume_listing_text(offered).splitlines()[1:3] == [f"1. other ({other[0]})", f"2. plan #4 ({plan[-1]})"]
    listed = [s.id for s in offered]
    for argument in ("2", "plan", plan[0], plan[1][:-1], "plan #2"):
        choice = choose_resume_target(store, ALICE, argument, listed)
        assert choice.target is not None
        assert choice.target.id == plan[-1], argument
