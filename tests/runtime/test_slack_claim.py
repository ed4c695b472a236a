"""A scope-less Slack DM route (imported from Hermes) is claimed by the first workspace that sees the DM."""

from __future__ import annotations

from pathlib import Path

from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.store import NewMessage, Role, Store
from hermes_actors.testing import FakePlatform


def _dm(scope: str, text: str, message_id: str) -> InboundMessage:
    source = SessionSource(
        platform="slack", account_id="main", scope_id=scope, chat_type="dm", chat_id="D1", user_id="U1"
    )
    return InboundMessage(source=source, text=text, message_id=message_id)


def test_the_first_workspace_claims_an_imported_dm_and_a_second_one_cannot(db_path: Path) -> None:
    with Store.open(db_path) as store:
        old = store.create_session("slack", session_id="20250101_000000_aaaaaaaa")
        store.append_messages(old.id, [NewMessage(role=Role.USER, content="from hermes")])
        store.set_route("agent:main:slack:dm:D1", old.id)  # a Hermes key: no workspace, no account
    slack = FakePlatform("slack")
    gateway = Gateway(db_path, senders=[slack])
    try:
        gateway.accept(_dm("T1", "hello again", "m1"))
        assert slack.pop().text == "echo: hello again"
        assert gateway.session_for("agent:main:slack.T1~main:dm:D1") == old.id
        gateway.accept(_dm("T2", "another workspace", "m2"))
        slack.pop()
        assert gateway.wait_idle()
        other = gateway.session_for("agent:main:slack.T2~main:dm:D1")
        assert other not in (None, old.id)
        with gateway.read() as store:
            assert store.get_route("agent:main:slack:dm:D1") is None  # claimed once
            assert [m.content for m in store.load_transcript(old.id)] == [
                "from hermes",
                "hello again",
                "echo: hello again",
            ]
    finally:
        gateway.stop()
