from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

from hermes_actors.agents.base import AgentError, AgentReply, EchoAgent, TurnInput
from hermes_actors.config import SessionsConfig
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.store import MessageRecord, Store
from hermes_actors.store.lineage import lineage_chain
from hermes_actors.testing import FakeClock, GatedAgent
from tests.runtime.conftest import MakeGateway, assert_turns_are_contiguous

KEY = "agent:main:fake:dm:chat-1"


class RecordingAgent(EchoAgent):
    """Echoes, and records the reset hooks and summaries asked of it."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.prompts_seen: list[str | None] = []  # the system message (a session's memories are frozen into it)

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        self.prompts_seen.append(turn.system_prompt)
        return super().run_turn(turn, timeout_s=timeout_s)

    def release_session(self, session_id: str, *, timeout_s: float) -> None:
        self.calls.append(f"release {session_id}")

    def interrupt_background(self, session_id: str, *, timeout_s: float) -> None:
        self.calls.append(f"interrupt {session_id}")

    def summarize(self, history: Sequence[MessageRecord], *, timeout_s: float) -> str:
        self.calls.append(f"summarize {len(history)}")
        return super().summarize(history, timeout_s=timeout_s)


def test_new_ends_the_session_and_the_next_message_opens_a_fresh_one(make_gateway: MakeGateway) -> None:
    agent = RecordingAgent()
    gateway, fake = make_gateway(agent=agent)
    fake.push("first conversation")
    fake.pop()
    assert gateway.wait_idle()
    old = gateway.session_for(KEY)
    assert old is not None
    fake.push("/new")
    assert fake.pop().text == "Started a new session."
    fake.push("second conversation")
    assert fake.pop().text == "echo: second conversation"
    assert gateway.wait_idle()
    new = gateway.session_for(KEY)
    assert new is not None
    assert new != old
    assert agent.calls[-2:] == [f"release {old}", f"interrupt {old}"]
    with gateway.read() as store:
        ended = store.get_session(old)
        assert (ended.end_reason, ended.is_live) == ("new_session", False)
        assert [m.content for m in store.load_transcript(old)] == ["first conversation", "echo: first conversation"]
        assert [m.content for m in store.load_transcript(new)] == ["second conversation", "echo: second conversation"]
        assert store.routes_to(old) == []
        assert store.inbox.pending() == []


def test_reset_ends_with_session_reset_and_a_title_goes_to_the_next_session(make_gateway: MakeGateway) -> None:
    gateway, fake = make_gateway()
    fake.push("hello")
    fake.pop()
    assert gateway.wait_idle()
    old = gateway.session_for(KEY)
    fake.push("/reset payments refactor")
    assert fake.pop().text == "Started a new session. Its title will be 'payments refactor'."
    fake.push("go")
    fake.pop()
    assert gateway.wait_idle()
    with gateway.read() as store:
        assert old is not None
        assert store.get_session(old).end_reason == "session_reset"
        new = store.resolve_session("payments refactor")
        assert new.id == gateway.session_for(KEY)


def test_a_title_collision_on_new_is_reported_and_not_fatal(make_gateway: MakeGateway) -> None:
    _, fake = make_gateway()
    fake.push("/title taken", chat_id="other")
    fake.pop()
    fake.push("hi", chat_id="other")
    fake.pop()
    fake.push("/new taken")
    reply = fake.pop().text
    assert reply.startswith("Started a new session. The title 'taken' is already in use by session ")
    fake.push("works anyway")
    assert fake.pop().text == "echo: works anyway"


def test_a_turn_invalidated_by_new_never_delivers_its_late_reply(make_gateway: MakeGateway) -> None:
    agent = GatedAgent()
    gateway, fake = make_gateway(agent=agent)
    fake.push("slow question")
    assert agent.started.wait(5)
    old = gateway.session_for(KEY)
    fake.push("/new")
    fake.push("after the reset")  # arrives while the reset is in progress
    agent.release.set()
    assert gateway.wait_idle()
    texts = [m.text for m in fake.sent]
    assert "echo: slow question" not in texts
    assert texts == ["Started a new session.", "echo: after the reset"]
    with gateway.read() as store:
        assert old is not None
        assert [m.content for m in store.load_transcript(old)] == ["slow question"]
        new = gateway.session_for(KEY)
        assert new is not None
        assert [m.content for m in store.load_transcript(new)] == ["after the reset", "echo: after the reset"]


def test_title_before_the_first_message_is_applied_when_the_session_starts(make_gateway: MakeGateway) -> None:
    gateway, fake = make_gateway()
    fake.push("/title research notes")
    assert fake.pop().text == "The title will be set to 'research notes' when the session starts."
    fake.push("hello")
    fake.pop()
    fake.push("/title")
    assert fake.pop().text == "Title: research notes"
    fake.push("/title better notes")
    assert fake.pop().text == "Title set to 'better notes'."
    assert gateway.wait_idle()
    with gateway.read() as store:
        assert store.resolve_session("better notes").id == gateway.session_for(KEY)


def test_resume_lists_picks_by_number_and_refuses_other_users_sessions(make_gateway: MakeGateway) -> None:
    gateway, fake = make_gateway()
    fake.push("/title alpha")
    fake.pop()
    fake.push("alpha work")
    fake.pop()
    assert gateway.wait_idle()
    alpha = gateway.session_for(KEY)
    fake.push("/new beta")
    fake.pop()
    fake.push("beta work")
    fake.pop()
    fake.push("/title mallory's", chat_id="mallory-chat", user_id="mallory")
    fake.pop()
    fake.push("secret", chat_id="mallory-chat", user_id="mallory")
    fake.pop()
    fake.push("/resume")
    listing = fake.pop().text
    assert listing.startswith("Your sessions:\n1. beta (")
    assert "\n2. alpha (" in listing
    assert "mallory" not in listing
    fake.push("/resume 2")
    assert fake.pop().text == "Resumed alpha."
    assert gateway.session_for(KEY) == alpha
    fake.push("back in alpha")
    fake.pop()
    fake.push("/resume mallory's")  # another user's session is answered exactly as a missing one (SPEC section 9)
    assert fake.pop().text == """resume: no session matches "mallory's" by id, id prefix or title; """ + (
        "list them with 'hermesctl sessions list'"
    )
    fake.push("/resume nothing-like-this")
    assert fake.pop().text.startswith("resume: no session matches 'nothing-like-this'")
    assert gateway.wait_idle()
    with gateway.read() as store:
        assert alpha is not None
        assert [m.content for m in store.load_transcript(alpha)][-2:] == ["back in alpha", "echo: back in alpha"]


def test_compress_continues_in_a_lineage_child_that_takes_over_every_key(make_gateway: MakeGateway) -> None:
    agent = RecordingAgent()
    gateway, fake = make_gateway(agent=agent, protected_recent_messages=2)
    fake.push("/title project")
    fake.pop()
    # Long enough that a summary and the last 2 messages are smaller than the whole history.
    steps = [f"step {i}: " + "the migration plan needs another careful look " * 4 for i in range(3)]
    for step in steps:
        fake.push(step)
        fake.pop()
    assert gateway.wait_idle()
    parent = gateway.session_for(KEY)
    assert parent is not None
    gateway.rebind("agent:main:fake:dm:terminal", parent)
    fake.push("/compress")
    reply = fake.pop().text
    assert reply == "Compressed 6 messages; the conversation continues as project #2."
    fake.push("after compression")
    assert fake.pop().text == "echo: after compression"
    assert gateway.wait_idle()
    child = gateway.session_for(KEY)
    assert child is not None
    assert gateway.session_for("agent:main:fake:dm:terminal") == child
    with gateway.read() as store:
        assert store.get_session(parent).end_reason == "compression"
        record = store.get_session(child)
        assert (record.parent_session_id, record.title) == (parent, "project #2")
        contents = [m.content or "" for m in store.load_transcript(child)]
        assert contents[0].startswith("[Summary of the conversation so far]")
        assert contents[1:] == [steps[2], f"echo: {steps[2]}", "after compression", "echo: after compression"]
        assert lineage_chain(store, parent) == [parent, child]
        assert store.resolve_session("project").id == child
    fake.push("/resume project")
    assert fake.pop().text == "Resumed project #2."


def test_compression_under_concurrent_messages_keeps_every_message_in_order(make_gateway: MakeGateway) -> None:
    gateway, fake = make_gateway(compress_at_messages=10, pending_soft_limit=1000, pending_hard_limit=1000)
    sent = [f"m{i}" for i in range(40)]

    def produce() -> None:
        for text in sent:
            fake.push(text)

    producer = threading.Thread(target=produce)
    producer.start()
    producer.join(30)
    assert gateway.wait_idle(30)
    with gateway.read() as store:
        tip = gateway.session_for(KEY)
        assert tip is not None
        chain = lineage_chain(store, tip)
        assert len(chain) >= 3
        users: list[str] = []
        for session_id in chain:
            transcript = [m for m in store.load_transcript(session_id) if m.role != "system"]
            if session_id != chain[0]:
                transcript = transcript[4:]  # the protected recent messages repeat the parent's last ones
            users += assert_turns_are_contiguous(transcript)
        assert users == sent
        assert store.inbox.pending() == []


def test_sethome_and_sessions_answer_from_the_store(make_gateway: MakeGateway) -> None:
    gateway, fake = make_gateway()
    fake.push("/sethome")
    assert fake.pop().text == "This chat is now the home channel for fake."
    fake.push("/title kube notes")
    fake.pop()
    fake.push("kubernetes is fun")
    fake.pop()
    fake.push("/sessions kubernetes")
    assert fake.pop().text.startswith("kube notes (")
    fake.push("/sessions")
    assert fake.pop().text.startswith("kube notes (")
    assert gateway.wait_idle()
    with gateway.read() as store:
        home = store.homes.get("fake")
        assert home is not None
        assert home.chat_id == "chat-1"


def test_unknown_slash_commands_go_to_the_agent(make_gateway: MakeGateway) -> None:
    _, fake = make_gateway()
    fake.push("/weather Las Vegas")
    assert fake.pop().text == "echo: /weather Las Vegas"


def test_auto_prune_runs_at_start_at_most_once_per_interval(db_path: Path) -> None:
    clock = FakeClock()
    with Store.open(db_path, clock=clock) as store:
        old = store.create_session("telegram")
        store.end_session(old.id, "idle")
        live = store.create_session("telegram")
    clock.advance(91 * 86400)
    settings = SessionsConfig(auto_prune=True, retention_days=90, min_interval_hours=24)
    first = Gateway(db_path, clock=clock, sessions=settings)
    first.stop()
    assert first.pruned is not None
    assert first.pruned.session_ids == [old.id]
    second = Gateway(db_path, clock=clock, sessions=settings)
    second.stop()
    assert second.pruned is None  # within min_interval_hours of the last run
    with Store.open(db_path, readonly=True) as store:
        assert store.find_session(old.id) is None
        assert store.find_session(live.id) is not None
        assert float(store.kv.get_meta("last_auto_prune") or 0) == clock.now


class GatedRecordingAgent(RecordingAgent):
    """Records the reset hooks and blocks turns that mention "long" until released."""

    runs_inline = False

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Event()
        self.release = threading.Event()

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        if "long" in turn.user_text:
            self.started.set()
            assert self.release.wait(10)
        return super().run_turn(turn, timeout_s=timeout_s)


def test_the_seven_reset_steps_are_each_observable(make_gateway: MakeGateway) -> None:
    agent = GatedRecordingAgent()
    gateway, fake = make_gateway(agent=agent)
    fake.push("/title first", chat_id="elsewhere")
    fake.pop()
    fake.push("hello", chat_id="elsewhere")  # a titled session of the same user, in another chat
    fake.pop()
    fake.push("/resume")  # a numbered list: conversation-scoped state of this chat
    assert fake.pop().text.startswith("Your sessions:\n1. first (")
    fake.push("a long task")
    assert agent.started.wait(5)
    old = gateway.session_for(KEY)
    fake.push("/new")
    # 1 and 2: the running turn is invalidated and its slot freed while the agent is still busy with it.
    assert fake.pop().text == "Started a new session."
    assert gateway.wait_idle()
    assert gateway.statistics().running == 0
    # 3 and 5: the agent was asked to release the session's resources and stop its background work.
    assert agent.calls[-2:] == [f"release {old}", f"interrupt {old}"]
    agent.release.set()
    # 4: the old numbered /resume list is gone: "1" is now looked up as an id or title, and matches nothing.
    fake.push("/resume 1")
    assert fake.pop().text.startswith("resume: no session matches '1'")
    # 6: the next message opens a fresh session; 7 was the notice above. The late reply never arrives.
    fake.push("fresh start")
    assert fake.pop().text == "echo: fresh start"
    assert gateway.wait_idle()
    assert "echo: a long task" not in [m.text for m in fake.sent]
    assert gateway.session_for(KEY) not in (None, old)


class FailingSummaryAgent(EchoAgent):
    """A pooled agent (it may block) that echoes but cannot summarise."""

    runs_inline = False

    def summarize(self, history: Sequence[MessageRecord], *, timeout_s: float) -> str:
        raise AgentError("the summary model is down")


def test_a_failed_automatic_compression_still_answers_the_turn_with_the_agent(make_gateway: MakeGateway) -> None:
    # The summary and the reply are two agent calls of one turn: the first one's completion must not be taken
    # for the second one's (which answered "did not answer within N s" at once before).
    gateway, fake = make_gateway(agent=FailingSummaryAgent(), compress_at_messages=4, agent_timeout_s=30)
    for i in range(3):
        fake.push(f"m{i}")
        assert fake.pop().text == f"echo: m{i}"
    with gateway.read() as store:
        session_id = gateway.session_for(KEY)
        assert session_id is not None
        assert len(store.load_transcript(session_id)) == 6
    assert gateway.session_for(KEY) == session_id  # the compression failed: no child took over


def test_resume_ends_the_session_it_leaves_with_session_switch_unless_another_key_leads_to_it(
    make_gateway: MakeGateway,
) -> None:
    gateway, fake = make_gateway()
    fake.push("/title alpha")
    fake.pop()
    fake.push("alpha work")
    fake.pop()
    fake.push("/new beta")
    fake.pop()
    fake.push("beta work")
    fake.pop()
    assert gateway.wait_idle()
    beta = gateway.session_for(KEY)
    assert beta is not None
    fake.push("/resume alpha")
    assert fake.pop().text == "Resumed alpha."
    assert gateway.wait_idle()
    alpha = gateway.session_for(KEY)
    with gateway.read() as store:
        assert alpha is not None
        assert store.get_session(alpha).is_live
        assert store.get_session(beta).end_reason == "session_switch"
        assert store.routes_to(beta) == []
    fake.push("/resume beta")  # the switched-away session comes back, and alpha is left in its turn
    assert fake.pop().text == "Resumed beta."
    fake.push("beta again")
    assert fake.pop().text == "echo: beta again"
    assert gateway.wait_idle()
    with gateway.read() as store:
        assert store.get_session(beta).is_live
        assert store.get_session(alpha).end_reason == "session_switch"
    terminal = "agent:main:fake:dm:terminal"
    gateway.rebind(terminal, beta)  # a second key leads to beta: leaving it from this chat must not end it
    fake.push("/resume alpha")
    assert fake.pop().text == "Resumed alpha."
    fake.push("/resume alpha")  # resuming the session one is in leaves nothing behind
    assert fake.pop().text == "Resumed alpha."
    assert gateway.wait_idle()
    with gateway.read() as store:
        assert store.get_session(beta).is_live
        assert store.get_session(alpha).is_live
        assert store.routes_to(beta) == [terminal]
