"""``hermesctl chat`` without a daemon: in-process turns on the store, resume and continue with the recap."""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hermes_actors.cli import ctl_chat
from hermes_actors.cli.chat_input import HISTORY_LENGTH, HISTORY_NAME, LineReader, help_text
from hermes_actors.cli.hermesctl import main as hermesctl
from hermes_actors.daemon.control import Chat
from hermes_actors.daemon.terminal import TerminalChannel
from hermes_actors.lifecycle.commands import CommandName
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.store import EndReason, Store
from hermes_actors.store.records import HomeChannel
from hermes_actors.testing import FakeThreadedPlatform

DAY = 86400.0


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


# -- /help, user_exit and reopening, auto-prune ------------------------------------------------------------------


def test_help_is_answered_by_the_chat_and_never_reaches_the_agent(tmp_path: Path) -> None:
    code, output = _chat(tmp_path, lines="/help\nhello\n")
    assert code == 0, output
    assert "Commands:" in output
    for command in ("/new [title]", "/reset", "/resume [N|id|title]", "/title [text]", "/handoff <platform>", "/exit"):
        assert command in output
    session = _session(output)
    with Store.open(tmp_path / "state.db", readonly=True) as store:
        assert [m.content for m in store.load_transcript(session)] == ["hello", "echo: hello"]


def test_help_lists_every_command_the_gateway_handles_and_the_configured_reset_triggers() -> None:
    text = help_text(("/new", "/fresh"))
    for name in CommandName:
        if name not in (CommandName.NEW, CommandName.RESET):
            assert f"/{name.value}" in text, name
    assert "/new [title]" in text
    assert "/fresh " in text
    assert "/reset" not in text  # not a trigger in this configuration


def test_closing_the_chat_ends_its_session_with_user_exit_and_resuming_reopens_it(tmp_path: Path) -> None:
    code, output = _chat(tmp_path, lines="plan the trip\n/exit\n")
    assert code == 0, output
    session = _session(output)
    with Store.open(tmp_path / "state.db", readonly=True) as store:
        first = store.get_session(session)
    assert first.end_reason == EndReason.USER_EXIT.value
    assert first.ended_at is not None
    code, output = _chat(tmp_path, "--resume", session, lines="what next\n")  # ends at the end of input
    assert code == 0, output
    assert f"resuming {session}" in output
    assert _session(output) == session
    with Store.open(tmp_path / "state.db", readonly=True) as store:
        again = store.get_session(session)
        contents = [m.content for m in store.load_transcript(session)]
    assert contents == ["plan the trip", "echo: plan the trip", "what next", "echo: what next"]
    assert again.end_reason == EndReason.USER_EXIT.value
    assert again.ended_at is not None
    assert again.ended_at > first.ended_at  # reopened, then ended again


def test_a_session_of_another_platform_resumed_in_the_terminal_stays_live_after_exit(tmp_path: Path) -> None:
    with Store.open(tmp_path / "state.db") as store:
        record = store.create_session("telegram", title="phone chat")
    code, output = _chat(tmp_path, "--resume", "phone chat", lines="from the terminal\n")
    assert code == 0, output
    with Store.open(tmp_path / "state.db", readonly=True) as store:
        assert store.get_session(record.id).is_live


def _old_ended_session(home: Path) -> str:
    now = time.time()
    with Store.open(home / "state.db") as store:
        record = store.create_session("telegram", started_at=now - 200 * DAY)
        store.end_session(record.id, EndReason.IDLE, at=now - 100 * DAY)
    return record.id


def _session_exists(home: Path, session_id: str) -> bool:
    with Store.open(home / "state.db", readonly=True) as store:
        return store.find_session(session_id) is not None


