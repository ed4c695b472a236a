from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hermes_actors.agents.base import AgentReply, TurnInput
from hermes_actors.messages import OutboundError
from hermes_actors.routing import SessionSource
from hermes_actors.runtime import leases, session_lease
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.store import EndReason, Store
from hermes_actors.testing import GatedAgent
from tests.runtime.conftest import MakeGateway

ROOT = Path(__file__).resolve().parents[2]
KEY = "agent:main:fake:dm:chat-1"


def start_holder(db_path: Path, session_id: str, wait_s: float = 0.0) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.runtime.lease_holder", str(db_path), session_id, str(wait_s)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def session_id(db_path: Path) -> str:
    with Store.open(db_path) as store:
        session = store.create_session(SessionSource(platform="fake", chat_id="chat-1"), routing_key=KEY)
        store.set_route(KEY, session.id)
        return session.id


@pytest.fixture
def holders() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        process.kill()
        process.communicate(timeout=10)  # also closes the pipes


@pytest.mark.slow
def test_a_session_held_by_another_process_gets_a_busy_reply_then_works_once_released(
    make_gateway: MakeGateway, db_path: Path, session_id: str, holders: list[subprocess.Popen[str]]
) -> None:
    holder = start_holder(db_path, session_id)
    holders.append(holder)
    assert holder.stdout is not None
    assert holder.stdin is not None
    held = holder.stdout.readline()
    assert held.startswith("HELD ")
    gateway, fake = make_gateway(lease_wait_s=0.2)
    fake.push("are you there?")
    busy = fake.pop().text
    assert busy.startswith(f"This conversation is busy in process {holder.pid} on ")
    assert "your message was not run" in busy
    holder.stdin.write("release\n")
    holder.stdin.flush()
    assert holder.stdout.readline() == "RELEASED\n"
    fake.push("now?")
    assert fake.pop().text == "echo: now?"
    assert gateway.wait_idle()
    with gateway.read() as store:
        assert [m.content for m in store.load_transcript(session_id)] == ["now?", "echo: now?"]
        state = store.sql.value("SELECT state FROM inbox WHERE platform_message_id = 'm1'")
        assert state == "rejected"


@pytest.mark.slow
def test_a_process_without_the_daemon_waits_then_is_told_who_is_busy(
    make_gateway: MakeGateway, db_path: Path, session_id: str, holders: list[subprocess.Popen[str]]
) -> None:
    gateway, fake = make_gateway()
    fake.push("hello")  # the gateway's live session actor now holds the lease
    fake.pop()
    assert gateway.wait_idle()
    contender = start_holder(db_path, session_id, wait_s=0.3)
    holders.append(contender)
    out, _ = contender.communicate(timeout=20)
    assert contender.returncode == 3
    assert out.startswith(f"BUSY session {session_id} is busy in process ")
    assert "wait for it to finish" in out


def test_the_lease_of_a_killed_process_is_taken_over_at_once(
    make_gateway: MakeGateway, db_path: Path, session_id: str, holders: list[subprocess.Popen[str]]
) -> None:
    holder = start_holder(db_path, session_id)
    holders.append(holder)
    assert holder.stdout is not None
    assert holder.stdout.readline().startswith("HELD ")
    holder.kill()  # SIGKILL: no release; the lease row stays, with an hour to live
    holder.wait(10)
    _, fake = make_gateway(lease_wait_s=30)
    fake.push("still there?")
    assert fake.pop(timeout=10).text == "echo: still there?"


