from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from hermes_actors.cli import hermesctl, hermesd
from hermes_actors.store import NewMessage, Role, Store


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def test_hermesctl_reports_a_missing_database_with_the_fix(home: Path) -> None:
    result = CliRunner().invoke(hermesctl.main, ["sessions", "stats", "--home", str(home)])
    assert result.exit_code == 1
    assert (
        result.output
        == f"Error: no database at {home / 'state.db'}; run 'hermesd' or 'hermesctl db migrate' to create it\n"
    )


def test_stats_and_search_read_what_the_store_wrote(home: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(hermesctl.main, ["db", "migrate", "--home", str(home)]).exit_code == 0
    with Store.open(home / "state.db") as store:
        session = store.create_session("telegram")
        store.append_messages(session.id, [NewMessage(role=Role.USER, content="deploy the docker image")])
    stats = runner.invoke(hermesctl.main, ["sessions", "stats", "--home", str(home)])
    assert stats.exit_code == 0
    assert "Total sessions: 1\nTotal messages: 1\n  telegram: 1 sessions\n" in stats.output
    as_json = json.loads(runner.invoke(hermesctl.main, ["sessions", "stats", "--json", "--home", str(home)]).output)
    assert as_json["messages"] == 1
    found = runner.invoke(hermesctl.main, ["sessions", "search", "docker", "--home", str(home)])
    assert found.exit_code == 0
    assert ">>>docker<<<" in found.output
    assert session.id in found.output


def test_a_malformed_search_is_an_error_line_with_a_suggestion(home: Path) -> None:
    runner = CliRunner()
    runner.invoke(hermesctl.main, ["db", "migrate", "--home", str(home)])
    result = runner.invoke(hermesctl.main, ["sessions", "search", "c++", "--home", str(home)])
    assert result.exit_code == 1
    assert result.output == (
        "Error: the query is not valid search syntax: expected a search term at character 3; "
        'quote words to search them literally (try: "c++")\n'
    )


def test_db_check_passes_on_a_healthy_database(home: Path) -> None:
    runner = CliRunner()
    runner.invoke(hermesctl.main, ["db", "migrate", "--home", str(home)])
    with Store.open(home / "state.db") as store:
        session = store.create_session("cli")
        # The CJK index holds only the second message: the check must not call that a stale index.
        store.append_messages(session.id, [NewMessage(role=Role.USER, content=t) for t in ("hello", "你好世界")])
        # A tool call has no content: still a healthy store.
        store.append_messages(session.id, [NewMessage(role=Role.ASSISTANT, content=None, tool_calls="[]")])
    result = runner.invoke(hermesctl.main, ["db", "check", "--home", str(home)])
    assert (result.exit_code, result.stdout) == (0, "ok\n")  # the phases and their times are on stderr


def test_db_check_reports_a_stale_search_index(home: Path) -> None:
    runner = CliRunner()
    runner.invoke(hermesctl.main, ["db", "migrate", "--home", str(home)])
    with Store.open(home / "state.db") as store:
        session = store.create_session("cli")
        store.append_messages(session.id, [NewMessage(role=Role.USER, content="hello world")])
        # Change the text behind the index's back, as a foreign tool without the triggers would.
        store._connection.execute("DROP TRIGGER messages_fts_update")
        store._connection.execute("UPDATE messages SET content = 'something else'")
    result = runner.invoke(hermesctl.main, ["db", "check", "--home", str(home)])
    assert result.exit_code == 1
    assert "\nError: database check failed:\nmessages_fts:" in result.stderr  # after the phases it ran


def _commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    found: list[tuple[str, click.Command]] = []
    for name, command in group.commands.items():
        found.append((prefix + name, command))
        if isinstance(command, click.Group):
            found.extend(_commands(command, prefix + name + " "))
    return found


def test_every_command_has_help_text() -> None:
    assert hermesd.main.help
    assert CliRunner().invoke(hermesd.main, ["--help"]).exit_code == 0
    assert hermesctl.main.help
    for name, command in _commands(hermesctl.main):
        assert command.help, f"hermesctl {name} has no help text"
        result = CliRunner().invoke(hermesctl.main, [*name.split(), "--help"])
        assert result.exit_code == 0, name


@pytest.mark.parametrize(("command", "name"), [(hermesctl.main, "hermesctl"), (hermesd.main, "hermesd")])
def test_both_tools_print_their_version(command: click.Command, name: str) -> None:
    from importlib.metadata import version

    result = CliRunner().invoke(command, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"{name} {version('hermes-actors')}\n"