def test_chat_without_a_daemon_runs_the_auto_prune_gate_hermesd_runs_at_start(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("sessions:\n  auto_prune: true\n  vacuum_after_prune: false\n")
    old = _old_ended_session(tmp_path)
    code, output = _chat(tmp_path, lines="hello\n")
    assert code == 0, output
    assert not _session_exists(tmp_path, old)
    # The gate: a run less than min_interval_hours ago means no prune now.
    again = _old_ended_session(tmp_path)
    code, output = _chat(tmp_path, lines="hello\n")
    assert code == 0, output
    assert _session_exists(tmp_path, again)


def test_chat_does_not_prune_when_auto_prune_is_off(tmp_path: Path) -> None:
    old = _old_ended_session(tmp_path)
    code, output = _chat(tmp_path, lines="hello\n")
    assert code == 0, output
    assert _session_exists(tmp_path, old)


def test_the_history_file_is_private_and_cut_to_its_length(tmp_path: Path) -> None:
    readline = pytest.importorskip("readline")
    history = tmp_path / HISTORY_NAME
    history.write_text("".join(f"line {n}\n" for n in range(HISTORY_LENGTH + 500)))
    history.chmod(0o644)
    fresh = tmp_path / "fresh" / HISTORY_NAME
    try:
        LineReader(interactive=True, history=history)._load_history()
        assert stat.S_IMODE(history.stat().st_mode) == 0o600
        kept = history.read_text().splitlines()
        assert len(kept) == HISTORY_LENGTH
        assert kept[-1] == f"line {HISTORY_LENGTH + 499}"
        readline.clear_history()
        old_umask = os.umask(0)
        try:
            LineReader(interactive=True, history=fresh)._load_history()
        finally:
            os.umask(old_umask)
        assert stat.S_IMODE(fresh.stat().st_mode) == 0o600
    finally:
        readline.clear_history()


def _gateway_with_telegram(telegrams: list[FakeThreadedPlatform]) -> Callable[..., Gateway]:
    """A ``Gateway`` factory for the in-process chat that also delivers to a fake Telegram."""

    def make(path: Path, **options: Any) -> Gateway:
        telegram = FakeThreadedPlatform("telegram")
        telegrams.append(telegram)
        return Gateway(path, **{**options, "senders": [*options["senders"], telegram]})

    return make


def _set_telegram_home(home: Path) -> None:
    with Store.open(home / "state.db") as store:
        store.homes.set(HomeChannel(platform="telegram", account_id="", chat_id="-100200", chat_type="group"))


def test_a_handoff_reply_ends_the_chat_with_the_resume_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _set_telegram_home(tmp_path)
    telegrams: list[FakeThreadedPlatform] = []
    monkeypatch.setattr(ctl_chat, "Gateway", _gateway_with_telegram(telegrams))
    code, output = _chat(tmp_path, "--timeout", "5", lines="plan the trip\n/handoff telegram\nnever sent\n")
    assert code == 0, output
    session = _session(output)
    assert "Handed off to telegram (chat -100200, thread thread-1): the conversation continues there." in output
    assert "↻ the conversation is now on telegram; this chat ends here." in output
    assert output.rstrip().endswith(f"resume it with: hermesctl chat --resume {session}")
    assert "never sent" not in output
    (telegram,) = telegrams
    assert telegram.sent[0].text.startswith("echo: [handoff]")
    with Store.open(tmp_path / "state.db", readonly=True) as store:
        contents = [m.content or "" for m in store.load_transcript(session)]
    assert "never sent" not in contents


def test_the_terminal_channel_answers_a_handoff_instead_of_waiting(tmp_path: Path) -> None:
    _set_telegram_home(tmp_path)
    channel = TerminalChannel()
    telegram = FakeThreadedPlatform("telegram")
    gateway = Gateway(tmp_path / "state.db", senders=[channel.waiters, telegram])
    channel.attach(gateway)
    try:
        first = channel.chat(Chat(chat_id="tty-1", user_id="me", text="hello", message_id="m1", timeout_s=5))
        assert first.handed_off is None
        reply = channel.chat(
            Chat(chat_id="tty-1", user_id="me", text="/handoff telegram", message_id="m2", timeout_s=5)
        )
        assert reply.handed_off == "telegram"
        assert reply.session_id == first.session_id
        assert reply.text.endswith("To pick it up here again, send /resume Conversation about hello.")  # its title
    finally:
        gateway.stop(timeout=10)
