"""Every API request is answered within seconds when a write of its message fails, whatever step failed: the inbox
commit (503, nothing stored), the turn's commit (503 ``storage_unavailable``; the message is kept and answered once
the store takes writes) or the count of the reply's send (the reply is committed: the request gets it).

Each failure is injected where SQLite raises it: the step's store call raises the apsw error of a full (or
read-only) disk inside the writer's transaction, or the ``COMMIT`` itself is refused (a commit hook). Real gateway,
real HTTP on 127.0.0.1."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import apsw
import pytest

from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.outbox_router import OutboxRouter
from hermes_actors.store import Store, StoreInterface
from hermes_actors.store.inbox import Inbox
from hermes_actors.store.outbox_queue import Outbox
from hermes_actors.store.records import NewMessage
from hermes_actors.store.transcript import Transcript
from hermes_actors.testing import poll_until
from platforms.api_server import SESSION_HEADER
from tests.platforms import test_api_server
from tests.platforms.test_api_server import KEY, Running, Start, chat

start = test_api_server.start  # a gateway and an API server on 127.0.0.1
AUTH = {"Authorization": f"Bearer {KEY}"}
MARK = "refuse me"  # the text of the message whose write fails
PROMPT_S = 5.0  # "within seconds": the request timeout stays at its 300 s


class Refusal:
    """The apsw error a step raises while ``armed`` (set and cleared by the test)."""

    def __init__(self, error: Callable[[], apsw.Error]) -> None:
        self.error = error
        self.armed = threading.Event()
        self.raised = 0

    def check(self, refused: bool = True) -> None:
        if refused and self.armed.is_set():
            self.raised += 1
            raise self.error()


def full() -> apsw.Error:
    return apsw.FullError("database or disk is full")


def read_only() -> apsw.Error:
    return apsw.ReadOnlyError("attempt to write a readonly database")


def refuse_inbox(monkeypatch: pytest.MonkeyPatch, refusal: Refusal) -> None:
    add = Inbox.add

    def failing(self: Inbox, **row: Any) -> int | None:
        refusal.check(MARK.encode() in row["payload"])
        return add(self, **row)

    monkeypatch.setattr(Inbox, "add", failing)


def refuse_turn(monkeypatch: pytest.MonkeyPatch, refusal: Refusal) -> None:
    # Transcript.append: where every turn's messages are appended (store.append_messages, or the fenced write)
    append = Transcript.append

    def failing(self: Transcript, session_id: str, messages: Sequence[NewMessage], **options: Any) -> list[int]:
        refusal.check(any(MARK in (m.content or "") for m in messages))
        return append(self, session_id, messages, **options)

    monkeypatch.setattr(Transcript, "append", failing)


def refuse_attempts(monkeypatch: pytest.MonkeyPatch, refusal: Refusal) -> None:
    begin = Outbox.begin_attempt

    def failing(self: Outbox, outbox_id: int) -> int:
        refusal.check()
        return begin(self, outbox_id)

    monkeypatch.setattr(Outbox, "begin_attempt", failing)


def count_no_attempt_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commit every reply without its first attempt counted ahead (as a command's answer is), so its send counts
    one first."""
    monkeypatch.setattr(OutboxRouter, "counts_ahead", lambda self, platform: False)


def refuse_replies(monkeypatch: pytest.MonkeyPatch, refusal: Refusal, text: str) -> None:
    add = Outbox.add

    def failing(self: Outbox, **row: Any) -> int:
        refusal.check(text.encode() in row["payload"])
        return add(self, **row)

    monkeypatch.setattr(Outbox, "add", failing)


def refuse_commits(gateway: Gateway, refusal: Refusal) -> None:
    """While ``refusal`` is armed, SQLite refuses every ``COMMIT`` of the writer (its commit hook asks for a
    rollback)."""

    def hook() -> bool:
        if refusal.armed.is_set():
            refusal.raised += 1
            return True
        return False

    def install(store: StoreInterface) -> None:
        assert isinstance(store, Store)  # the hook is SQLite's own
        store._connection.set_commit_hook(hook)

    gateway.write(install)


def post(running: Running, text: str, session: str) -> tuple[int, dict[str, Any], float]:
    """Send ``text`` in ``session``: the status, the body (with the response's ``x-should-retry`` under
    ``"retry"``) and the seconds it took."""
    began = time.monotonic()
    status, headers, body = running.request({"messages": chat(text)}, headers={**AUTH, SESSION_HEADER: session})
    return status, {**body, "retry": headers.get("x-should-retry")}, time.monotonic() - began


def users(running: Running, chat_id: str) -> list[tuple[str, str | None]]:
    with running.gateway.read() as store:
        sessions = [s for s in store.list_sessions(limit=None) if s.chat_id == chat_id]
        return [(m.role, m.content) for s in sessions for m in store.load_transcript(s.id)]


