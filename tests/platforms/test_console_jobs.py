"""The console's Jobs page: the scheduled turns rendered (hostile prompt text escaped), Pause, Resume, Run now and
Delete through the jobs port behind the login's CSRF token, and the page behind the login."""

from __future__ import annotations

from hermes_actors.job_port import JobSpec
from hermes_actors.testing import poll_until
from tests.platforms.console_client import Console, console

__all__ = ["console"]  # the fixture


def test_the_jobs_page_needs_a_login(console: Console) -> None:
    answer = console.fresh().get("/console/jobs")
    assert answer.status == 303
    assert answer.location.startswith("/console/login")


def test_the_jobs_page_lists_every_job_with_its_schedule_and_target_escaped(console: Console) -> None:
    jobs = console.api.gateway.jobs
    every = jobs.add(JobSpec(prompt="<script>alert(1)</script> report", every="1h", chat="api_server:ops"))
    cron = jobs.add(JobSpec(prompt="morning", cron="30 8 * * 1-5", tz="Europe/Berlin", chat="api_server:ops"))
    client = console.logged_in()
    page = client.get("/console/jobs")
    assert page.status == 200, page.text[:500]
    assert '<a href="/console/jobs" class="here">Jobs</a>' in page.text
    assert "<script>alert(1)</script>" not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt; report" in page.text
    assert f'id="job-{every.id}"' in page.text
    assert f'id="job-{cron.id}"' in page.text
    assert "every 1h" in page.text
    assert "cron &#39;30 8 * * 1-5&#39; (Europe/Berlin)" in page.text
    assert "2 scheduled" in page.text


def test_pause_resume_run_and_delete_from_the_page(console: Console) -> None:
    jobs = console.api.gateway.jobs
    job = jobs.add(JobSpec(prompt="ping", every="1h", chat="api_server:ops"))
    client = console.logged_in()
    csrf = client.get("/console/jobs").csrf()
    for action, state in (("pause", "paused"), ("resume", "active")):
        answer = client.post(f"/console/jobs/{job.id}", {"csrf": csrf, "action": action})
        assert (answer.status, answer.location) == (303, "/console/jobs")
        assert jobs.get(job.id).state == state
    assert client.post(f"/console/jobs/{job.id}", {"csrf": csrf, "action": "run"}).status == 303
    ran = jobs.get(job.id)
    assert ran.runs == 1

    def answered() -> bool:
        with console.api.gateway.read() as store:
            row = store.inbox.get(ran.last_inbox_id or 0)
            return row is not None and row.state == "done"

    poll_until(answered, what="the run asked for on the page answered")
    refused = client.post(f"/console/jobs/{job.id}", {"csrf": "forged", "action": "delete"})
    assert refused.status == 403
    assert jobs.listed() != []
    assert client.post(f"/console/jobs/{job.id}", {"csrf": csrf, "action": "delete"}).status == 303
    assert jobs.listed() == []
    gone = client.post(f"/console/jobs/{job.id}", {"csrf": csrf, "action": "run"})
    assert gone.status == 404
    assert "no job" in gone.text
    assert client.post(f"/console/jobs/{job.id}", {"csrf": csrf, "action": "explode"}).status == 400
    assert "No jobs are scheduled." in client.get("/console/jobs").text
