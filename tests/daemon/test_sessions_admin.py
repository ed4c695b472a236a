"""``hermesctl sessions rename/end/delete`` against the real ``hermesd`` subprocess, and against a terminal chat that
runs a session in-process: the live actor and the store agree, and a holder of the lease is named, not its id."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from hermes_actors.cli.hermesctl import main as hermesctl
from hermes_actors.daemon.control import Chat, ControlClient, connect
from hermes_actors.store import Store
from hermes_actors.testing import poll_until
from tests.daemon.test_daemon import Daemon, _script

pytestmark = pytest.mark.slow


def sessions(home: Path, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(hermesctl, ["sessions", *args, "--home", str(home)], input=input)


class Terminal:
    """One terminal chat (a fixed chat id, so one routing key) talking to hermesd over its control socket."""

    def __init__(self, client: ControlClient, chat_id: str) -> None:
        self._client = client
        self._chat_id = chat_id
        self._sent = 0

    def say(self, text: str) -> tuple[str | None, str]:
        self._sent += 1
        message = Chat(chat_id=self._chat_id, user_id="me", text=text, message_id=f"{self._chat_id}-{self._sent}")
        reply = self._client.chat(message)
        return reply.session_id, reply.text


def _live_actors(daemon: Daemon) -> int:
    client = connect(daemon.home / "hermesd.sock")
    assert client is not None
    with client:
        return client.status().live_actors


def test_rename_end_and_delete_of_live_sessions_go_through_hermesd(daemon: Daemon, home: Path) -> None:
    client = connect(home / "hermesd.sock")
    assert client is not None
    with client:
        first = Terminal(client, "tty-first")
        session, _ = first.say("hello")
        assert session is not None
        first.say("/title old name")
        padding = " and check every table of it twice" * 4  # a history /compress gains on (it refuses a short one)
        for step in ("second", "third", "fourth", "fifth", "sixth"):
            first.say(step + padding)
        renamed = sessions(home, "rename", session, "deploy", "notes")
        assert renamed.exit_code == 0, renamed.output
        assert renamed.stdout == f"Session {session} is now titled 'deploy notes'.\n"
        assert first.say("/title")[1] == "Title: deploy notes"
        assert first.say("/compress")[1].endswith("the conversation continues as deploy notes #2.")

        second = Terminal(client, "tty-second")
        ended_id, _ = second.say("hi")
        assert ended_id is not None
        ended = sessions(home, "end", ended_id)
        assert ended.exit_code == 0, ended.output
        after, text = second.say("again")
        assert text == "echo: again"
        assert after not in (None, ended_id)

        third = Terminal(client, "tty-third")
        doomed, _ = third.say("used seconds ago")
        assert doomed is not None
        actors = _live_actors(daemon)
        declined = sessions(home, "delete", doomed, input="n\n")
        assert declined.exit_code == 0, declined.output
        assert f"Session {doomed} is live in hermesd (pid {daemon.process.pid}): deleting ends it first." in (
            declined.stderr
        )
        assert declined.stdout == "Nothing deleted.\n"
        deleted = sessions(home, "delete", doomed, "--yes")
        assert deleted.exit_code == 0, deleted.output
        assert (
            deleted.stdout == f"Ended session {doomed} first (it was live).\nDeleted session {doomed} and 2 messages.\n"
        )
        poll_until(lambda: _live_actors(daemon) < actors, what="the deleted session's actor to stop")
        fresh, text = third.say("anyone there")
        assert text == "echo: anyone there"
        assert fresh not in (None, doomed)
    with Store.open(home / "state.db", readonly=True) as store:
        assert store.get_session(session).title == "deploy notes"
        assert store.resolve_session("deploy notes #2").parent_session_id == session
        assert store.get_session(ended_id).end_reason == "operator"
        assert store.find_session(doomed) is None
    code, _, err = daemon.stop()
    assert code == 0, err


def test_a_terminal_chat_holding_the_session_is_named_and_the_change_waits_for_it(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    Store.open(home / "state.db").close()  # created (and migrated) before the chat looks at it
    chat = subprocess.Popen(
        [*_script("hermesctl"), "chat", "--home", str(home)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HERMES_HOME": str(home)},
    )
    try:
        assert chat.stdin is not None
        chat.stdin.write("hello\n")
        chat.stdin.flush()

        def held() -> tuple[str, str] | None:
            with Store.open(home / "state.db", readonly=True) as store:
                found = store.list_sessions(source="cli", limit=1)
                holder = store.leases.holder(found[0].id) if found else None
            return (found[0].id, holder) if holder is not None else None

        session, _ = poll_until(held, timeout=30, what="the terminal chat to hold its session's lease")
        for args in (("rename", session, "mine"), ("end", session), ("delete", session, "--yes")):
            refused = sessions(home, *args)
            assert refused.exit_code == 1, args
            assert refused.output == (
                f"Error: session {session} is open in a terminal chat (hermesctl chat, pid {chat.pid}), so nothing "
                "was changed; leave that chat with /exit, then try again\n"
            )
        chat.stdin.write("/exit\n")
        chat.stdin.flush()
        out, err = chat.communicate(timeout=30)
        assert chat.returncode == 0, err
        assert "echo: hello" in out
    finally:
        if chat.poll() is None:
            chat.kill()
            chat.communicate(timeout=10)
    renamed = sessions(home, "rename", session, "mine")
    assert renamed.exit_code == 0, renamed.output
    with Store.open(home / "state.db", readonly=True) as store:
        assert store.get_session(session).title == "mine"


def test_a_terminal_chat_closed_by_its_user_ends_through_hermesd_s_live_actor(daemon: Daemon, home: Path) -> None:
    """``user_exit`` goes through the daemon like any admin end: its actor retires (it does not keep a session the
    store says ended), and the chat's routing key has no route left to it."""
    result = CliRunner().invoke(hermesctl, ["chat", "--home", str(home)], input="plan the trip\n/exit\n")
    assert result.exit_code == 0, result.output
    (session,) = [line.split()[1].rstrip(";") for line in result.output.splitlines() if line.startswith("session ")]
    with Store.open(home / "state.db", readonly=True) as store:
        record = store.get_session(session)
        assert store.routes_to(session) == []
    assert record.end_reason == "user_exit"
    assert poll_until(lambda: _live_actors(daemon) == 0, timeout=10)
