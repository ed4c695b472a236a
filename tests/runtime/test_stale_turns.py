"""A turn refused because another turn answered one of its messages (issue 37): the messages no turn answered run
again at once, before anything queued after them, instead of staying pending with no one to hand them over."""

from __future__ import annotations

from pathlib import Path

from hermes_actors.config import RuntimeConfig
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.store import Store
from hermes_actors.testing import FakePlatform
from tests.runtime.test_leases import AskedAgent

KEY = "agent:main:fake:dm:chat-1"


def test_the_messages_of_a_stale_merged_turn_that_no_turn_answered_run_again_first(db_path: Path) -> None:
    agent = AskedAgent()
    fake = FakePlatform()
    config = RuntimeConfig(pending_soft_limit=2)  # two queued messages of a chat make one turn
    gateway = Gateway(db_path, config=config, agent=agent, senders=[fake], tick_interval_s=3600)
    try:
        fake.attach(gateway)
        fake.push("zero", message_id="m0")
        assert agent.started.wait(10)  # "zero" runs; "one" and "two" queue behind it and merge
        fake.push("one", message_id="m1")
        fake.push("two", message_id="m2")
        fake.push("three", message_id="m3")
        with Store.open(db_path) as other:  # another process answers "one" meanwhile
            row = other.inbox.find("fake", "", "m1")
            assert row is not None
            assert other.inbox.complete(row.id, session_id=None)
        agent.release.set()
        assert [fake.pop().text, fake.pop().text] == ["echo: zero", "echo: two\nthree"]
        assert gateway.wait_idle()
        session_id = gateway.session_for(KEY)
        assert session_id is not None
        with gateway.read() as store:
            users = [m.content for m in store.load_transcript(session_id) if m.role == "user"]
            assert store.inbox.depth() == 0
        assert users == ["zero", "two", "three"]
        assert agent.asked == ["zero", "one\ntwo\nthree", "two\nthree"]  # computed once, refused, run without "one"
    finally:
        agent.release.set()
        gateway.stop(timeout=10)