class AskedAgent(GatedAgent):
    """A gated echo agent that records the user text of every call (how often the model was asked each message)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        self.asked.append(turn.user_text)
        return super().run_turn(turn, timeout_s=timeout_s)


def _holder_held(holder: subprocess.Popen[str]) -> None:
    assert holder.stdout is not None
    assert holder.stdout.readline().startswith("HELD ")


def _tell_holder(holder: subprocess.Popen[str], command: str) -> None:
    assert holder.stdin is not None
    assert holder.stdout is not None
    holder.stdin.write(command + "\n")
    holder.stdin.flush()
    assert holder.stdout.readline() == "RELEASED\n"


def _inbox_state(gateway: Gateway, message_id: str) -> str:
    with gateway.read() as store:
        return str(store.sql.value("SELECT state FROM inbox WHERE platform_message_id = ?", (message_id,)))


def _waits_for_leases(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """An event set once a session actor of this process finds the lease held and starts waiting for it."""
    waiting = threading.Event()
    real = leases.wait_for_lease

    def observed(try_acquire: Callable[[], str | None], *args: object, **kwargs: object) -> str | None:
        def attempt() -> str | None:
            holder = try_acquire()
            if holder is not None:
                waiting.set()
            return holder

        return real(attempt, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(session_lease, "wait_for_lease", observed)
    return waiting


def test_a_message_waiting_for_the_lease_of_a_session_its_holder_then_ends_is_told_so_without_an_agent_call(
    make_gateway: MakeGateway,
    db_path: Path,
    session_id: str,
    holders: list[subprocess.Popen[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    holder = start_holder(db_path, session_id)
    holders.append(holder)
    _holder_held(holder)
    agent = AskedAgent()
    agent.release.set()
    waiting = _waits_for_leases(monkeypatch)
    gateway, fake = make_gateway(agent=agent, lease_wait_s=30)
    fake.push("are you there?", message_id="waiting")
    assert waiting.wait(30)  # routed to the held session, whose actor now waits: only then does the holder end it
    _tell_holder(holder, "end")  # the holder's user closed the chat: the session ended with user_exit
    notice = fake.pop()
    assert notice.error == OutboundError.SESSION_ENDED
    assert notice.session_id == session_id
    assert notice.text.startswith(f"Session {session_id} ended (user_exit) before your message could run")
    assert notice.answers == ("waiting",)
    assert gateway.wait_idle()
    assert agent.asked == []
    assert _inbox_state(gateway, "waiting") == "rejected"
    fake.push("a new start")  # the key leads to an ended session: its next message opens a new one
    assert fake.pop().text == "echo: a new start"
    assert agent.asked == ["a new start"]
    with gateway.read() as store:
        assert store.load_transcript(session_id) == []
        assert store.inbox.pending() == []


def test_a_message_of_a_session_ended_elsewhere_goes_to_the_session_its_key_leads_to_now(
    make_gateway: MakeGateway, db_path: Path, session_id: str, holders: list[subprocess.Popen[str]]
) -> None:
    with Store.open(db_path) as store:
        successor = store.create_session(SessionSource(platform="fake", chat_id="chat-1"), routing_key=KEY).id
    holder = start_holder(db_path, session_id)
    holders.append(holder)
    _holder_held(holder)
    agent = AskedAgent()
    agent.release.set()
    gateway, fake = make_gateway(agent=agent, lease_wait_s=30)
    fake.push("carry on", message_id="moved")
    _tell_holder(holder, f"end {KEY} {successor}")  # ended there, its key moved on (as a compression moves it)
    reply = fake.pop()
    assert reply.text == "echo: carry on"
    assert reply.session_id == successor
    assert gateway.wait_idle()
    assert agent.asked == ["carry on"]
    with gateway.read() as store:
        assert store.load_transcript(session_id) == []
        assert [m.content for m in store.load_transcript(successor)] == ["carry on", "echo: carry on"]


def test_a_commit_refused_because_the_session_ended_meanwhile_never_runs_the_agent_again(
    make_gateway: MakeGateway, db_path: Path, session_id: str
) -> None:
    agent = AskedAgent()
    agent.release.set()
    gateway, fake = make_gateway(agent=agent)
    fake.push("one")
    assert fake.pop().text == "echo: one"
    agent.release.clear()
    agent.started.clear()
    fake.push("two", message_id="late")
    assert agent.started.wait(10)
    with Store.open(db_path) as store:  # ended behind the lease's back, while the agent answers "two"
        store.end_session(session_id, EndReason.USER_EXIT)
    agent.release.set()
    notice = fake.pop()
    assert notice.error == OutboundError.SESSION_ENDED
    assert notice.answers == ("late",)
    assert gateway.wait_idle()
    assert agent.asked == ["one", "two"]
    assert _inbox_state(gateway, "late") == "rejected"
    with gateway.read() as store:
        assert [m.content for m in store.load_transcript(session_id)] == ["one", "echo: one"]
