from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from hermes_actors.agents.base import AgentError, AgentMessage, AgentReply, EchoAgent, Memory, TurnInput
from hermes_actors.routing import build_session_key
from hermes_actors.runtime.gateway import AcceptResult
from hermes_actors.store import MessageRecord, Role
from hermes_actors.testing import FakeClock, GatedAgent
from tests.runtime.conftest import MakeGateway, assert_turns_are_contiguous


class HistoryAgent(EchoAgent):
    """Replies with how many messages of history it saw."""

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        text = f"seen {len(turn.history)}"
        return AgentReply(messages=(AgentMessage(role=Role.ASSISTANT, content=text),), text=text)


class FailingAgent(EchoAgent):
    def __init__(self) -> None:
        self.fail = True

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        if self.fail:
            raise AgentError("the model endpoint answered 500")
        return super().run_turn(turn, timeout_s=timeout_s)

    def save_memories(self, history: Sequence[MessageRecord], *, timeout_s: float) -> list[Memory]:
        return []


def accepted(result: object) -> AcceptResult:
    assert isinstance(result, AcceptResult)
    return result


def test_a_turn_commits_the_user_message_the_reply_and_the_outbox_row(make_gateway: MakeGateway) -> None:
    gateway, fake = make_gateway()
    result = accepted(fake.push("hello"))
    reply = fake.pop()
    assert reply.text == "echo: hello"
    assert reply.chat_id == "chat-1"
    assert reply.reply_to == "m1"
    assert gateway.wait_idle()
    session_id = gateway.session_for(result.routing_key)
    assert session_id is not None
    with gateway.read() as store:
        transcript = store.load_transcript(session_id)
        assert [(m.role, m.content) for m in transcript] == [("user", "hello"), ("assistant", "echo: hello")]
        assert store.inbox.pending() == []
        assert store.outbox.unsent() == []
        assert store.get_route(result.routing_key) == session_id
        session = store.get_session(session_id)
        assert session.message_count == 2
        assert session.input_tokens > 0
        assert session.output_tokens > 0


def test_a_tool_call_turn_stores_the_whole_message_shape(make_gateway: MakeGateway) -> None:
    gateway, fake = make_gateway()
    result = accepted(fake.push("tool terminal ls -la"))
    fake.pop()
    assert gateway.wait_idle()
    with gateway.read() as store:
        session_id = store.get_route(result.routing_key)
        assert session_id is not None
        roles = [(m.role, m.tool_name) for m in store.load_transcript(session_id)]
        assert roles == [("user", None), ("assistant", None), ("tool", "terminal"), ("assistant", None)]
        assert store.get_session(session_id).tool_call_count == 1


def test_the_history_survives_passivation_and_reactivation(make_gateway: MakeGateway) -> None:
    clock = FakeClock()
    gateway, fake = make_gateway(agent=HistoryAgent(), passivate_after_s=60, clock=clock)
    fake.push("one")
    assert fake.pop().text == "seen 0"
    assert gateway.wait_idle()
    assert gateway.statistics().live_actors == 1
    clock.advance(61)
    gateway.tick()
    assert gateway.wait_idle()
    stats = gateway.statistics()
    assert (stats.live_actors, stats.passivations) == (0, 1)
    fake.push("two")
    assert fake.pop().text == "seen 2"
    assert gateway.statistics().activations == 2


def test_the_live_actor_cap_evicts_the_least_recently_used(make_gateway: MakeGateway) -> None:
    gateway, fake = make_gateway(max_live_actors=10)
    for i in range(30):
        fake.push(f"hello {i}", chat_id=f"chat-{i}")
        fake.pop()
    assert gateway.wait_idle()
    stats = gateway.statistics()
    assert stats.live_actors <= 10
    assert stats.evictions >= 20
    assert stats.routes_cached <= 10  # the directory cache follows the live sessions
    fake.push("again", chat_id="chat-0")  # evicted long ago: comes back from the store
    assert fake.pop().text == "echo: again"
    with gateway.read() as store:
        session_id = store.get_route("agent:main:fake:dm:chat-0")
        assert session_id is not None
        assert len(store.load_transcript(session_id)) == 4


