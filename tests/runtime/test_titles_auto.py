from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from hermes_actors.agents.base import AgentError, AgentReply, EchoAgent, Memory, TurnInput, echo_title
from hermes_actors.cli.hermesctl import main as hermesctl
from hermes_actors.lifecycle.auto_titles import free_distinct_title
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.store import MessageRecord, Store
from hermes_actors.testing import FakeClock, poll_until
from tests.runtime.conftest import MakeGateway

KEY = "agent:main:fake:dm:chat-1"


class TitleAgent(EchoAgent):
    """Echoes, counts its title calls and answers them with ``answer`` (or raises it)."""

    def __init__(self, answer: str | Exception | None = None) -> None:
        self.answer = answer
        self.title_calls: list[tuple[str, str]] = []

    def title(self, first_user_text: str, first_reply: str, *, timeout_s: float) -> str:
        self.title_calls.append((first_user_text, first_reply))
        if isinstance(self.answer, Exception):
            raise self.answer
        return super().title(first_user_text, first_reply, timeout_s=timeout_s) if self.answer is None else self.answer


class BlockingTitleAgent(TitleAgent):
    """Runs in the agent pool; its title call waits until the test releases it."""

    runs_inline = False

    def __init__(self) -> None:
        super().__init__()
        self.title_started = threading.Event()
        self.release = threading.Event()

    def title(self, first_user_text: str, first_reply: str, *, timeout_s: float) -> str:
        self.title_started.set()
        assert self.release.wait(10)
        return super().title(first_user_text, first_reply, timeout_s=timeout_s)


