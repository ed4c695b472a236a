"""An operator's rename and end (``hermesctl sessions`` through hermesd) as the supervisor applies them: through the
session's actor, so its in-memory state and the store agree."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path

import pytest

from hermes_actors.errors import SessionBusyError, SessionClosedError, TitleInUseError
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.protocol import AdminChange, EndSession, SetTitle
from hermes_actors.store import EndReason, Store
from hermes_actors.testing import FakePlatform, GatedAgent, poll_until
from tests.runtime.conftest import HeldWriter, MakeGateway

KEY = "agent:main:fake:dm:chat-1"


def _rename(gateway: Gateway, session_id: str, title: str | None) -> Future[str | None]:
    done: Future[str | None] = Future()
    gateway.admin(AdminChange(session_id=session_id, control=SetTitle(text=title, done=done)))
    return done


def _end(gateway: Gateway, session_id: str) -> Future[None]:
    done: Future[None] = Future()
    gateway.admin(AdminChange(session_id=session_id, control=EndSession(reason=EndReason.OPERATOR, done=done)))
    return done


def _talk(fake: FakePlatform, *texts: str) -> list[str]:
    replies = []
    for text in texts:
        fake.push(text)
        replies.append(fake.pop().text)
    return replies


def test_a_rename_reaches_the_live_actor_so_title_and_compress_use_it(make_gateway: MakeGateway) -> None:
    gateway, fake = make_gateway(protected_recent_messages=2)
    padding = " and check every table of it twice" * 4  # a history a summary and 2 messages are shorter than
    _talk(fake, "hello", "/title old name", "second" + padding, "third" + padding, "fourth" + padding)
    session = gateway.session_for(KEY)
    assert session is not None
    assert _rename(gateway, session, "deploy notes").result(timeout=10) == "deploy notes"
    assert _talk(fake, "/title") == ["Title: deploy notes"]
    (compressed,) = _talk(fake, "/compress")
    assert compressed.endswith("the conversation continues as deploy notes #2.")
    with gateway.read() as store:
        assert store.get_session(session).title == "deploy notes"
        assert store.resolve_session("deploy notes #2").parent_session_id == session


def test_a_rename_clears_with_a_blank_title_and_a_refused_one_changes_nothing(
    make_gateway: MakeGateway, db_path: Path
) -> None:
    gateway, fake = make_gateway()
    _talk(fake, "hello", "/title mine")
    session = gateway.session_for(KEY)
    assert session is not None
    with Store.open(db_path) as store:
        other = store.create_session("fake", session_id="20260101_000000_aaaaaa")
    assert _rename(gateway, other.id, "taken").result(timeout=10) == "taken"
    with pytest.raises(TitleInUseError, match="'taken' is already in use"):
        _rename(gateway, session, "taken").result(timeout=10)
    assert _talk(fake, "/title") == ["Title: mine"]
    assert _rename(gateway, session, "").result(timeout=10) is None
    assert _talk(fake, "/title") == ["This session has no title yet; set one with /title <text>."]


def test_an_end_retires_the_actor_and_the_key_gets_a_fresh_session(make_gateway: MakeGateway) -> None:
    gateway, fake = make_gateway()
    _talk(fake, "hello")
    session = gateway.session_for(KEY)
    assert session is not None
    assert gateway.statistics().live_actors == 1
    _end(gateway, session).result(timeout=10)
    poll_until(lambda: gateway.statistics().live_actors == 0, what="the ended session's actor to stop")
    with gateway.read() as store:
        record = store.get_session(session)
        assert (record.is_live, record.end_reason) == (False, "operator")
        assert store.routes_to(session) == []
    assert _talk(fake, "again") == ["echo: again"]
    fresh = gateway.session_for(KEY)
    assert fresh is not None
    assert fresh != session
    with gateway.read() as store:
        assert [m.content for m in store.load_transcript(fresh)] == ["again", "echo: again"]
        assert [m.content for m in store.load_transcript(session)] == ["hello", "echo: hello"]


def test_an_end_cancels_the_running_turn_and_a_second_end_is_refused(make_gateway: MakeGateway) -> None:
    agent = GatedAgent()
    gateway, fake = make_gateway(agent=agent)
    fake.push("a long question")
    assert agent.started.wait(10)
    session = gateway.session_for(KEY)
    assert session is not None
    held = HeldWriter(gateway)  # the end cannot commit, so it is still under way when the rename comes
    try:
        done = _end(gateway, session)
        with pytest.raises(SessionClosedError, match="is ending already"):
            _rename(gateway, session, "too late")
    finally:
        held.release()
    agent.release.set()
    done.result(timeout=10)
    assert gateway.wait_idle()
    with gateway.read() as store:
        assert store.get_session(session).end_reason == "operator"
        assert [m.content for m in store.load_transcript(session)] == ["a long question"]  # the reply was dropped


def test_a_stored_session_without_an_actor_is_changed_through_a_fresh_one(
    make_gateway: MakeGateway, db_path: Path
) -> None:
    gateway, _ = make_gateway()
    with Store.open(db_path) as store:
        idle = store.create_session("fake", session_id="20260101_000000_bbbbbb", title="before")
    assert gateway.statistics().live_actors == 0
    assert _rename(gateway, idle.id, "after").result(timeout=10) == "after"
    _end(gateway, idle.id).result(timeout=10)
    with gateway.read() as store:
        record = store.get_session(idle.id)
        assert (record.title, record.end_reason) == ("after", "operator")
        assert store.leases.holder(idle.id) is None
    poll_until(lambda: gateway.statistics().live_actors == 0, what="the ended session's actor to stop")
    assert _rename(gateway, idle.id, "renamed when ended").result(timeout=10) == "renamed when ended"
    with gateway.read() as store:
        assert store.get_session(idle.id).title == "renamed when ended"


def test_a_session_another_process_holds_is_refused_naming_that_process(
    make_gateway: MakeGateway, db_path: Path
) -> None:
    gateway, _ = make_gateway(lease_wait_s=0)
    with Store.open(db_path) as store:
        held = store.create_session("fake", session_id="20260101_000000_cccccc", title="theirs")
        assert store.leases.acquire(held.id, "otherhost:42:abc", ttl_s=60) is None
    with pytest.raises(SessionBusyError, match=r"open in a process \(pid 42\) on host otherhost, so nothing was"):
        _rename(gateway, held.id, "mine").result(timeout=10)
    with pytest.raises(SessionBusyError, match="otherhost"):
        _end(gateway, held.id).result(timeout=10)
    with gateway.read() as store:
        record = store.get_session(held.id)
        assert (record.title, record.is_live) == ("theirs", True)
