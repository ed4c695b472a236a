"""Scheduled turns through a real ``hermesd``: ``hermesctl jobs`` through its control socket, and every due time
fired exactly once across a kill -9 and a restart (a job due while the daemon was down runs once late, or is skipped
as the job says)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hermes_actors.cli.hermesctl import main as hermesctl
from hermes_actors.store import Store
from hermes_actors.store.jobs import JobRow, JobState
from hermes_actors.testing import poll_until
from tests.daemon.test_daemon import CONFIG, Daemon, start_daemon

pytestmark = pytest.mark.slow

MISSED_AFTER_S = 1.0


def _ctl(home: Path, *args: str) -> str:
    result = CliRunner().invoke(hermesctl, [*args, "--home", str(home)])
    assert result.exit_code == 0, result.stderr or result.output
    assert result.stderr == "", result.stderr  # through hermesd: no "not running here" note
    return result.stdout


def _jobs(home: Path) -> dict[str, JobRow]:
    with Store.open(home / "state.db", readonly=True) as store:
        return {row.id: row for row in store.jobs.listed(limit=1000)}


def _facts(home: Path) -> tuple[int, dict[str, list[str]], dict[str, int], dict[str, int]]:
    """Pending inbox rows; each job's runs' inbox states; each prompt's user messages and echo replies."""
    with Store.open(home / "state.db", readonly=True) as store:
        connection = store._connection
        pending = int(connection.execute("SELECT count(*) FROM inbox WHERE state = 'pending'").get or 0)
        runs: dict[str, list[str]] = {}
        for message_id, state in connection.execute("SELECT platform_message_id, state FROM inbox ORDER BY id"):
            if str(message_id).startswith("job-"):
                job_id = "_".join(str(message_id).split("-")[1:2])
                runs.setdefault(job_id, []).append(str(state))
        users: dict[str, int] = {}
        replies: dict[str, int] = {}
        for role, content in connection.execute("SELECT role, content FROM messages"):
            counts = users if role == "user" else replies if role == "assistant" else None
            if counts is not None and content is not None:
                counts[str(content)] = counts.get(str(content), 0) + 1
    return pending, runs, users, replies


def test_jobs_fire_once_across_kill_9_and_a_restart_and_missed_ones_run_late_or_are_skipped(home: Path) -> None:
    (home / "config.yaml").write_text(CONFIG + f"jobs:\n  missed_after_s: {MISSED_AFTER_S}\n")
    daemon = Daemon(home, start_daemon(home))
    try:
        added = _ctl(home, "jobs", "add", "--every", "1s", "--chat", "api_server:ticker", "tick")
        assert added.startswith("Added job job_")
        assert ": every 1s, next run " in added
        ticker = added.split()[2].rstrip(":")
        once = {}
        for n in range(6):  # due from 1 s to 3.5 s from now: some before the kill, some while the daemon is down
            out = _ctl(home, "jobs", "add", "--in", f"{1 + n * 0.5}s", "--chat", f"api_server:c{n}", f"once {n}")
            once[out.split()[2].rstrip(":")] = f"once {n}"
        late = _ctl(home, "jobs", "add", "--in", "3s", "--chat", "api_server:late", "late one").split()[2].rstrip(":")
        skip = _ctl(home, "jobs", "add", "--in", "3s", "--missed", "skip", "--chat", "api_server:skip", "skipped one")
        skipped = skip.split()[2].rstrip(":")
        listed = json.loads(_ctl(home, "jobs", "list", "--json"))
        assert {job["id"] for job in listed} == {ticker, late, skipped, *once}
        poll_until(lambda: _jobs(home)[ticker].runs >= 2, timeout=15, what="the ticker running twice")
        daemon.process.kill()  # kill -9 while jobs are firing
        daemon.process.communicate(timeout=10)
        before = _jobs(home)
        time.sleep(3.0 + MISSED_AFTER_S)  # schedules move on while nothing runs: the late ones are missed
        daemon = Daemon(home, start_daemon(home))

        def settled() -> bool:
            jobs = _jobs(home)
            return _facts(home)[0] == 0 and all(jobs[j].state is JobState.DONE for j in [*once, late, skipped])

        poll_until(settled, timeout=20, what="every one-shot job done and no message pending")
        assert _ctl(home, "jobs", "pause", ticker) == f"Job {ticker} is paused; next run -.\n"
        poll_until(lambda: _facts(home)[0] == 0, timeout=10, what="the ticker's last run answered")
        assert daemon.stop()[0] == 0
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()
            daemon.process.communicate(timeout=10)
    jobs = _jobs(home)
    pending, runs, users, replies = _facts(home)
    assert pending == 0
    for job_id, prompt in once.items():  # each one-shot ran exactly once, answered once
        assert (jobs[job_id].runs, runs[job_id], users[prompt], replies[f"echo: {prompt}"]) == (1, ["done"], 1, 1)
    assert (jobs[late].runs, jobs[late].skipped, runs[late], users["late one"]) == (1, 0, ["done"], 1)
    assert (jobs[skipped].runs, jobs[skipped].skipped, skipped in runs) == (0, 1, False)
    ticks = jobs[ticker].runs
    assert ticks >= before[ticker].runs + 1  # the restart ran the missed ticks once, and went on
    assert runs[ticker] == ["done"] * ticks  # every due time fired once, and each run was answered
    assert (users["tick"], replies["echo: tick"]) == (ticks, ticks)