class SlowTitleAgent(TitleAgent):
    """Its title call takes longer than its timeout (on the test's clock)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock

    def title(self, first_user_text: str, first_reply: str, *, timeout_s: float) -> str:
        self.clock.advance(timeout_s + 1)
        return super().title(first_user_text, first_reply, timeout_s=timeout_s)


class UntitledAgent:
    """An agent without the optional title call."""

    runs_inline = True

    def __init__(self) -> None:
        self._echo = EchoAgent()

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        return self._echo.run_turn(turn, timeout_s=timeout_s)

    def summarize(self, history: Sequence[MessageRecord], *, timeout_s: float) -> str:
        return self._echo.summarize(history, timeout_s=timeout_s)

    def save_memories(self, history: Sequence[MessageRecord], *, timeout_s: float) -> list[Memory]:
        return self._echo.save_memories(history, timeout_s=timeout_s)


def title_of(gateway: Gateway, key: str = KEY) -> str | None:
    session_id = gateway.session_for(key)
    assert session_id is not None
    with gateway.read() as store:
        return store.get_session(session_id).title


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ("fix the flaky login test please, it fails every night", "Fix the flaky login test please, it"),
        ("what is the weather in Las Vegas?", "What is the weather in Las Vegas"),
        ("hello", "Conversation about hello"),
        ("  hi   there!! ", "Conversation about hi there"),
        ("数据库迁移", "Conversation about 数据库迁移"),
        ("", "Conversation without words"),
        ("?!...", "Conversation without words"),
        ("x" * 300, "Conversation about " + "x" * 81),
    ],
)
def test_the_echo_title_is_the_first_words_of_the_first_message_capitalised(text: str, title: str) -> None:
    assert echo_title(text) == title
    assert EchoAgent().title(text, "echo: " + text, timeout_s=1) == title


def test_a_title_appears_after_the_first_exchange_without_delaying_the_reply(make_gateway: MakeGateway) -> None:
    agent = BlockingTitleAgent()
    gateway, fake = make_gateway(agent=agent)
    fake.push("plan the payments refactor for next week")
    assert fake.pop().text == "echo: plan the payments refactor for next week"  # while the title call blocks
    assert agent.title_started.wait(5)
    assert title_of(gateway) is None
    agent.release.set()
    poll_until(lambda: title_of(gateway) is not None)
    assert title_of(gateway) == "Plan the payments refactor for next week"
    assert agent.title_calls == [
        ("plan the payments refactor for next week", "echo: plan the payments refactor for next week")
    ]
    fake.push("/title")
    assert fake.pop().text == "Title: Plan the payments refactor for next week"  # the session's cached record knows


class _HeldAfterStore(logging.Handler):
    """Holds the title job's thread at its "titled ... automatically" line: the title is committed, the job's future
    not yet done."""

    def __init__(self) -> None:
        super().__init__()
        self.reached = threading.Event()
        self.go = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "automatically" in record.getMessage():
            self.reached.set()
            self.go.wait(10)


def test_slash_title_shows_an_automatic_title_committed_before_its_job_reports_it(make_gateway: MakeGateway) -> None:
    held = _HeldAfterStore()
    logger = logging.getLogger("hermes_actors.lifecycle.auto_titles")
    logger.addHandler(held)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        agent = BlockingTitleAgent()
        gateway, fake = make_gateway(agent=agent)
        fake.push("plan the payments refactor for next week")
        fake.pop()
        agent.release.set()
        assert held.reached.wait(5)
        assert title_of(gateway) == "Plan the payments refactor for next week"  # stored; the job not done
        fake.push("/title")
        assert fake.pop().text == "Title: Plan the payments refactor for next week"
    finally:
        held.go.set()
        logger.removeHandler(held)
        logger.setLevel(level)


def test_a_title_queued_before_the_first_message_wins(make_gateway: MakeGateway) -> None:
    agent = TitleAgent()
    gateway, fake = make_gateway(agent=agent)
    fake.push("/title my research")
    assert fake.pop().text == "The title will be set to 'my research' when the session starts."
    fake.push("tell me about sqlite write ahead logging")
    fake.pop()
    assert gateway.wait_idle()
    assert title_of(gateway) == "my research"
    assert agent.title_calls == []


def test_a_title_given_with_new_wins(make_gateway: MakeGateway) -> None:
    agent = TitleAgent()
    gateway, fake = make_gateway(agent=agent)
    fake.push("/new payments refactor")
    fake.pop()
    fake.push("let us start with the ledger")
    fake.pop()
    assert gateway.wait_idle()
    assert title_of(gateway) == "payments refactor"
    assert agent.title_calls == []


def test_a_title_set_by_hand_while_the_title_call_runs_wins(
    make_gateway: MakeGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hermes_actors.lifecycle.auto_titles")
    agent = BlockingTitleAgent()
    gateway, fake = make_gateway(agent=agent)
    fake.push("first words of a long conversation")
    fake.pop()
    assert agent.title_started.wait(5)
    fake.push("/title hand made")
    assert fake.pop().text == "Title set to 'hand made'."
    agent.release.set()
    poll_until(lambda: "not needed: the session has a title" in caplog.text)
    assert title_of(gateway) == "hand made"
    fake.push("/title")
    assert fake.pop().text == "Title: hand made"


def test_a_title_set_by_hand_after_the_automatic_one_replaces_it(make_gateway: MakeGateway) -> None:
    gateway, fake = make_gateway(agent=TitleAgent())
    fake.push("draft the quarterly report outline")
    fake.pop()
    assert gateway.wait_idle()
    assert title_of(gateway) == "Draft the quarterly report outline"
    fake.push("/title q3 report")
    assert fake.pop().text == "Title set to 'q3 report'."
    fake.push("more about it")
    fake.pop()
    assert gateway.wait_idle()
    assert title_of(gateway) == "q3 report"


def test_a_title_another_session_holds_takes_a_number_that_is_not_lineage_numbering(
    make_gateway: MakeGateway,
) -> None:
    gateway, fake = make_gateway(agent=TitleAgent())
    for chat in ("chat-1", "chat-2", "chat-3"):
        fake.push("hello there friend", chat_id=chat)
        fake.pop()
        assert gateway.wait_idle()
    titles = [title_of(gateway, f"agent:main:fake:dm:{chat}") for chat in ("chat-1", "chat-2", "chat-3")]
    assert titles == ["Hello there friend", "Hello there friend (2)", "Hello there friend (3)"]


def test_only_the_first_exchange_is_titled(make_gateway: MakeGateway) -> None:
    agent = TitleAgent()
    gateway, fake = make_gateway(agent=agent)
    for text in ("set up the build pipeline", "now something else entirely", "and a third topic"):
        fake.push(text)
        fake.pop()
        assert gateway.wait_idle()
    assert title_of(gateway) == "Set up the build pipeline"
    assert [user for user, _ in agent.title_calls] == ["set up the build pipeline"]


def test_a_failed_title_call_is_not_retried_by_a_later_exchange_or_process(make_gateway: MakeGateway) -> None:
    gateway, fake = make_gateway(agent=TitleAgent(AgentError("the model endpoint answered 500")))
    fake.push("set up the build pipeline")
    fake.pop()
    assert gateway.wait_idle()
    session_id = gateway.session_for(KEY)
    gateway.stop()
    agent = TitleAgent()
    gateway, fake = make_gateway(agent=agent)
    fake.push("and now the deploy step", message_id="after-restart")
    fake.pop()
    assert gateway.wait_idle()
    assert gateway.session_for(KEY) == session_id
    assert title_of(gateway) is None
    assert agent.title_calls == []


class FailingOnce(TitleAgent):
    """Its first turn fails (no reply is stored); later turns echo."""

    failed = False

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        if not self.failed:
            self.failed = True
            raise AgentError("the model endpoint answered 500")
        return super().run_turn(turn, timeout_s=timeout_s)


def test_a_failed_first_turn_leaves_the_title_to_the_first_exchange_that_succeeds(make_gateway: MakeGateway) -> None:
    agent = FailingOnce()
    gateway, fake = make_gateway(agent=agent)
    fake.push("first try")
    assert fake.pop().text.startswith("Sorry, the agent failed")
    fake.push("second try works")
    assert fake.pop().text == "echo: second try works"
    assert gateway.wait_idle()
    assert title_of(gateway) == "Second try works"


@pytest.mark.parametrize(
    ("answer", "logged"),
    [
        (AgentError("the model endpoint answered 500"), "the model endpoint answered 500"),
        (RuntimeError("a bug in the agent"), "the agent's title call raised"),
        ("   ", "the agent answered '   '"),
        ("t" * 101, "title is 101 characters long"),
    ],
)
def test_a_failing_title_call_leaves_the_session_untitled_and_is_logged(
    make_gateway: MakeGateway, caplog: pytest.LogCaptureFixture, answer: str | Exception, logged: str
) -> None:
    gateway, fake = make_gateway(agent=TitleAgent(answer))
    fake.push("something worth a title")
    assert fake.pop().text == "echo: something worth a title"
    assert gateway.wait_idle()
    assert title_of(gateway) is None
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.name == "hermes_actors.lifecycle.auto_titles" and r.levelno >= logging.WARNING
    ]
    assert len(warnings) == 1
    assert "no automatic title" in warnings[0]
    assert logged in warnings[0]


def test_a_title_call_slower_than_its_timeout_is_discarded(
    make_gateway: MakeGateway, caplog: pytest.LogCaptureFixture, clock: FakeClock
) -> None:
    gateway, fake = make_gateway(agent=SlowTitleAgent(clock), clock=clock, agent_timeout_s=5.0)
    fake.push("something worth a title")
    fake.pop()
    assert gateway.wait_idle()
    assert title_of(gateway) is None
    assert "no automatic title: the agent took 6.0 s, longer than 5 s" in caplog.text


def test_auto_titles_off_leaves_sessions_untitled(make_gateway: MakeGateway) -> None:
    agent = TitleAgent()
    gateway, fake = make_gateway(agent=agent, auto_titles=False)
    fake.push("set up the build pipeline")
    fake.pop()
    assert gateway.wait_idle()
    assert title_of(gateway) is None
    assert agent.title_calls == []


def test_an_agent_without_a_title_call_leaves_sessions_untitled(make_gateway: MakeGateway) -> None:
    gateway, fake = make_gateway(agent=UntitledAgent())
    fake.push("set up the build pipeline")
    fake.pop()
    assert gateway.wait_idle()
    assert title_of(gateway) is None


def test_a_compression_child_keeps_its_lineage_title(make_gateway: MakeGateway) -> None:
    agent = TitleAgent()
    gateway, fake = make_gateway(agent=agent, protected_recent_messages=2)
    padding = " and check every table of it twice" * 4  # a history a summary and 2 messages are shorter than
    for text in ("migrate the billing database", "step two" + padding, "step three" + padding, "step 4" + padding):
        fake.push(text)
        fake.pop()
    fake.push("/compress")
    assert fake.pop().text == ("Compressed 8 messages; the conversation continues as Migrate the billing database #2.")
    fake.push("after compression")
    fake.pop()
    assert gateway.wait_idle()
    assert title_of(gateway) == "Migrate the billing database #2"
    assert len(agent.title_calls) == 1


def test_listings_and_resume_show_the_automatic_title(make_gateway: MakeGateway, db_path: Path) -> None:
    gateway, fake = make_gateway(agent=TitleAgent())
    fake.push("deploy the staging cluster tonight")
    fake.pop()
    assert gateway.wait_idle()
    session_id = gateway.session_for(KEY)
    fake.push("/resume")
    listing = fake.pop().text
    assert listing.startswith(f"Your sessions:\n1. Deploy the staging cluster tonight ({session_id})")
    fake.push("/sessions")
    assert "Deploy the staging cluster tonight" in fake.pop().text
    listed = CliRunner().invoke(hermesctl, ["sessions", "list", "--home", str(db_path.parent)])
    assert listed.exit_code == 0, listed.output
    assert "Deploy the staging cluster tonight" in listed.stdout
    assert session_id is not None
    assert session_id in listed.stdout


def test_free_distinct_titles_follow_the_taken_run_in_few_lookups(tmp_path: Path) -> None:
    with Store.open(tmp_path / "titles.db") as store:
        for number in range(1, 41):
            record = store.create_session("cli")
            store.set_title(record.id, "Hello there" if number == 1 else f"Hello there ({number})")
        assert free_distinct_title(store, "Hello there") == "Hello there (41)"
        gap = store.find_by_title("Hello there (7)")
        assert gap is not None
        store.set_title(gap.id, None)  # a hole lower down is left alone: the next one still goes on top
        assert free_distinct_title(store, "Hello there") == "Hello there (41)"
        assert free_distinct_title(store, "Only me") == "Only me (2)"
