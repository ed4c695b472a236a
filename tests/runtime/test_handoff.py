from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_actors.lifecycle.handlers import handed_off_to
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.testing import FakePlatform, FakeThreadedPlatform, GatedAgent

CLI_KEY = "agent:main:cli:dm:terminal"


class Setup:
    def __init__(self, gateway: Gateway, cli: FakePlatform, telegram: FakeThreadedPlatform) -> None:
        self.gateway = gateway
        self.cli = cli
        self.telegram = telegram


@pytest.fixture
def setup(db_path: Path) -> Iterator[Setup]:
    cli = FakePlatform("cli")
    telegram = FakeThreadedPlatform("telegram")
    gateway = Gateway(db_path, senders=[cli, telegram])
    cli.attach(gateway)
    telegram.attach(gateway)
    try:
        yield Setup(gateway, cli, telegram)
    finally:
        gateway.stop(timeout=10)


def start_conversation(s: Setup) -> str:
    s.cli.push("/title auth refactor", chat_id="terminal")
    s.cli.pop()
    s.cli.push("let us refactor auth", chat_id="terminal")
    s.cli.pop()
    assert s.gateway.wait_idle()
    session = s.gateway.session_for(CLI_KEY)
    assert session is not None
    return session


def sethome(s: Setup) -> None:
    s.telegram.push("/sethome", chat_id="-100200", chat_type="group", user_id="alice")
    assert s.telegram.pop().text == "This chat is now the home channel for telegram."


def test_a_handoff_opens_a_thread_binds_it_to_the_session_and_continues_there(setup: Setup) -> None:
    session = start_conversation(setup)
    sethome(setup)
    setup.cli.push("/handoff telegram", chat_id="terminal", message_id="handoff-1")
    first = setup.telegram.pop()
    assert (first.chat_id, first.thread_id) == ("-100200", "thread-1")
    assert first.text.startswith("echo: [handoff] This conversation was just handed off here from cli.")
    assert setup.telegram.threads == [("-100200", "auth refactor")]
    done = setup.cli.pop()
    assert done.text == (
        "Handed off to telegram (chat -100200, thread thread-1): the conversation continues there. "
        "To pick it up here again, send /resume auth refactor."
    )
    assert (done.reply_to, done.answers) == ("handoff-1", ("handoff-1",))
    assert handed_off_to("/handoff telegram", done.text) == "telegram"
    thread_key = "agent:main:telegram:group:-100200:thread-1"
    assert setup.gateway.session_for(thread_key) == session
    setup.telegram.push("and now?", chat_id="-100200", chat_type="group", thread_id="thread-1", user_id="bob")
    assert setup.telegram.pop().text == "echo: and now?"
    assert setup.gateway.wait_idle()
    with setup.gateway.read() as store:
        contents = [m.content or "" for m in store.load_transcript(session)]
    assert contents[0] == "let us refactor auth"
    assert contents[2].startswith("[handoff]")
    assert contents[-2:] == ["and now?", "echo: and now?"]


def test_a_handoff_without_a_home_channel_asks_for_sethome(setup: Setup) -> None:
    session = start_conversation(setup)
    setup.cli.push("/handoff telegram", chat_id="terminal")
    reply = setup.cli.pop().text
    assert reply.startswith("Handoff failed: telegram has no home channel. Run /sethome")
    assert setup.gateway.session_for(CLI_KEY) == session


def test_a_handoff_to_a_platform_that_is_not_enabled_is_refused(setup: Setup) -> None:
    start_conversation(setup)
    setup.cli.push("/handoff discord", chat_id="terminal")
    assert setup.cli.pop().text == "Handoff failed: discord is not enabled on this gateway."


def test_a_handoff_without_a_platform_shows_the_usage(setup: Setup) -> None:
    start_conversation(setup)
    setup.cli.push("/handoff", chat_id="terminal")
    assert setup.cli.pop().text == "Usage: /handoff <platform>, e.g. /handoff telegram."


