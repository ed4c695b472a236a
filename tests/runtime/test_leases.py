from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_actors.routing import SessionSource
from hermes_actors.store import Store
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
        state = store._connection.execute("SELECT state FROM inbox WHERE platform_message_id = 'm1'").get
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