def test_concurrent_first_messages_for_one_key_open_exactly_one_session(make_gateway: MakeGateway) -> None:
    gateway, fake = make_gateway(pending_soft_limit=64)
    barrier = threading.Barrier(8)

    def first_message(i: int) -> None:
        barrier.wait(5)
        fake.push(f"hi {i}")

    threads = [threading.Thread(target=first_message, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert gateway.wait_idle()
    with gateway.read() as store:
        assert store.stats().sessions == 1
        (session,) = store.list_sessions()
        assert len(assert_turns_are_contiguous(store.load_transcript(session.id))) == 8
    assert gateway.statistics().activations == 1


def test_a_redelivered_message_is_dropped_even_after_a_restart(make_gateway: MakeGateway) -> None:
    gateway, fake = make_gateway()
    message = fake.message("only once", message_id="platform-42")
    assert not gateway.accept(message).duplicate
    fake.pop()
    assert gateway.accept(message).duplicate
    gateway.stop()
    restarted, fake2 = make_gateway()
    assert restarted.accept(message).duplicate
    assert restarted.wait_idle()
    with restarted.read() as store:
        (session,) = store.list_sessions()
        assert [m.content for m in store.load_transcript(session.id)] == ["only once", "echo: only once"]
    with pytest.raises(TimeoutError):
        fake2.pop(timeout=0.2)


def test_stop_invalidates_the_running_turn_so_its_late_result_is_dropped(make_gateway: MakeGateway) -> None:
    agent = GatedAgent()
    gateway, fake = make_gateway(agent=agent)
    fake.push("long task")
    assert agent.started.wait(5)
    fake.push("/stop")
    assert fake.pop().text == "Stopped."
    agent.release.set()  # the agent finishes after the stop
    assert gateway.wait_idle()
    fake.push("next")
    assert fake.pop().text == "echo: next"
    assert gateway.wait_idle()
    with gateway.read() as store:
        (session,) = store.list_sessions()
        contents = [m.content for m in store.load_transcript(session.id)]
    assert contents == ["long task", "next", "echo: next"]
    assert [m.text for m in fake.sent] == ["Stopped.", "echo: next"]


def test_an_agent_failure_becomes_a_reply_and_the_actor_survives(make_gateway: MakeGateway) -> None:
    agent = FailingAgent()
    gateway, fake = make_gateway(agent=agent)
    fake.push("please")
    reply = fake.pop().text
    assert reply.startswith("Sorry, the agent failed: the model endpoint answered 500.")
    assert "Your message is saved" in reply
    agent.fail = False
    fake.push("again")
    assert fake.pop().text == "echo: again"
    assert gateway.wait_idle()
    with gateway.read() as store:
        (session,) = store.list_sessions()
        assert [m.content for m in store.load_transcript(session.id)] == ["please", "again", "echo: again"]


def test_an_agent_that_does_not_answer_in_time_gets_a_timeout_reply(make_gateway: MakeGateway) -> None:
    agent = GatedAgent()
    gateway, fake = make_gateway(agent=agent, agent_timeout_s=0.2)
    fake.push("slow")
    assert fake.pop().text.startswith("Sorry, the agent did not answer within 0 s")
    agent.release.set()
    assert gateway.wait_idle()


def test_rapid_fire_messages_beyond_the_soft_limit_merge_into_one_turn(make_gateway: MakeGateway) -> None:
    agent = GatedAgent()
    gateway, fake = make_gateway(agent=agent, pending_soft_limit=3, pending_hard_limit=5)
    fake.push("first")
    assert agent.started.wait(5)
    for text in ["a", "b", "c", "d", "e"]:
        fake.push(text)
    fake.push("one too many")
    refused = fake.pop()
    assert refused.text.startswith("Too many messages are waiting in this conversation (5)")
    agent.release.set()
    assert gateway.wait_idle()
    assert [m.text for m in fake.sent[1:]] == ["echo: first", "echo: a\nb\nc\nd\ne"]
    with gateway.read() as store:
        (session,) = store.list_sessions()
        assert assert_turns_are_contiguous(store.load_transcript(session.id)) == ["first", "a", "b", "c", "d", "e"]
        assert store.inbox.pending() == []


def test_rapid_fire_messages_of_two_chats_on_one_session_are_each_answered_in_their_own_chat(
    make_gateway: MakeGateway,
) -> None:
    agent = GatedAgent()
    agent.release.set()
    gateway, fake = make_gateway(agent=agent, pending_soft_limit=2, pending_hard_limit=10)
    dm = accepted(fake.push("hello"))
    assert fake.pop().text == "echo: hello"
    session_id = gateway.session_for(dm.routing_key)
    assert session_id is not None
    group = fake.message("unused", chat_id="group-1", chat_type="group")
    gateway.rebind(build_session_key(group.source, gateway.config.key_policy), session_id)  # /resume in the group
    agent.release.clear()
    agent.started.clear()
    fake.push("first", message_id="first")
    assert agent.started.wait(5)
    sent = {"first": "chat-1"}  # message id -> its chat
    for n in range(3):
        for chat_id, chat_type in (("chat-1", "dm"), ("group-1", "group")):
            fake.push(f"{chat_type} {n}", chat_id=chat_id, chat_type=chat_type, message_id=f"{chat_type}-{n}")
            sent[f"{chat_type}-{n}"] = chat_id
    agent.release.set()
    assert gateway.wait_idle()
    replies = fake.sent[1:]
    answered_in = {m: reply.chat_id for reply in replies for m in reply.answers}
    assert {m: answered_in.get(m) for m in sent} == sent
    assert all(len({sent[m] for m in reply.answers}) == 1 for reply in replies)
    with gateway.read() as store:
        users = assert_turns_are_contiguous(store.load_transcript(session_id))
        assert users == ["hello", "first", "dm 0", "group 0", "dm 1", "group 1", "dm 2", "group 2"]
        assert store.inbox.pending() == []


class CountingAgent(EchoAgent):
    """Holds every call until released and records the most calls that ran at once."""

    runs_inline = False

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.release = threading.Event()
        self.two_running = threading.Event()

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            if self.running >= 2:
                self.two_running.set()
        assert self.release.wait(10)
        with self.lock:
            self.running -= 1
        return super().run_turn(turn, timeout_s=timeout_s)


def test_concurrent_agent_calls_are_capped_across_sessions(make_gateway: MakeGateway) -> None:
    agent = CountingAgent()
    gateway, fake = make_gateway(agent=agent, max_concurrent_agent_calls=2)
    for i in range(6):
        fake.push(f"hi {i}", chat_id=f"chat-{i}")
    assert agent.two_running.wait(5)
    assert gateway.statistics().running == 6  # every session has its turn started, four wait for a slot
    agent.release.set()
    assert gateway.wait_idle()
    assert agent.most == 2
    assert len(fake.sent) == 6


@pytest.mark.slow
def test_messages_arriving_while_actors_passivate_are_run_in_order_by_the_next_activation(
    make_gateway: MakeGateway,
) -> None:
    clock = FakeClock()
    gateway, fake = make_gateway(passivate_after_s=1, clock=clock, pending_soft_limit=1000, pending_hard_limit=1000)
    for round_ in range(30):
        assert gateway.wait_idle()
        clock.advance(2)
        gateway.tick()  # every actor is idle, so all start to stop; the pushes below race with that
        for chat in range(3):
            fake.push(f"r{round_}", chat_id=f"chat-{chat}")
    assert gateway.wait_idle()
    assert gateway.statistics().passivations >= 3 * 29
    with gateway.read() as store:
        for chat in range(3):
            session_id = store.get_route(f"agent:main:fake:dm:chat-{chat}")
            assert session_id is not None
            users = assert_turns_are_contiguous(store.load_transcript(session_id))
            assert users == [f"r{i}" for i in range(30)]
