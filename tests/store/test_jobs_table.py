"""Contract tests of the jobs table on both stores: a due time advances once, from the value read; owners see only
their own jobs; pause, resume and delete."""

from __future__ import annotations

from hermes_actors.routing import SessionSource
from hermes_actors.store import StoreInterface
from hermes_actors.store.jobs import Jobs, JobState, JobTarget, NewJob
from hermes_actors.testing import FakeClock

CHAT = SessionSource(platform="telegram", account_id="main", chat_type="dm", chat_id="42", user_id="42")


def _job(job_id: str, *, owner: str = "operator", due: float = 100.0) -> NewJob:
    return NewJob(
        id=job_id,
        owner=owner,
        prompt="water the plants",
        schedule="every",
        spec="60.0",
        tz=None,
        target=JobTarget.CHAT,
        session_id=None,
        chat=CHAT,
        missed="run",
        next_due_at=due,
        created_by="cli",
    )


def test_a_job_reads_back_as_stored_with_its_chat(store: StoreInterface, clock: FakeClock) -> None:
    jobs = Jobs(store.sql, clock)
    added = jobs.add(_job("job_a"))
    assert added == jobs.get("job_a")
    assert (added.chat, added.state, added.next_due_at, added.runs, added.created_at) == (
        CHAT,
        JobState.ACTIVE,
        100.0,
        0,
        clock(),
    )
    assert jobs.get("job_missing") is None


def test_a_due_time_advances_once_from_the_value_read(store: StoreInterface, clock: FakeClock) -> None:
    jobs = Jobs(store.sql, clock)
    jobs.add(_job("job_a", due=100.0))
    assert [row.id for row in jobs.due(99.0)] == []
    assert [row.id for row in jobs.due(100.0)] == ["job_a"]
    with store.transaction():
        assert jobs.advance("job_a", 100.0, next_due_at=160.0, ran=True, at=101.0)
    with store.transaction():  # a second process that read the same due time finds nothing to advance
        assert not jobs.advance("job_a", 100.0, next_due_at=160.0, ran=True, at=102.0)
    row = jobs.get("job_a")
    assert row is not None
    assert (row.next_due_at, row.runs, row.skipped, row.last_run_at) == (160.0, 1, 0, 101.0)
    with store.transaction():
        assert jobs.advance("job_a", 160.0, next_due_at=None, ran=False, at=500.0)
    row = jobs.get("job_a")
    assert row is not None
    assert (row.state, row.next_due_at, row.runs, row.skipped) == (JobState.DONE, None, 1, 1)
    assert jobs.active() == []


def test_owners_see_and_change_only_their_own_jobs(store: StoreInterface, clock: FakeClock) -> None:
    jobs = Jobs(store.sql, clock)
    jobs.add(_job("job_a", owner="telegram~main:42"))
    jobs.add(_job("job_b", owner="telegram~main:7", due=50.0))
    assert [row.id for row in jobs.listed(owner="telegram~main:42")] == ["job_a"]
    assert {row.id for row in jobs.listed()} == {"job_a", "job_b"}
    assert jobs.get("job_b", owner="telegram~main:42") is None
    assert jobs.pause("job_b", owner="telegram~main:42") is None
    assert not jobs.delete("job_b", owner="telegram~main:42")
    assert jobs.count_open("telegram~main:42") == 1
    assert jobs.active() == [("job_b", 50.0), ("job_a", 100.0)]


def test_a_paused_job_is_not_due_and_resumes_at_the_time_given(store: StoreInterface, clock: FakeClock) -> None:
    jobs = Jobs(store.sql, clock)
    jobs.add(_job("job_a"))
    paused = jobs.pause("job_a")
    assert paused is not None
    assert (paused.state, paused.next_due_at) == (JobState.PAUSED, None)
    assert jobs.due(1e12) == []
    with store.transaction():
        assert not jobs.advance("job_a", 100.0, next_due_at=160.0, ran=True, at=101.0)
    resumed = jobs.resume("job_a", 900.0)
    assert resumed is not None
    assert (resumed.state, resumed.next_due_at) == (JobState.ACTIVE, 900.0)
    jobs.ran("job_a", 17, at=901.0, counted=True)
    row = jobs.get("job_a")
    assert row is not None
    assert (row.last_inbox_id, row.runs, row.last_run_at) == (17, 1, 901.0)
    assert jobs.delete("job_a")
    assert not jobs.delete("job_a")
