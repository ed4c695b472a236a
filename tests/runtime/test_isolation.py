"""Tenant isolation past the routing key: commands, the search tool and memories compare the whole principal.

Each test acts out a defect reproduced on the first release: a user of one workspace (or bot account) reached
another's sessions through ``/sessions``, ``search:``, ``/resume`` or ``/title``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_actors.config import RuntimeConfig, SearchScope
from hermes_actors.messages import InboundMessage
from hermes_actors.principal import Principal, visible_sessions
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.store import Store
from hermes_actors.testing import FakePlatform
from tests.runtime.test_lifecycle import RecordingAgent


class Tenants:
    """One gateway with a Slack-like platform whose messages name their workspace and bot account."""

    def __init__(self, gateway: Gateway, fake: FakePlatform) -> None:
        self.gateway = gateway
        self.fake = fake
        self._n = 0

    def say(
        self, text: str, *, scope: str | None = "T1", account: str | None = None, user: str = "U1", chat: str = "D1"
    ) -> str:
        """Send ``text`` from ``user`` in workspace ``scope`` through bot ``account``; return the reply text."""
        self._n += 1
        source = SessionSource(
            platform="slack", scope_id=scope, account_id=account, chat_type="dm", chat_id=chat, user_id=user
        )
        self.gateway.accept(InboundMessage(source=source, text=text, message_id=f"m{self._n}"))
        return self.fake.pop().text

    def session_of(self, *, scope: str | None = "T1", account: str | None = None, chat: str = "D1") -> str:
        assert self.gateway.wait_idle()
        source = SessionSource(platform="slack", scope_id=scope, account_id=account, chat_type="dm", chat_id=chat)
        from hermes_actors.routing import build_session_key

        session_id = self.gateway.session_for(build_session_key(source))
        assert session_id is not None
        return session_id


@pytest.fixture
def tenants(db_path: Path) -> Iterator[Tenants]:
    fake = FakePlatform("slack")
    gateway = Gateway(db_path, config=RuntimeConfig(), agent=RecordingAgent(), senders=[fake])
    try:
        yield Tenants(gateway, fake)
    finally:
        gateway.stop(timeout=10)


def _victim(tenants: Tenants) -> str:
    """Workspace T1's user opens a titled session holding a secret; return its id."""
    tenants.say("the launch code is pelican", scope="T1")
    tenants.say("/title T1 secret plans", scope="T1")
    return tenants.session_of(scope="T1")


def test_sessions_of_another_workspace_are_not_listed(tenants: Tenants) -> None:
    victim = _victim(tenants)
    tenants.say("hello from the other workspace", scope="T2")
    listing = tenants.say("/sessions", scope="T2")
    assert "T1 secret plans" not in listing
    assert victim not in listing
    assert "pelican" not in tenants.say("/sessions pelican", scope="T2")
    assert tenants.say("/sessions pelican", scope="T2") == "No sessions found."


def test_the_search_tool_does_not_reach_another_workspace(tenants: Tenants) -> None:
    victim = _victim(tenants)
    reply = tenants.say("search: pelican", scope="T2")
    assert victim not in reply
    assert "pelican" not in reply.replace("search: pelican", "")
    assert reply == "echo: search found nothing"
    # The owner still finds it from another of their sessions.
    tenants.say("/new", scope="T1")
    assert victim in tenants.say("search: pelican", scope="T1")


def test_resume_onto_another_workspace_is_answered_as_a_missing_session(tenants: Tenants) -> None:
    victim = _victim(tenants)
    tenants.say("my own chat", scope="T2")
    mine = tenants.session_of(scope="T2")
    by_id = tenants.say(f"/resume {victim}", scope="T2")
    by_title = tenants.say("/resume T1 secret plans", scope="T2")
    missing = tenants.say("/resume 20990101_000000_deadbeef", scope="T2")
    assert "secret plans" not in by_title.replace("'T1 secret plans'", "")  # only the reference is echoed
    # Exactly the answer a missing session gets (modulo the reference echoed back).
    assert by_id.replace(victim, "X") == missing.replace("20990101_000000_deadbeef", "X")
    assert tenants.session_of(scope="T2") == mine
    tenants.say("this must not land in T1", scope="T2")
    with tenants.gateway.read() as store:
        texts = [m.content for m in store.load_transcript(victim)]
    assert "this must not land in T1" not in texts
    listing = tenants.say("/resume", scope="T2")
    assert mine in listing
    assert victim not in listing
    assert "secret" not in listing


