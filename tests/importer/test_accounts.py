"""Which bot account and workspace an imported chat continues under: the only one configured, the one
``--account`` names, the one a Slack app is limited to; what cannot be told is reported, never guessed, and a
later run gives the sessions of an earlier one what they lacked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from hermes_actors.cli.hermesctl import main
from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.store import Store
from hermes_actors.testing import FakePlatform
from tests.importer.hermes_v22 import HermesDb

SESSION = "20260528_100000_aaaa0001"
TWO_BOTS = """\
platforms:
  telegram:
    bots:
      alpha: {token_env: ALPHA_TOKEN}
      beta: {token_env: BETA_TOKEN}
"""
ONE_BOT = """\
platforms:
  telegram:
    bots:
      main: {token_env: TELEGRAM_TOKEN}
"""
SLACK_OF_ONE_WORKSPACE = """\
platforms:
  slack:
    apps:
      main: {signing_secret_env: S, bot_token_env: B, team_id: T9}
"""


def configure(home: Path, config: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(config, encoding="utf-8")


def run(home: Path, reference: Path, *options: str) -> Result:
    return CliRunner().invoke(main, ["import-hermes", str(reference), "--home", str(home), "--yes", *options])


def report_of(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture
def telegram_dm(tmp_path: Path) -> Path:
    """A reference state.db with a Telegram DM (chat 7) and its route."""
    path = tmp_path / "hermes" / "state.db"
    path.parent.mkdir()
    with HermesDb(path) as h:
        h.session(SESSION, session_key="agent:main:telegram:dm:7", chat_id="7", user_id="7", title="plans")
        h.messages(SESSION, ["hello", "hi"])
        h.route("agent:main:telegram:dm:7", SESSION)
    return path


def dm(text: str, account: str, message_id: str) -> InboundMessage:
    source = SessionSource(platform="telegram", account_id=account, chat_type="dm", chat_id="7", user_id="7")
    return InboundMessage(source=source, text=text, message_id=message_id)


def test_several_accounts_and_no_choice_are_reported_and_not_guessed(telegram_dm: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    configure(home, TWO_BOTS)
    result = run(home, telegram_dm)
    assert result.exit_code == 0, result.output
    reason = (
        "telegram has several accounts here (alpha, beta) and nothing tells which one this chat reaches; choose "
        "with --account telegram=<name> and run the import again"
    )
    assert f"  unmapped agent:main:telegram:dm:7 (session {SESSION}): {reason}\n" in result.stdout
    assert (
        f"Sessions no adapter here reaches (their users cannot continue or /resume them):\n  {SESSION}: {reason}\n"
        in (result.stdout)
    )
    with Store.open(home / "state.db") as store:
        assert store.routes_to(SESSION) == []
        assert store.get_session(SESSION).account_id is None


def test_account_chooses_the_bot_an_import_continues_under(telegram_dm: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    configure(home, TWO_BOTS)
    report = report_of(run(home, telegram_dm, "--json", "--account", "telegram=beta"))
    assert [(r["action"], r["new_key"]) for r in report["routes"]] == [("moved", "agent:main:telegram~beta:dm:7")]
    assert report["unmapped_sessions"] == []
    with Store.open(home / "state.db") as store:
        record = store.get_session(SESSION)
        assert (record.source, record.scope_id, record.account_id, record.user_id) == ("telegram", None, "beta", "7")


@pytest.mark.parametrize(
    ("choice", "error"),
    [
        ("telegram", "'telegram' is not PLATFORM=NAME, e.g. telegram=main"),
        ("cli=main", "'cli' keys no chat by account; the platforms that do: telegram, slack"),
        ("telegram=gamma", "platforms.telegram.bots has no account 'gamma' (it has: alpha, beta)"),
    ],
)
def test_a_bad_account_choice_is_a_usage_error(telegram_dm: Path, tmp_path: Path, choice: str, error: str) -> None:
    home = tmp_path / "home"
    configure(home, TWO_BOTS)
    result = run(home, telegram_dm, "--account", choice)
    assert result.exit_code == 2
    assert f"Invalid value for --account: {error}" in result.output
    assert not (home / "state.db").exists()


def test_a_slack_app_limited_to_one_workspace_gives_a_dm_its_workspace(tmp_path: Path) -> None:
    path = tmp_path / "hermes" / "state.db"
    path.parent.mkdir()
    with HermesDb(path) as h:
        h.session(SESSION, source="slack", session_key="agent:main:slack:dm:D1", chat_id="D1", user_id="U1")
        h.route("agent:main:slack:dm:D1", SESSION)
    home = tmp_path / "home"
    configure(home, SLACK_OF_ONE_WORKSPACE)
    report = report_of(run(home, path, "--json"))
    assert [(r["action"], r["new_key"]) for r in report["routes"]] == [("moved", "agent:main:slack.T9~main:dm:D1")]
    with Store.open(home / "state.db") as store:
        record = store.get_session(SESSION)
        assert (record.scope_id, record.account_id) == ("T9", "main")


def test_a_later_run_gives_an_earlier_import_its_account_and_the_user_continues(
    telegram_dm: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    first = report_of(run(home, telegram_dm, "--json"))  # no config.yaml yet: no bot to continue under
    assert [r["action"] for r in first["routes"]] == ["unmapped"]
    assert [n["session_id"] for n in first["unmapped_sessions"]] == [SESSION]
    configure(home, ONE_BOT)
    again = run(home, telegram_dm)
    assert again.exit_code == 0, again.output
    assert "  sessions: 0 new, 0 updated, 1 already imported, 0 skipped (of 1)\n" in again.stdout
    assert "  principals: 1 session imported earlier given the platform name, account or workspace" in again.stdout
    assert "  routes: 1 of 1 migrated (1 moved)\n" in again.stdout
    assert "Nothing new" not in again.stdout
    telegram = FakePlatform("telegram")
    gateway = Gateway(home / "state.db", senders=[telegram])
    try:
        gateway.accept(dm("still there?", "main", "7:100"))
        assert telegram.pop().text == "echo: still there?"
        gateway.accept(dm("/new", "main", "7:101"))
        telegram.pop()
        gateway.accept(dm(f"/resume {SESSION}", "main", "7:102"))
        assert telegram.pop().text == "Resumed plans."
        assert gateway.wait_idle()
        assert gateway.session_for("agent:main:telegram~main:dm:7") == SESSION
    finally:
        gateway.stop(timeout=10)
    third = report_of(run(home, telegram_dm, "--json"))
    assert third["principals_updated"] == 0  # given once; a later run changes nothing


def test_a_chat_continued_here_meanwhile_keeps_its_new_session(telegram_dm: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    report_of(run(home, telegram_dm, "--json"))  # unmapped: no bot configured yet
    configure(home, ONE_BOT)
    telegram = FakePlatform("telegram")
    gateway = Gateway(home / "state.db", senders=[telegram])
    try:
        gateway.accept(dm("hello again", "main", "7:200"))  # the user wrote before the second run
        telegram.pop()
        assert gateway.wait_idle()
        newer = gateway.session_for("agent:main:telegram~main:dm:7")
    finally:
        gateway.stop(timeout=10)
    again = report_of(run(home, telegram_dm, "--json"))
    assert [(r["action"], r["reason"]) for r in again["routes"]] == [
        ("conflict", f"the key already reaches live session {newer} here")
    ]
    assert again["principals_updated"] == 1  # the user can still /resume the imported one