def test_a_handoff_mid_turn_is_refused(db_path: Path) -> None:
    agent = GatedAgent()
    cli = FakePlatform("cli")
    telegram = FakeThreadedPlatform("telegram")
    gateway = Gateway(db_path, agent=agent, senders=[cli, telegram])
    cli.attach(gateway)
    try:
        cli.push("a long task", chat_id="terminal")
        assert agent.started.wait(5)
        cli.push("/handoff telegram", chat_id="terminal")
        assert cli.pop().text == "A reply is still being written; hand off once it has arrived."
        agent.release.set()
        assert cli.pop().text == "echo: a long task"
        assert telegram.sent == []
    finally:
        gateway.stop(timeout=10)


def test_a_failed_thread_falls_back_to_the_home_channel(setup: Setup) -> None:
    session = start_conversation(setup)
    sethome(setup)
    setup.telegram.thread_failure = "topics are off in this group"
    setup.cli.push("/handoff telegram", chat_id="terminal")
    first = setup.telegram.pop()
    assert (first.chat_id, first.thread_id) == ("-100200", None)
    assert setup.cli.pop().text.startswith("Handed off to telegram (chat -100200): the conversation continues")
    # Without a thread the key is the group's per-user key of whoever set the home channel.
    assert setup.gateway.session_for("agent:main:telegram:group:-100200:alice") == session


def test_a_failed_delivery_leaves_the_session_where_it_was(setup: Setup) -> None:
    session = start_conversation(setup)
    sethome(setup)
    setup.telegram.fail_next(1)
    setup.cli.push("/handoff telegram", chat_id="terminal", message_id="handoff-2")
    failed = setup.cli.pop()
    assert failed.answers == ("handoff-2",)  # the report answers the /handoff
    reply = failed.text
    assert handed_off_to("/handoff telegram", reply) is None
    assert reply == (
        "Handoff to telegram failed: fake platform refused the send. The conversation stays here; try again later."
    )
    assert setup.gateway.wait_idle()
    assert setup.gateway.session_for("agent:main:telegram:group:-100200:thread-1") is None
    assert setup.gateway.session_for(CLI_KEY) == session
    with setup.gateway.read() as store:
        assert store.outbox.unsent() == []  # the failed first message is given up, not retried later
    setup.cli.push("still here?", chat_id="terminal")
    assert setup.cli.pop().text == "echo: still here?"


def test_a_handoff_to_a_workspace_scoped_home_binds_the_key_its_replies_arrive_under(setup: Setup) -> None:
    session = start_conversation(setup)
    setup.telegram.push("/sethome", chat_id="C1", chat_type="group", user_id="alice", scope_id="T9")
    assert setup.telegram.pop().text == "This chat is now the home channel for telegram."
    setup.cli.push("/handoff telegram", chat_id="terminal")
    assert setup.telegram.pop().thread_id == "thread-1"
    assert setup.gateway.session_for("agent:main:telegram.T9:group:C1:thread-1") == session
    setup.telegram.push("in the thread", chat_id="C1", chat_type="group", thread_id="thread-1", scope_id="T9")
    assert setup.telegram.pop().text == "echo: in the thread"
    assert setup.gateway.wait_idle()
    with setup.gateway.read() as store:
        assert [m.content for m in store.load_transcript(session)][-2:] == ["in the thread", "echo: in the thread"]


@pytest.mark.slow
def test_a_handoff_sent_once_the_reply_arrived_is_not_refused_however_late_the_actor_reports(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user sees the reply, then asks for the handoff: by then the supervisor must know the turn ended, even
    when the session's thread is descheduled between sending the reply and reporting the turn (as under load)."""
    from hermes_actors.runtime.protocol import TurnFinished
    from hermes_actors.runtime.session import SessionActor

    tell = SessionActor._tell_supervisor

    def late(self: SessionActor, message: object) -> None:
        if isinstance(message, TurnFinished):
            time.sleep(0.3)  # the actor's thread loses the CPU right after the turn's reply went out
        tell(self, message)  # type: ignore[arg-type]

    start_conversation(setup)
    sethome(setup)
    monkeypatch.setattr(SessionActor, "_tell_supervisor", late)
    setup.cli.push("one more thing", chat_id="terminal")
    assert setup.cli.pop().text == "echo: one more thing"
    setup.cli.push("/handoff telegram", chat_id="terminal")
    assert setup.telegram.pop().text.startswith("echo: [handoff]")
    assert setup.cli.pop().text.startswith("Handed off to telegram (chat -100200, thread thread-1)")
