from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from hermes_actors.cli.hermesctl import main
from hermes_actors.store import Store, open_connection
from tests.importer.hermes_v22 import HermesDb

STORE_FIXTURES = Path(__file__).resolve().parent.parent / "store" / "fixtures"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


CONFIG = """\
platforms:
  telegram:
    bots:
      main: {token_env: TELEGRAM_TOKEN}
  slack:
    apps:
      main: {signing_secret_env: SLACK_SIGNING_SECRET, bot_token_env: SLACK_BOT_TOKEN}
"""


def configure(home: Path, config: str = CONFIG) -> None:
    """Write ``home``'s config.yaml: the bot accounts the imported chats continue under."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(config, encoding="utf-8")


@pytest.fixture
def reference(tmp_path: Path, home: Path) -> Path:
    """Two sessions: a Telegram DM with a route, and a Slack channel of unknown workspace; ``home`` has one
    Telegram bot and one Slack app."""
    configure(home)
    path = tmp_path / "hermes" / "state.db"
    path.parent.mkdir()
    with HermesDb(path) as h:
        h.session("20260528_100000_aaaa0001", session_key="agent:main:telegram:dm:7", chat_id="7", title="plans")
        h.messages("20260528_100000_aaaa0001", ["hello", "hi", "what next?", "tests"])
        h.message("20260528_100000_aaaa0001", "user", "taken back", active=0)
        h.route("agent:main:telegram:dm:7", "20260528_100000_aaaa0001")
        h.session("20260528_100100_aaaa0002", source="slack", chat_type="channel", chat_id="C2")
        h.messages("20260528_100100_aaaa0002", ["in a channel"])
        h.route("agent:main:slack:channel:C2:U2", "20260528_100100_aaaa0002")
    return path


def run(home: Path, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(main, ["import-hermes", *args, "--home", str(home)], input=input)


def summary(reference: Path, home: Path, verb: str) -> str:
    return (
        f"{verb} from {reference} (schema version 22) into {home / 'state.db'}:\n"
        "  sessions: 2 new, 0 updated, 0 already imported, 0 skipped (of 2)\n"
        "  messages: 5 imported, 1 skipped, 0 compacted rows kept in '<id>-compacted' sessions\n"
        "  routes: 1 of 2 migrated (1 moved, 1 refused)\n"
        "Skipped messages:\n"
        "  rewound in the source (it neither shows nor searches them): 1\n"
        "Routes not migrated:\n"
        "  refused agent:main:slack:channel:C2:U2 (session 20260528_100100_aaaa0002): the workspace of this channel "
        "is unknown, and migrating it would risk leaking one tenant's transcript to another; it stays reachable by "
        "session id\n"
    )


def test_yes_imports_without_asking_and_prints_the_summary(reference: Path, home: Path) -> None:
    result = run(home, str(reference), "--yes")

    assert result.exit_code == 0, result.output
    assert result.stdout == summary(reference, home, "Imported")
    with Store.open(home / "state.db") as store:
        assert store.get_route("agent:main:telegram~main:dm:7") == "20260528_100000_aaaa0001"
        assert store.resolve_session("plans").message_count == 4


def test_json_prints_the_report_alone_on_stdout(reference: Path, home: Path) -> None:
    result = run(home, str(reference), "--yes", "--json")

    assert result.exit_code == 0
    report = json.loads(result.stdout)
    assert (report["sessions_imported"], report["messages_imported"], report["routes_migrated"]) == (2, 5, 1)
    assert report["dry_run"] is False
    assert [r["action"] for r in report["routes"]] == ["refused", "moved"]


def test_a_dry_run_prints_what_would_happen_and_creates_nothing(reference: Path, home: Path) -> None:
    result = run(home, str(reference), "--dry-run")

    assert result.exit_code == 0
    assert result.stdout == summary(reference, home, "Would import")
    assert not (home / "state.db").exists()
    as_json = json.loads(run(home, str(reference), "--dry-run", "--json").stdout)
    assert (as_json["dry_run"], as_json["sessions_imported"]) == (True, 2)


def test_the_question_shows_what_will_be_imported_and_no_writes_nothing(reference: Path, home: Path) -> None:
    result = run(home, str(reference), input="n\n")

    assert result.exit_code == 0
    question = f"Import 2 sessions (5 messages) and 1 route from {reference} into {home / 'state.db'}? [y/N]: n\n"
    # Without a terminal the progress bar prints its label only.
    assert result.output == "Reading\n" + summary(reference, home, "Would import") + question + "Nothing imported.\n"
    assert not (home / "state.db").exists()


def test_yes_to_the_question_imports(reference: Path, home: Path) -> None:
    result = run(home, str(reference), input="y\n")

    assert result.exit_code == 0
    assert result.stdout.endswith(summary(reference, home, "Imported"))
    again = run(home, str(reference))
    assert again.exit_code == 0
    assert again.stdout.startswith("Nothing new to import.\nWould import from ")
    assert "  sessions: 0 new, 0 updated, 2 already imported, 0 skipped (of 2)\n" in again.stdout


def test_no_answer_on_stdin_is_an_error_naming_yes(reference: Path, home: Path) -> None:
    result = run(home, str(reference))

    assert result.exit_code == 1
    assert result.output.endswith(
        "Error: no answer was read from standard input; pass --yes to import without asking\n"
    )


def test_a_missing_file_is_an_error_line(tmp_path: Path, home: Path) -> None:
    missing = tmp_path / "nope" / "state.db"

    result = run(home, str(missing), "--yes")

    assert (result.exit_code, result.output) == (
        1,
        f"Error: no file at {missing}; pass the reference system's state.db (~/.hermes/state.db)\n",
    )
    assert not home.exists()


def test_a_newer_schema_is_an_error_line_naming_the_version(tmp_path: Path, home: Path) -> None:
    path = tmp_path / "state.db"
    HermesDb(path, version=23).close()

    result = run(home, str(path), "--dry-run")

    assert (result.exit_code, result.output) == (
        1,
        f"Error: {path} has schema version 23; this hermes-actors understands 22: upgrade hermes-actors to "
        "import it (nothing was changed)\n",
    )


def test_the_home_database_itself_is_refused_as_a_source(reference: Path) -> None:
    result = run(reference.parent, str(reference), "--yes")

    assert (result.exit_code, result.output) == (
        1,
        f"Error: {reference} is the database of this hermes-actors home too; pass --home to import into another "
        "state directory (both systems default to ~/.hermes)\n",
    )


def test_a_dry_run_against_an_older_store_names_the_upgrade(reference: Path, home: Path) -> None:
    home.mkdir(exist_ok=True)
    old = open_connection(home / "state.db")
    old.execute((STORE_FIXTURES / "schema_v1.sql").read_text(encoding="utf-8"))
    old.execute("PRAGMA user_version = 1")
    old.close()

    result = run(home, str(reference), "--dry-run")

    assert (result.exit_code, result.output) == (
        1,
        f"Error: {home / 'state.db'} has schema version 1; run 'hermesctl db migrate' first (or import with --yes, "
        "which upgrades it)\n",
    )
    assert run(home, str(reference), "--yes").exit_code == 0  # the import itself upgrades it
