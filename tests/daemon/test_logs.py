"""``daemon.log_format``: one JSON object or one logfmt line per event, and the session's fields on every line
about a session, whichever thread logged it."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_actors.agents.base import EchoAgent
from hermes_actors.agents.turn import AgentError, AgentReply, TurnInput
from hermes_actors.config import RuntimeConfig
from hermes_actors.daemon.config_file import load_settings
from hermes_actors.daemon.logs import LogFormat, configure_logging
from hermes_actors.errors import ConfigError
from hermes_actors.testing import FakeClock, open_fake_gateway

_LOGFMT_PAIR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^\s"=]+)(?: |$)')


class FailingModel(EchoAgent):
    """Logs as a model client would (on the agent pool's thread), then fails on ``fail``."""

    runs_inline = False

    def run_turn(self, turn: TurnInput, *, timeout_s: float) -> AgentReply:
        logging.getLogger("tests.model").info("calling the model for %d characters", len(turn.user_text))
        if turn.user_text == "fail":
            raise AgentError("the model endpoint answered 500")
        return super().run_turn(turn, timeout_s=timeout_s)


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """The root logger's handlers and level are put back after the test."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    stream = io.StringIO()
    try:
        yield stream
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)


def _converse(path: Path, log_format: LogFormat, stream: io.StringIO) -> tuple[str, str]:
    """A failed agent call, an answered turn, a reset and a passivation; return the two sessions' ids."""
    configure_logging(logging.INFO, stream, log_format=log_format)
    clock = FakeClock()
    with open_fake_gateway(path, agent=FailingModel(), clock=clock) as (gateway, fake):
        fake.push("fail", chat_id="a")
        assert "the agent failed" in fake.pop().text
        fake.push("hello", chat_id="b")
        answered = fake.pop()
        fake.push("/new", chat_id="a")
        assert fake.pop().text  # the reset's confirmation
        assert gateway.wait_idle()
        clock.advance(RuntimeConfig().passivate_after_s + 1)
        gateway.tick()
        assert gateway.wait_idle()
        first = fake.sent[0].session_id
        assert first is not None
        assert answered.session_id is not None
        return first, answered.session_id


def test_json_lines_about_a_session_carry_its_id_and_platform(tmp_path: Path, captured: io.StringIO) -> None:
    failed, answered = _converse(tmp_path / "state.db", "json", captured)
    records = [json.loads(line) for line in captured.getvalue().splitlines()]
    assert records, "nothing was logged"
    assert all({"time", "level", "logger", "msg"} <= record.keys() for record in records)
    about = [r for r in records if re.search(r"session \S+", r["msg"]) and "auto-prune" not in r["msg"]]
    for record in about:
        named = re.search(r"session (\S+?):? ", record["msg"] + " ")
        assert named is not None
        assert (record.get("session_id"), record.get("platform")) == (named.group(1), "fake"), record

    def lines(session_id: str, words: str) -> list[dict[str, str]]:
        return [r for r in records if r.get("session_id") == session_id and words in r["msg"]]

    (agent_failed,) = lines(failed, "agent failed: the model endpoint answered 500")
    assert agent_failed["level"] == "warning"
    assert lines(failed, "ended (new_session)")
    assert lines(failed, "actor stopped")  # the ended session's
    assert lines(answered, "actor stopped")  # the passivation of the idle one
    model = [r for r in records if r["logger"] == "tests.model"]
    assert {(r["session_id"], r["platform"]) for r in model} == {(failed, "fake"), (answered, "fake")}


def test_logfmt_lines_are_key_value_pairs_with_the_session_fields(tmp_path: Path, captured: io.StringIO) -> None:
    failed, _ = _converse(tmp_path / "state.db", "logfmt", captured)
    lines = captured.getvalue().splitlines()
    assert lines
    parsed = []
    for line in lines:
        pairs = _LOGFMT_PAIR.findall(line)
        assert "".join(f"{k}={v} " for k, v in pairs).strip() == line, line
        parsed.append({k: v.strip('"') for k, v in pairs})
    assert all(list(fields)[:4] == ["time", "level", "logger", "msg"] for fields in parsed)
    ended = [f for f in parsed if "ended (new_session)" in f["msg"]]
    assert [(f["session_id"], f["platform"]) for f in ended] == [(failed, "fake")]


def test_an_exception_stays_on_its_line_in_the_error_field(captured: io.StringIO) -> None:
    configure_logging(logging.INFO, captured, log_format="json")
    try:
        raise ValueError("broken\nacross lines")
    except ValueError:
        logging.getLogger("tests").exception("it failed", extra={"attempt": 2})
    (line,) = captured.getvalue().splitlines()
    record = json.loads(line)
    assert (record["msg"], record["attempt"]) == ("it failed", 2)
    assert "ValueError: broken\nacross lines" in record["error"]
    assert "session_id" not in record


def test_the_log_format_is_logfmt_by_default_and_json_on_request(tmp_path: Path) -> None:
    file = tmp_path / "config.yaml"
    file.write_text("daemon:\n  log_level: info\n")
    assert load_settings(file).daemon.log_format == "logfmt"
    file.write_text("daemon:\n  log_format: json\n")
    assert load_settings(file).daemon.log_format == "json"
    file.write_text("daemon:\n  log_format: xml\n")
    with pytest.raises(ConfigError, match=r"daemon\.log_format"):
        load_settings(file)
