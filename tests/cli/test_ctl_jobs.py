"""``hermesctl jobs`` on a home without a running daemon: each command on the store, the usage and job errors as
``Error:`` lines with their exit codes, and a run by hand left for the next start."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from hermes_actors.cli.hermesctl import main
from hermes_actors.routing import SessionSource
from hermes_actors.store import InboxState, Store


def _ctl(home: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, [*args, "--home", str(home)])
    return result.exit_code, result.stdout, result.stderr


def test_add_list_show_pause_resume_run_and_delete_on_the_store(home: Path, store: Store) -> None:
    store.create_session(SessionSource(platform="telegram", account_id="main", chat_id="42", user_id="42"))
    code, out, err = _ctl(home, "jobs", "add", "--every", "10m", "--chat", "telegram:42", "stand", "up")
    assert code == 0, err
    assert out.startswith("Added job job_")
    assert ": every 10m, next run " in out
    assert err == "hermesd is not running here: the job runs once it starts.\n"
    job_id = out.split()[2].rstrip(":")
    code, out, _ = _ctl(home, "jobs", "list")
    assert code == 0
    assert out.splitlines()[0].split() == ["ID", "STATE", "SCHEDULE", "NEXT", "RUN", "RUNS", "PROMPT"]
    assert job_id in out
    assert "stand up" in out
    shown = json.loads(_ctl(home, "jobs", "show", job_id, "--json")[1])
    assert (shown["prompt"], shown["chat"], shown["target"], shown["owner"], shown["created_by"]) == (
        "stand up",
        "telegram:42",
        "chat",
        "operator",
        "cli",
    )
    assert _ctl(home, "jobs", "pause", job_id)[1] == f"Job {job_id} is paused; next run -.\n"
    assert "is active; next run" in _ctl(home, "jobs", "resume", job_id)[1]
    code, out, err = _ctl(home, "jobs", "run", job_id)
    assert code == 0
    ran = json.loads(_ctl(home, "jobs", "show", job_id, "--json")[1])
    assert out == f"Job {job_id} runs now (inbox row {ran['last_inbox_id']}).\n"
    assert err == "hermesd is not running here: the run waits for its start.\n"
    with Store.open(home / "state.db", readonly=True) as reader:
        row = reader.inbox.get(ran["last_inbox_id"])
        assert row is not None
        assert (row.platform, row.account_id, row.state, row.owner) == (
            "telegram",
            "main",
            InboxState.PENDING,
            "hermesctl",
        )
    assert _ctl(home, "jobs", "delete", job_id) == (0, f"Deleted job {job_id}.\n", "")
    assert _ctl(home, "jobs", "list")[1] == "No jobs. Add one with 'hermesctl jobs add'.\n"


def test_a_missing_schedule_or_target_is_a_usage_error(home: Path, store: Store) -> None:
    code, _, err = _ctl(home, "jobs", "add", "--chat", "telegram:42", "hi")
    assert code == 2
    assert "Error: give one of --in, --at, --every or --cron (got none)" in err
    code, _, err = _ctl(home, "jobs", "add", "--in", "3s", "--every", "1m", "--chat", "telegram:42", "hi")
    assert (code, "(got --in, --every)" in err) == (2, True)
    code, _, err = _ctl(home, "jobs", "add", "--in", "3s", "hi")
    assert code == 2
    assert "Error: give --session ID or --chat PLATFORM:CHAT: where the job's runs go" in err


def test_a_job_the_store_refuses_is_an_error_line_naming_the_field(home: Path, store: Store) -> None:
    assert _ctl(home, "jobs", "add", "--every", "soon", "--chat", "telegram:42", "hi")[:3:2] == (
        1,
        "Error: every: 'soon' is not a duration; write a number and a unit (s, m, h, d, w), such as 30s, 10m or "
        "1h30m\n",
    )
    code, _, err = _ctl(home, "jobs", "add", "--cron", "0 9 * * *", "--tz", "Mars/Base", "--chat", "telegram:42", "x")
    assert (code, err) == (
        1,
        "Error: tz: unknown time zone 'Mars/Base'; use an IANA name such as Europe/Berlin or UTC\n",
    )
    code, _, err = _ctl(home, "jobs", "add", "--in", "1m", "--session", "nosuch", "x")
    assert code == 1
    assert err.startswith("Error: session_id: no session")
    assert _ctl(home, "jobs", "show", "job_nope") == (
        1,
        "",
        "Error: no job 'job_nope'; 'hermesctl jobs list' (or GET /api/jobs) shows the jobs\n",
    )
    assert _ctl(home, "jobs", "delete", "job_nope")[0] == 1


def test_each_schedule_and_target_flag_of_the_issues_names_makes_its_job(home: Path, store: Store) -> None:
    # Issue 36 "Names": --in DURATION, --at TIME, --every DURATION, --cron EXPR [--tz ZONE]; --session ID or --chat
    # PLATFORM:CHAT; the prompt as the argument.
    session = store.create_session(SessionSource(platform="telegram", account_id="main", chat_id="42", user_id="42"))

    def added(*args: str) -> dict[str, object]:
        code, out, err = _ctl(home, "jobs", "add", *args, "--json")
        assert code == 0, err
        shown: dict[str, object] = json.loads(out)
        return shown

    once = added("--in", "3s", "--chat", "telegram:42", "in three seconds")
    assert (once["schedule"], once["target"], once["chat"], once["prompt"]) == (
        "at",
        "chat",
        "telegram:42",
        "in three seconds",
    )
    at = added("--at", "2099-12-01T09:00", "--tz", "UTC", "--session", session.id, "at nine")
    assert (at["schedule"], at["target"], at["session_id"]) == ("at", "session", session.id)
    assert float(str(at["spec"])) == 4099798800  # 2099-12-01T09:00 UTC
    every = added("--every", "10m", "--chat", "telegram:42", "every ten")
    assert (every["schedule"], float(str(every["spec"]))) == ("every", 600)
    cron = added("--cron", "30 8 * * 1-5", "--tz", "Europe/Berlin", "--chat", "telegram:42", "weekday", "mornings")
    assert (cron["schedule"], cron["spec"], cron["tz"], cron["prompt"]) == (
        "cron",
        "30 8 * * 1-5",
        "Europe/Berlin",
        "weekday mornings",
    )
