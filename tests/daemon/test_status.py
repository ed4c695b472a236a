"""``hermesctl status`` against a real ``hermesd``: the numbers of ``/metrics``, and exit 1 once it is not ready."""

from __future__ import annotations

import json
import signal
import socket
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from prometheus_client.parser import text_string_to_metric_families

from hermes_actors.cli.hermesctl import main as hermesctl
from hermes_actors.testing import poll_until
from tests.daemon.test_daemon import SECRET, Daemon, start_daemon


def _config(webhook_port: int) -> str:
    return f"""
daemon:
  drain_timeout_s: 10
  log_format: json
platforms:
  api_server:
    port: 0
  webhook:
    port: {webhook_port}
    routes:
      default:
        secret: {SECRET}
"""


def _chat(api: str, text: str) -> None:
    body = json.dumps({"model": "hermes-agent", "messages": [{"role": "user", "content": text}]}).encode()
    request = urllib.request.Request(
        f"{api}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert json.loads(response.read())["choices"][0]["message"]["content"] == f"echo: {text}"


def _turns_scraped(api: str) -> float:
    with urllib.request.urlopen(f"{api}/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "hermes_turns_total" and sample.labels == {"platform": "api_server", "outcome": "ok"}
    )


@pytest.mark.slow
def test_status_shows_the_numbers_of_metrics_and_exits_1_naming_what_is_not_ready(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.yaml").write_text(_config(0))
    process = start_daemon(home)
    try:
        daemon = Daemon(home, process)
        _chat(daemon.api, "one")
        _chat(daemon.api, "two")
        runner = CliRunner()

        def settled() -> Result | None:
            # The reply reaches its request before the outbox marks it sent (that write is not waited for).
            shown = runner.invoke(hermesctl, ["status", "--home", str(home)])
            return shown if "outbox pending: api_server 0" in shown.output else None

        shown = poll_until(settled, what="the replies marked sent")
        assert shown.exit_code == 0, shown.output
        lines = shown.output.splitlines()
        assert "  ready: yes" in lines
        assert any(line.startswith("  turns: 2 (ok 2); latency: 2, mean ") for line in lines), shown.output
        assert any(line.startswith("  agent calls: 2, mean ") for line in lines), shown.output
        assert "  inbox pending: 0" in lines
        assert "  actors: 2 live, 2 activated; passivated: none" in lines  # each request without a session is new
        assert any(line.startswith("  outbox pending: api_server 0") for line in lines), shown.output

        as_json = runner.invoke(hermesctl, ["status", "--home", str(home), "--json"])
        assert as_json.exit_code == 0, as_json.output
        state = json.loads(as_json.output)
        assert state["ready"]["ready"] is True
        assert state["ready"]["reasons"] == []
        assert state["vitals"]["turns"] == {"ok": 2}
        assert state["vitals"]["inbox_pending"] == 0
        assert state["vitals"]["live_actors"] == 2
        assert state["vitals"]["turns"]["ok"] == _turns_scraped(daemon.api)

        with socket.socket() as taken:  # the webhook's new port is in use: its restart fails
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            (home / "config.yaml").write_text(_config(taken.getsockname()[1]))
            process.send_signal(signal.SIGHUP)

            def failed() -> Result | None:
                result = runner.invoke(hermesctl, ["status", "--home", str(home)])
                return result if result.exit_code == 1 else None

            not_ready = poll_until(failed, what="hermesctl status to report the failed webhook")
        assert "  webhook: failed" in not_ready.output.splitlines()
        assert "  ready: NO: webhook: failed (" in not_ready.output
        assert not_ready.stderr.startswith("Error: hermesd is not ready: webhook: failed (")
        failed_json = runner.invoke(hermesctl, ["status", "--home", str(home), "--json"])
        assert failed_json.exit_code == 1
        reasons = json.loads(failed_json.stdout)["ready"]["reasons"]
        assert len(reasons) == 1
        assert reasons[0].startswith("webhook: failed (")
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    logged = [json.loads(line) for line in err.splitlines()]  # daemon.log_format: json, one object a line
    assert any(r["msg"].startswith("webhook not restarted") for r in logged)
    assert all(r.get("platform") == "api_server" for r in logged if r.get("session_id"))
