"""hermesd's side of ``hermesctl sessions rename/end/delete`` (:class:`SessionAdministration`), in process on a real
gateway: a live session is ended through its actor before it is deleted, and its chat then gets a fresh session."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_actors.daemon.admin import SessionAdministration
from hermes_actors.daemon.control import SessionAction, SessionAdmin, SessionAdminReply
from hermes_actors.errors import SessionBusyError, SessionNotFoundError
from hermes_actors.store import Store
from hermes_actors.testing import open_fake_gateway, poll_until

KEY = "agent:main:fake:dm:chat-1"


def test_delete_of_a_live_session_ends_it_through_its_actor_then_deletes_it(db_path: Path) -> None:
    with open_fake_gateway(db_path) as (gateway, fake):
        admin = SessionAdministration(gateway)
        fake.push("hello")
        fake.pop()
        session = gateway.session_for(KEY)
        assert session is not None
        with gateway.read() as store:
            assert store.leases.holder(session) == gateway.lease_owner  # held until passivation
        reply = admin.handle(SessionAdmin(action=SessionAction.DELETE, session_id=session))
        assert reply == SessionAdminReply(session_id=session, ended=True, deleted=True)
        poll_until(lambda: gateway.statistics().live_actors == 0, what="the deleted session's actor to stop")
        with gateway.read() as store:
            assert store.find_session(session) is None
            assert store.leases.holder(session) is None
        fake.push("next")
        assert fake.pop().text == "echo: next"
        fresh = gateway.session_for(KEY)
        assert fresh is not None
        assert fresh != session
        with pytest.raises(SessionNotFoundError):
            admin.handle(SessionAdmin(action=SessionAction.END, session_id=session))


def test_rename_and_end_answer_what_was_done_and_another_holder_is_refused(db_path: Path) -> None:
    with open_fake_gateway(db_path) as (gateway, fake):
        admin = SessionAdministration(gateway)
        fake.push("hello")
        fake.pop()
        session = gateway.session_for(KEY)
        assert session is not None
        renamed = admin.handle(SessionAdmin(action=SessionAction.RENAME, session_id=session, title="  spaced  out "))
        assert renamed.title == "spaced out"
        fake.push("/title")
        assert fake.pop().text == "Title: spaced out"
        assert admin.handle(SessionAdmin(action=SessionAction.END, session_id=session)).ended
        assert not admin.handle(SessionAdmin(action=SessionAction.END, session_id=session)).ended  # ended already
        with Store.open(db_path) as store:
            theirs = store.create_session("fake", title="theirs")
            assert store.leases.acquire(theirs.id, "otherhost:7:1", ttl_s=60) is None
        for action in SessionAction:
            with pytest.raises(SessionBusyError, match=r"open in a process \(pid 7\) on host otherhost"):
                admin.handle(SessionAdmin(action=action, session_id=theirs.id, title="mine"))
        with gateway.read() as store:
            assert store.get_session(theirs.id).title == "theirs"


def test_an_ended_session_renamed_through_hermesd_can_still_be_deleted(db_path: Path) -> None:
    """The rename activates an actor for the ended session (which then holds its lease); the delete retires it."""
    with open_fake_gateway(db_path) as (gateway, fake):
        admin = SessionAdministration(gateway)
        fake.push("hello")
        fake.pop()
        session = gateway.session_for(KEY)
        assert session is not None
        assert admin.handle(SessionAdmin(action=SessionAction.END, session_id=session)).ended
        assert admin.handle(SessionAdmin(action=SessionAction.RENAME, session_id=session, title="kept")).title == "kept"
        reply = admin.handle(SessionAdmin(action=SessionAction.DELETE, session_id=session))
        assert reply == SessionAdminReply(session_id=session, ended=False, deleted=True)
        with gateway.read() as store:
            assert store.find_session(session) is None