def wait_answered(running: Running, chat_id: str, text: str) -> None:
    """Tick the gateway (a session the store refused waits out a pause, then the tick runs it) until ``text`` and
    its echo end the transcript."""

    def answered() -> bool:
        running.gateway.tick()
        return users(running, chat_id)[-2:] == [("user", text), ("assistant", f"echo: {text}")]

    poll_until(answered, 10, interval=0.1, what=f"the answer to {text!r}")


@pytest.fixture
def running(start: Start) -> Running:
    return start()


# -- the inbox commit ---------------------------------------------------------------------------------------------


def test_a_message_the_inbox_cannot_store_gets_a_503_at_once_and_nothing_is_kept(
    running: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    refusal = Refusal(full)
    refuse_inbox(monkeypatch, refusal)
    refusal.armed.set()
    status, body, took = post(running, MARK, "inbox")
    assert (status, body["error"]["code"]) == (503, "storage_unavailable")
    assert "could not be saved" in body["error"]["message"]
    assert "full" in body["error"]["message"]
    assert "send it again" in body["error"]["message"]
    assert body["retry"] is None  # nothing was kept: a retry is what the client should do
    assert took < PROMPT_S
    assert refusal.raised == 1
    assert running.gateway.wait_idle()
    assert users(running, "inbox") == []


# -- the turn's commit --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("error", [full, read_only], ids=["full", "read-only"])
def test_a_turn_whose_write_fails_gets_a_503_at_once_and_is_answered_once_the_store_writes_again(
    running: Running, monkeypatch: pytest.MonkeyPatch, error: Callable[[], apsw.Error]
) -> None:
    refusal = Refusal(error)
    refuse_turn(monkeypatch, refusal)
    refusal.armed.set()
    status, body, took = post(running, MARK, "turn")
    assert (status, body["error"]["code"]) == (503, "storage_unavailable")
    assert "could not be saved" in body["error"]["message"]
    assert "nothing needs to be sent again" in body["error"]["message"]
    assert body["retry"] == "false"  # the message is kept: a retry would run it twice
    assert took < PROMPT_S
    refusal.armed.clear()  # the store writes again: the kept message runs
    wait_answered(running, "turn", MARK)
    assert refusal.raised >= 1
    assert users(running, "turn") == [("user", MARK), ("assistant", f"echo: {MARK}")]


def test_a_turn_whose_commit_sqlite_refuses_gets_a_503_at_once(running: Running) -> None:
    refusal = Refusal(full)
    refuse_commits(running.gateway, refusal)
    assert post(running, "first", "commit")[0] == 200  # the session exists: the next message is one lone commit each
    gate = threading.Event()
    answer: dict[str, Any] = {}

    def send() -> None:
        answer["status"], answer["body"], answer["took"] = post(running, f"{MARK} at the commit", "commit")
        gate.set()

    # The inbox commit goes through; the turn's COMMIT is the one refused.
    original = Transcript.append

    def arm_then_append(self: Transcript, session_id: str, messages: Sequence[NewMessage], **options: Any) -> list[int]:
        if any(MARK in (m.content or "") for m in messages):
            refusal.armed.set()
        return original(self, session_id, messages, **options)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Transcript, "append", arm_then_append)
        sender = threading.Thread(target=send)
        sender.start()
        assert gate.wait(PROMPT_S)
        refusal.armed.clear()
    sender.join()
    assert (answer["status"], answer["body"]["error"]["code"]) == (503, "storage_unavailable")
    assert answer["body"]["retry"] == "false"
    assert answer["took"] < PROMPT_S
    assert refusal.raised >= 1
    wait_answered(running, "commit", f"{MARK} at the commit")  # kept, and run again once commits go through


def test_a_command_whose_answer_the_store_refuses_gets_a_503_at_once(
    running: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    refusal = Refusal(full)
    refuse_replies(monkeypatch, refusal, "Started a new session")  # answered by the supervisor, not by a turn
    refusal.armed.set()
    status, body, took = post(running, "/new", "command")
    assert (status, body["error"]["code"]) == (503, "storage_unavailable")
    assert "could not be answered" in body["error"]["message"]
    assert "full" in body["error"]["message"]
    assert body["retry"] == "false"  # kept: the next start answers it
    assert took < PROMPT_S
    assert refusal.raised == 1


# -- the reply's send ----------------------------------------------------------------------------------------------


def test_a_committed_reply_whose_send_cannot_be_counted_still_answers_its_request_at_once(
    running: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    refusal = Refusal(full)
    count_no_attempt_ahead(monkeypatch)  # a turn's reply has its first attempt counted in the turn's commit
    refuse_attempts(monkeypatch, refusal)
    refusal.armed.set()
    status, body, took = post(running, MARK, "outbox")
    assert status == 200, body
    assert body["choices"][0]["message"]["content"] == f"echo: {MARK}"
    assert took < PROMPT_S
    assert refusal.raised == 1
    assert users(running, "outbox") == [("user", MARK), ("assistant", f"echo: {MARK}")]
