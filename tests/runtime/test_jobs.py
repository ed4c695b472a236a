"""Scheduled turns through a running gateway on a fake clock: each schedule kind fires as an ordinary message of its
chat and is answered there; a session target, a fresh session per run; a due time missed while no gateway ran runs
once late or is skipped; pause, resume and a run by hand; job.fired's event."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import msgspec
import pytest

from hermes_actors.config import EVENTS_PLATFORM, EventKind, EventsConfig, EventWebhook, RuntimeConfig
from hermes_actors.job_port import JobError, JobNotFoundError, JobSpec
from hermes_actors.lifecycle.schedule import JobsConfig
from hermes_actors.messages import decode_inbound, decode_outbound
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.store import InboxState, StoreInterface
from hermes_actors.testing import FakeClock, FakePlatform

UTC = ZoneInfo("UTC")
CHAT = "fake:chat-1"
KEY = "agent:main:fake:dm:chat-1"
SECRET = "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="


@contextmanager
def running(path: Path, clock: FakeClock, **options: Any) -> Iterator[tuple[Gateway, FakePlatform]]:
    fake = FakePlatform("fake")
    gateway = Gateway(path, config=RuntimeConfig(), senders=[fake], clock=clock, tz=UTC, **options)
    fake.attach(gateway)
    try:
        yield gateway, fake
    finally:
        gateway.stop(timeout=10)


def _tick(gateway: Gateway, clock: FakeClock, seconds: float) -> None:
    clock.advance(seconds)
    gateway.timers.poke()


def _user_texts(store: StoreInterface, session_id: str) -> list[str]:
    return [m.content or "" for m in store.load_transcript(session_id) if m.role == "user"]


def _replies(fake: FakePlatform, count: int) -> list[str]:
    return [fake.pop().text for _ in range(count)]


def test_a_one_shot_job_is_a_message_of_its_chat_answered_there_once(db_path: Path) -> None:
    clock = FakeClock()
    with running(db_path, clock) as (gateway, fake):
        fake.push("hello")
        assert fake.pop().text == "echo: hello"
        job = gateway.jobs.add(JobSpec(prompt="water the plants", in_="3s", chat=CHAT))
        due = clock() + 3
        assert (job.schedule, job.state, job.next_due_at, job.target, job.chat) == ("at", "active", due, "chat", CHAT)
        _tick(gateway, clock, 2.9)
        assert gateway.wait_idle()
        assert len(fake.sent) == 1
        _tick(gateway, clock, 0.2)
        reply = fake.pop()
        assert (reply.text, reply.chat_id) == ("echo: water the plants", "chat-1")
        assert gateway.wait_idle()
        done = gateway.jobs.get(job.id)
        assert (done.state, done.runs, done.next_due_at, done.last_run_at) == ("done", 1, None, clock())
        session_id = gateway.session_for(KEY)
        assert session_id is not None
        with gateway.read() as store:
            assert _user_texts(store, session_id) == ["hello", "water the plants"]  # an ordinary turn of the chat
            row = store.inbox.get(done.last_inbox_id or 0)
            assert row is not None
            assert (row.platform, row.platform_message_id, row.state) == (
                "fake",
                f"job-{job.id}-{due * 1000:.0f}",
                InboxState.DONE,
            )
            assert decode_inbound(row.payload).source.user_id == "user-1"  # the chat as its session knows it
        _tick(gateway, clock, 3600)
        assert gateway.wait_idle()
        assert len(fake.sent) == 2  # once


def test_an_interval_job_runs_at_each_interval(db_path: Path) -> None:
    clock = FakeClock()
    with running(db_path, clock) as (gateway, fake):
        job = gateway.jobs.add(JobSpec(prompt="tick", every="10m", chat=CHAT))
        for _ in range(3):
            _tick(gateway, clock, 600)
            assert fake.pop().text == "echo: tick"
        assert gateway.wait_idle()
        assert (gateway.jobs.get(job.id).runs, gateway.jobs.get(job.id).next_due_at) == (3, clock() + 600)


def test_a_cron_job_runs_at_the_times_of_its_expression_in_its_zone(db_path: Path) -> None:
    clock = FakeClock(1_764_460_800.0)  # 2025-11-30 00:00 UTC, 01:00 in Berlin
    with running(db_path, clock) as (gateway, fake):
        job = gateway.jobs.add(JobSpec(prompt="morning", cron="30 2 * * *", tz="Europe/Berlin", chat=CHAT))
        assert job.next_due_at == clock() + 5400  # 02:30 Berlin is 01:30 UTC
        assert job.describe == "cron '30 2 * * *' (Europe/Berlin)"
        _tick(gateway, clock, 5400)
        assert fake.pop().text == "echo: morning"
        assert gateway.wait_idle()
        assert gateway.jobs.get(job.id).next_due_at == clock() + 86400


def test_a_session_target_runs_in_that_session_and_answers_its_chat_or_the_chat_given(db_path: Path) -> None:
    clock = FakeClock()
    with running(db_path, clock) as (gateway, fake):
        fake.push("first", chat_id="chat-9", user_id="u9")
        fake.pop()
        assert gateway.wait_idle()
        named = gateway.session_for("agent:main:fake:dm:chat-9")
        assert named is not None
        job = gateway.jobs.add(JobSpec(prompt="to the session", every="1h", session_id=named[:12]))  # a prefix
        assert (job.target, job.session_id, job.chat) == ("session", named, "fake:chat-9")
        elsewhere = gateway.jobs.add(JobSpec(prompt="told elsewhere", in_="1h", session_id=named, chat=CHAT))
        _tick(gateway, clock, 3600)
        replies = {reply.text: reply for reply in (fake.pop(), fake.pop())}
        assert (replies["echo: to the session"].chat_id, replies["echo: to the session"].session_id) == (
            "chat-9",
            named,
        )
        assert (replies["echo: told elsewhere"].chat_id, replies["echo: told elsewhere"].session_id) == (
            "chat-1",
            named,
        )
        assert gateway.wait_idle()
        with gateway.read() as store:
            assert sorted(_user_texts(store, named)[1:]) == ["to the session", "told elsewhere"]
        assert gateway.jobs.get(elsewhere.id).state == "done"


def test_a_session_target_that_ended_runs_in_its_chats_current_session(db_path: Path) -> None:
    clock = FakeClock()
    with running(db_path, clock) as (gateway, fake):
        fake.push("first", chat_id="chat-9", user_id="u9")
        fake.pop()
        assert gateway.wait_idle()
        named = gateway.session_for("agent:main:fake:dm:chat-9")
        assert named is not None
        job = gateway.jobs.add(JobSpec(prompt="still here?", every="1h", session_id=named))
        fake.push("/new", chat_id="chat-9", user_id="u9")  # ends it; the chat's next message opens another
        fake.pop()
        assert gateway.wait_idle()
        _tick(gateway, clock, 3600)
        reply = fake.pop()
        assert gateway.wait_idle()
        current = gateway.session_for("agent:main:fake:dm:chat-9")
        assert (reply.text, reply.chat_id, reply.session_id) == ("echo: still here?", "chat-9", current)
        assert current != named
        assert gateway.jobs.get(job.id).runs == 1


def test_a_fresh_target_opens_a_new_session_for_every_run(db_path: Path) -> None:
    clock = FakeClock()
    with running(db_path, clock) as (gateway, fake):
        job = gateway.jobs.add(JobSpec(prompt="report", every="1h", chat=CHAT, fresh=True))
        sessions = []
        for _ in range(2):
            _tick(gateway, clock, 3600)
            sessions.append(fake.pop().session_id)
        assert job.target == "fresh"
        assert len(set(sessions)) == 2
        assert None not in sessions


def test_a_due_time_missed_while_nothing_ran_runs_once_late_or_is_skipped(db_path: Path) -> None:
    clock = FakeClock()
    with running(db_path, clock, jobs=JobsConfig(missed_after_s=60)) as (gateway, _):
        late = gateway.jobs.add(JobSpec(prompt="late", every="10m", chat=CHAT))
        skipped = gateway.jobs.add(JobSpec(prompt="skipped", every="10m", chat=CHAT, missed="skip"))
        first_due = late.next_due_at
        assert first_due is not None
    clock.advance(3600)  # down for an hour: six due times of each passed
    with running(db_path, clock, jobs=JobsConfig(missed_after_s=60)) as (gateway, fake):
        assert fake.pop().text == "echo: late"  # once, however many times passed
        assert gateway.wait_idle()
        ran, kept = gateway.jobs.get(late.id), gateway.jobs.get(skipped.id)
        assert (ran.runs, ran.skipped, ran.next_due_at) == (1, 0, first_due + 3600)  # the old phase goes on
        assert (kept.runs, kept.skipped, kept.next_due_at) == (0, 1, first_due + 3600)
        assert fake.sent == [fake.sent[0]]


def test_a_paused_job_does_not_run_and_resumes_from_now(db_path: Path) -> None:
    clock = FakeClock()
    with running(db_path, clock) as (gateway, fake):
        job = gateway.jobs.add(JobSpec(prompt="nag", every="1m", chat=CHAT))
        paused = gateway.jobs.pause(job.id)
        assert (paused.state, paused.next_due_at) == ("paused", None)
        _tick(gateway, clock, 600)
        assert gateway.wait_idle()
        assert fake.sent == []
        resumed = gateway.jobs.resume(job.id)
        assert (resumed.state, resumed.next_due_at) == ("active", clock() + 60)
        _tick(gateway, clock, 60)
        assert fake.pop().text == "echo: nag"
        assert gateway.jobs.delete(job.id)
        with pytest.raises(JobNotFoundError, match="no job"):
            gateway.jobs.get(job.id)


def test_a_run_by_hand_is_a_turn_now_and_leaves_the_schedule(db_path: Path) -> None:
    clock = FakeClock()
    with running(db_path, clock) as (gateway, fake):
        job = gateway.jobs.add(JobSpec(prompt="now please", every="1d", chat=CHAT))
        ran = gateway.jobs.run(job.id)
        assert fake.pop().text == "echo: now please"
        assert (ran.runs, ran.next_due_at) == (1, job.next_due_at)
        assert ran.last_inbox_id is not None


def test_a_job_fired_is_told_to_the_webhooks_that_want_it_with_the_run(db_path: Path) -> None:
    clock = FakeClock()
    hook = EventWebhook(url="https://hooks.example.com/x", events=(EventKind.JOB_FIRED,), secret=SECRET)
    events = EventsConfig(webhooks={"ops": hook})
    with running(db_path, clock, events=events) as (gateway, fake):
        job = gateway.jobs.add(JobSpec(prompt="ping", in_="1s", chat=CHAT))
        _tick(gateway, clock, 1)
        fake.pop()
        assert gateway.wait_idle()
        with gateway.read() as store:
            rows = store.outbox.unsent(EVENTS_PLATFORM, limit=10)
        bodies = [msgspec.json.decode(decode_outbound(row.payload).text) for row in rows]
        assert [b["type"] for b in bodies] == ["job.fired"]
        data = bodies[0]["data"]
        assert (data["job_id"], data["prompt"], data["chat_id"], data["late_s"]) == (job.id, "ping", "chat-1", 0.0)
        assert data["inbox_id"] == gateway.jobs.get(job.id).last_inbox_id


def test_a_job_refused_says_which_field_and_why(db_path: Path) -> None:
    clock = FakeClock()
    with running(db_path, clock) as (gateway, _):
        with pytest.raises(JobError, match=r"^target: give session_id \(a session\) or chat"):
            gateway.jobs.add(JobSpec(prompt="x", in_="1m"))
        with pytest.raises(JobError, match=r"^session_id: no session"):
            gateway.jobs.add(JobSpec(prompt="x", in_="1m", session_id="nope"))
        with pytest.raises(JobError, match=r"^chat: 'telegram' must be PLATFORM:CHAT"):
            gateway.jobs.add(JobSpec(prompt="x", in_="1m", chat="telegram"))
        with pytest.raises(JobError, match=r"^prompt: is empty"):
            gateway.jobs.add(JobSpec(prompt=" ", in_="1m", chat=CHAT))
        with pytest.raises(JobError, match=r"^missed: 'later' must be run"):
            gateway.jobs.add(JobSpec(prompt="x", in_="1m", chat=CHAT, missed="later"))
        assert gateway.jobs.listed() == []
