"""Who may title a session, and with what: ``#N`` is for compression lineages (SPEC section 9), and ``/title``
is a principal-checked command, also in a shared chat that leads to someone else's session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_actors.errors import TitleError
from hermes_actors.lifecycle.auto_titles import store_auto_title
from hermes_actors.lifecycle.handlers import NOT_YOURS_TO_TITLE
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.store import EndReason, Store
from hermes_actors.testing import FakePlatform, FakeThreadedPlatform, open_fake_gateway
from hermes_actors.titles import check_chosen_title, unnumbered_title

KEY = "agent:main:fake:dm:chat-1"
RESERVED = (
    "Title not changed: 'Project Alpha #2' ends in ' #2', which is kept for the sessions a compression continues a "
    "conversation in ('Project Alpha', 'Project Alpha #2', ...); choose another title, such as 'Project Alpha (2)'"
)
LONG = "the migration plan needs another careful look " * 4


@pytest.fixture
def chat(db_path: Path) -> Iterator[tuple[Gateway, FakePlatform]]:
    with open_fake_gateway(db_path, protected_recent_messages=2, auto_titles=False) as opened:
        yield opened


def say(fake: FakePlatform, text: str, **fields: str | None) -> str:
    fake.push(text, **fields)
    return fake.pop().text


def test_a_title_ending_in_a_lineage_number_is_refused_and_the_real_lineage_keeps_its_number(
    chat: tuple[Gateway, FakePlatform],
) -> None:
    gateway, fake = chat
    say(fake, "/title Project Alpha")
    for i in range(3):
        say(fake, f"step {i}: {LONG}")
    say(fake, "unrelated", chat_id="chat-2")
    assert say(fake, "/title Project Alpha #2", chat_id="chat-2") == RESERVED
    assert say(fake, "/compress") == "Compressed 6 messages; the conversation continues as Project Alpha #2."
    assert gateway.wait_idle()
    with gateway.read() as store:
        other = gateway.session_for("agent:main:fake:dm:chat-2")
        assert other is not None
        assert store.get_session(other).title is None


def test_a_compression_child_may_take_its_own_lineage_title_back(chat: tuple[Gateway, FakePlatform]) -> None:
    _, fake = chat
    say(fake, "/title project")
    for i in range(3):
        say(fake, f"step {i}: {LONG}")
    assert say(fake, "/compress").endswith("continues as project #2.")
    assert say(fake, "/title project #2") == "Title set to 'project #2'."
    assert say(fake, "/title notes") == "Title set to 'notes'."
    assert say(fake, "/title project #2") == "Title set to 'project #2'."  # the number its parent gives it
    assert say(fake, "/title project #3").startswith("Title not changed: 'project #3' ends in ' #3'")


def test_new_and_title_before_the_first_message_refuse_a_lineage_number(chat: tuple[Gateway, FakePlatform]) -> None:
    gateway, fake = chat
    assert say(fake, "/title Sprint #4") == (
        "The title 'Sprint #4' ends in ' #4', which is kept for the sessions a compression continues a conversation "
        "in ('Sprint', 'Sprint #2', ...); choose another title, such as 'Sprint (4)', so it was not applied."
    )
    say(fake, "hello")
    assert say(fake, "/new Sprint #4").startswith("Started a new session. The title 'Sprint #4' ends in ' #4'")
    say(fake, "hello again")
    assert gateway.wait_idle()
    with gateway.read() as store:
        assert store.title_holder("Sprint #4") is None


def test_a_rename_refuses_a_lineage_number_and_an_automatic_title_writes_it_apart(store: Store) -> None:
    record = store.create_session("cli", title="plain")
    with pytest.raises(TitleError, match=r"'Bug #42' ends in ' #42'"):
        store.set_title(record.id, "Bug #42")
    assert store.get_session(record.id).title == "plain"
    untitled = store.create_session("cli")
    assert store_auto_title(store, untitled.id, "Fix issue #42") == "Fix issue (#42)"


def test_a_session_keeps_its_own_lineage_title_when_renamed_to_it(store: Store) -> None:
    parent = store.create_session("cli", title="report")
    store.end_session(parent.id, EndReason.COMPRESSION)
    child = store.create_session("cli", title="report #2", parent_session_id=parent.id)
    assert store.set_title(child.id, "report #2") == "report #2"
    assert store.set_title(child.id, None) is None
    assert store.set_title(child.id, "report #2") == "report #2"
    branch = store.create_session("cli", parent_session_id=child.id)  # not a compression child: no number
    with pytest.raises(TitleError):
        store.set_title(branch.id, "report #3")


def test_the_lineage_suffix_rule_and_its_automatic_spelling() -> None:
    check_chosen_title("Agent 007")
    check_chosen_title("Issue #0")  # not a lineage number
    check_chosen_title("x #2", own=["x #2"])
    check_chosen_title(None)
    with pytest.raises(TitleError):
        check_chosen_title("x #2")
    assert unnumbered_title("Fix issue #42") == "Fix issue (#42)"
    assert unnumbered_title("Fix issue") == "Fix issue"
    assert len(unnumbered_title("z" * 96 + " #12")) == 100


def test_in_a_handed_off_thread_only_the_owner_may_title_the_session(db_path: Path) -> None:
    cli = FakePlatform("cli")
    telegram = FakeThreadedPlatform("telegram")
    gateway = Gateway(db_path, senders=[cli, telegram])
    cli.attach(gateway)
    telegram.attach(gateway)
    try:
        say(cli, "/title auth refactor", chat_id="terminal")
        say(cli, "let us refactor auth", chat_id="terminal")
        assert say(telegram, "/sethome", chat_id="-100200", chat_type="group", user_id="alice").startswith("This chat")
        cli.push("/handoff telegram", chat_id="terminal")
        assert telegram.pop().thread_id == "thread-1"
        cli.pop()
        thread = {"chat_id": "-100200", "chat_type": "group", "thread_id": "thread-1"}
        assert say(telegram, "/title bob's now", user_id="bob", **thread) == NOT_YOURS_TO_TITLE
        assert say(telegram, "/title", user_id="bob", **thread) == NOT_YOURS_TO_TITLE
        assert say(telegram, "still talking", user_id="bob", **thread) == "echo: still talking"
        assert say(cli, "/title auth refactor v2", chat_id="terminal") == "Title set to 'auth refactor v2'."
        assert gateway.wait_idle()
        with gateway.read() as store:
            assert store.title_holder("bob's now") is None
            assert store.title_holder("auth refactor v2") == gateway.session_for("agent:main:cli:dm:terminal")
    finally:
        gateway.stop(timeout=10)
