"""``/new <title>`` (and ``/title`` before the first message) say when the title cannot be applied, and why."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_actors.config import RuntimeConfig
from hermes_actors.lifecycle.commands import parse_command
from hermes_actors.lifecycle.handlers import LifecycleCommands
from hermes_actors.lifecycle.work import Delivery
from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource
from hermes_actors.store import EndReason, InboxState, Store
from hermes_actors.store.readers import ReaderPool
from hermes_actors.store.writer import StoreWriter

ALICE = SessionSource(platform="telegram", chat_id="alice-chat", user_id="alice", account_id="bot")
MALLORY = SessionSource(platform="telegram", chat_id="mallory-chat", user_id="mallory", account_id="bot")
KEY = "agent:main:telegram:dm:alice-chat"


class NoSessionYet:
    """The routing directory of a key with no conversation: commands answer at once (nothing else is used)."""

    def __init__(self) -> None:
        self.replies: list[str] = []

    def existing(self, routing_key: str) -> str | None:
        return None

    def reply_now(
        self, delivery: Delivery, text: str, *, session_id: str | None, state: InboxState = InboxState.DONE
    ) -> None:
        self.replies.append(text)

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"the command used Directory.{name} though the key has no session")


@pytest.fixture
def commands(db_path: Path, store: Store) -> Iterator[tuple[LifecycleCommands, NoSessionYet]]:
    directory = NoSessionYet()
    readers = ReaderPool(db_path, size=1)
    writer = StoreWriter(Store.open(db_path))
    lifecycle = LifecycleCommands(
        directory,  # type: ignore[arg-type]  # the part of the Directory port these commands use
        config=RuntimeConfig(),
        readers=readers,
        writer=writer,
        lease_owner="test",
        owner_alive=lambda _owner: True,
    )
    yield lifecycle, directory
    writer.stop()
    readers.close()


def send(lifecycle: LifecycleCommands, directory: NoSessionYet, text: str, source: SessionSource = ALICE) -> str:
    command = parse_command(text)
    assert command is not None
    message = InboundMessage(source=source, text=text, message_id=str(len(directory.replies)))
    lifecycle.run(KEY, Delivery(inbox_id=1, message=message), command)
    return directory.replies[-1]


def test_new_with_a_title_a_compressed_conversation_holds_says_it_was_not_applied(
    store: Store, commands: tuple[LifecycleCommands, NoSessionYet]
) -> None:
    lifecycle, directory = commands
    root = store.create_session(ALICE, title="my project")
    store.end_session(root.id, EndReason.COMPRESSION)
    store.create_session(ALICE, title="my project #2", parent_session_id=root.id)

    reply = send(lifecycle, directory, "/new my project")

    assert reply == (
        f"Started a new session. The title 'my project' is already in use by session {root.id}, so it was not "
        "applied; choose another with /title <text>."
    )
    assert lifecycle.take_pending_title(KEY) is None


def test_a_title_another_principal_holds_is_only_said_to_be_taken(
    store: Store, commands: tuple[LifecycleCommands, NoSessionYet]
) -> None:
    lifecycle, directory = commands
    theirs = store.create_session(MALLORY, title="my  project")

    reply = send(lifecycle, directory, "/new my   project")

    assert reply == (
        "Started a new session. The title 'my project' is already taken, so it was not applied; choose another "
        "with /title <text>."
    )
    assert theirs.id not in reply
    assert send(lifecycle, directory, "/title my project") == (
        "The title 'my project' is already taken, so it was not applied; choose another with /title <text>."
    )
    assert lifecycle.take_pending_title(KEY) is None


def test_an_unusable_title_refuses_the_command_and_a_free_one_is_kept(
    commands: tuple[LifecycleCommands, NoSessionYet],
) -> None:
    lifecycle, directory = commands

    reply = send(lifecycle, directory, "/new " + "x" * 120)

    assert reply == "new: title is 120 characters long; the limit is 100, so shorten it"
    assert send(lifecycle, directory, "/new my project") == "Started a new session. Its title will be 'my project'."
    assert lifecycle.take_pending_title(KEY) == "my project"