def test_a_title_held_by_another_workspace_is_refused_without_naming_its_session(tenants: Tenants) -> None:
    victim = _victim(tenants)
    tenants.say("hello", scope="T2")
    reply = tenants.say("/title T1 secret plans", scope="T2")
    assert victim not in reply
    assert reply.startswith("Title not changed")


def test_another_bot_account_is_another_principal(tenants: Tenants) -> None:
    tenants.say("bot A knows about pelicans", scope=None, account="A")
    tenants.say("/title bot A chat", scope=None, account="A")
    tenants.say("hello bot B", scope=None, account="B")
    listing = tenants.say("/sessions", scope=None, account="B")
    assert "bot A chat" not in listing
    assert tenants.say("search: pelicans", scope=None, account="B") == "echo: search found nothing"


def test_memories_are_kept_per_principal(db_path: Path) -> None:
    with Store.open(db_path) as store:
        one = Principal.of(SessionSource(platform="slack", scope_id="T1", chat_id="D1", user_id="U1"))
        two = Principal.of(SessionSource(platform="slack", scope_id="T2", chat_id="D1", user_id="U1"))
        assert one.memory_key != two.memory_key
        assert one.memory_key is not None
        assert two.memory_key is not None
        store.memories.add(one.memory_key, ["likes pelicans"], source_session_id=None)
        assert store.memories.for_user(two.memory_key) == []
    # Without scope or account the key is the one earlier releases wrote.
    plain = Principal.of(SessionSource(platform="telegram", chat_id="1", user_id="42"))
    assert plain.memory_key == "telegram:42"


def test_the_principal_compares_all_four_parts() -> None:
    base = SessionSource(platform="slack", scope_id="T1", account_id="bot", chat_id="D1", user_id="U1")
    one = Principal.of(base)
    assert one == Principal.of(SessionSource(platform="slack", scope_id="T1", account_id="bot", user_id="U1"))
    for other in (
        SessionSource(platform="discord", scope_id="T1", account_id="bot", user_id="U1"),
        SessionSource(platform="slack", scope_id="T2", account_id="bot", user_id="U1"),
        SessionSource(platform="slack", scope_id="T1", account_id="bot2", user_id="U1"),
        SessionSource(platform="slack", scope_id="T1", account_id="bot", user_id="U2"),
    ):
        assert Principal.of(other) != one
    # Empty strings count as absent, as in routing.
    assert Principal.of(SessionSource(platform="x", scope_id="", user_id="u")) == Principal.of(
        SessionSource(platform="x", user_id="u")
    )
    assert Principal.of(SessionSource(platform="x", user_id="u", user_id_alt="stable")).participant == "stable"


@pytest.mark.parametrize(
    ("scope", "seen"),
    [
        (SearchScope.USER, {"mine"}),
        (SearchScope.CHAT, {"mine", "group peer"}),
        (SearchScope.TENANT, {"mine", "group peer", "other chat"}),
        (SearchScope.ALL, {"mine", "group peer", "other chat", "other workspace"}),
    ],
)
def test_search_scopes_widen_from_user_to_all(db_path: Path, scope: SearchScope, seen: set[str]) -> None:
    def source(scope_id: str, chat: str, user: str) -> SessionSource:
        return SessionSource(platform="slack", scope_id=scope_id, chat_type="group", chat_id=chat, user_id=user)

    asker = source("T1", "C1", "U1")
    with Store.open(db_path) as store:
        for title, origin in (
            ("mine", asker),
            ("group peer", source("T1", "C1", "U2")),
            ("other chat", source("T1", "C2", "U3")),
            ("other workspace", source("T2", "C1", "U1")),
        ):
            store.create_session(origin, title=title)
        visible = visible_sessions(asker, scope)
        assert {s.title for s in store.list_sessions(visible=visible, limit=None)} == seen
