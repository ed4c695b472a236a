"""``hermesctl chat`` without a daemon: in-process turns on the store, resume and continue with the recap."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from hermes_actors.cli.hermesctl import main as hermesctl
from hermes_actors.store import Store


def _chat(home: Path, *args: str, lines: str) -> tuple[int, str]:
    result = CliRunner().invoke(hermesctl, ["chat", "--home", str(home), *args], input=lines)
    return result.exit_code, result.output


def _session(output: str) -> str:
    found = re.search(r"resume it with: hermesctl chat --resume (\S+)", output)
    assert found is not None, output
    return found[1]


def test_piped_lines_are_turns_and_the_exit_line_names_the_session(tmp_path: Path) -> None:
    code, output = _chat(tmp_path, lines="hello\n\nsecond line\n/exit\nnever sent\n")
    assert code == 0, output
    assert "echo: hello" in output
    assert "echo: second line" in output
    session = _session(output)
    with Store.open(tmp_path / "state.db", readonly=True) as store:
        record = store.get_session(session)
        contents = [m.content for m in store.load_transcript(session)]
    assert record.source == "cli"
    assert contents == ["hello", "echo: hello", "second line", "echo: second line"]


def test_slash_commands_work_and_resume_by_title_shows_the_recap(tmp_path: Path) -> None:
    code, output = _chat(tmp_path, lines="plan the trip\n/title Trip planning\n")
    assert code == 0, output
    session = _session(output)
    code, output = _chat(tmp_path, "--resume", "Trip planning", lines="what next\n")
    assert code == 0, output
    assert f"resuming {session}" in output
    assert "you: plan the trip" in output
    assert "agent: echo: plan the trip" in output
    assert "echo: what next" in output
    assert _session(output) == session


def test_continue_picks_the_most_recent_terminal_session(tmp_path: Path) -> None:
    _chat(tmp_path, lines="older\n")
    _, output = _chat(tmp_path, lines="newer\n")
    newest = _session(output)
    code, output = _chat(tmp_path, "-c", lines="again\n")
    assert code == 0, output
    assert _session(output) == newest
    with Store.open(tmp_path / "state.db", readonly=True) as store:
        assert [m.content for m in store.load_transcript(newest)][-2:] == ["again", "echo: again"]


def test_continue_with_nothing_to_continue_starts_a_new_conversation(tmp_path: Path) -> None:
    code, output = _chat(tmp_path, "--continue", lines="first ever\n")
    assert code == 0, output
    assert "echo: first ever" in output


def test_unknown_and_ambiguous_references_exit_1_with_the_candidates(tmp_path: Path) -> None:
    code, output = _chat(tmp_path, "-r", "nothing-like-this", lines="")
    assert code == 1
    assert "nothing to resume" in output or "no session matches" in output
    with Store.open(tmp_path / "state.db") as store:
        store.create_session("cli", session_id="20260101_000000_aaaaaa")
        store.create_session("cli", session_id="20260101_000000_aaaaab")
    code, output = _chat(tmp_path, "-r", "20260101_000000_aaaaa", lines="")
    assert code == 1
    assert "20260101_000000_aaaaaa" in output
    assert "20260101_000000_aaaaab" in output
    code, output = _chat(tmp_path, "-r", "x", "-c", lines="")
    assert code == 2
