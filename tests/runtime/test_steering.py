"""The steering channel between the supervisor and a running turn, and where steered messages are stored."""

from __future__ import annotations

import msgspec

from hermes_actors.agents.turn import AgentMessage
from hermes_actors.messages import Attachment, AttachmentKind, Conversation
from hermes_actors.runtime.protocol import Delivery
from hermes_actors.runtime.steering import SteerChannel, steerable, steered_messages
from hermes_actors.store import Role
from hermes_actors.testing import FakePlatform

_fake = FakePlatform()


def _delivery(inbox_id: int, text: str) -> Delivery:
    return Delivery(inbox_id=inbox_id, message=_fake.message(text, message_id=f"m{inbox_id}"))


def test_a_channel_takes_offers_only_while_its_turns_agent_runs_and_returns_what_the_turn_did_not_commit() -> None:
    channel = SteerChannel()
    assert not channel.offer(_delivery(1, "too early"))  # not opened: the agent takes no steering (yet)
    channel.open()
    assert channel.offer(_delivery(2, "b"))
    assert channel.offer(_delivery(3, "c"))
    assert channel.take() == ["b", "c"]
    assert channel.take() == []  # each once
    assert channel.offer(_delivery(4, "d"))  # after the last model call: never taken
    taken = channel.close()
    assert [d.inbox_id for d in taken] == [2, 3]
    assert not channel.offer(_delivery(5, "late"))  # closed
    assert channel.take() == []
    assert [d.inbox_id for d in channel.returned(committed={1, 2, 3})] == [4]
    assert channel.returned(committed=set()) == ()  # handed back once


def test_a_turn_that_committed_nothing_returns_every_offered_message_in_order() -> None:
    channel = SteerChannel()
    channel.open()
    for inbox_id in (7, 8):
        channel.offer(_delivery(inbox_id, f"t{inbox_id}"))
    channel.take()
    assert [d.inbox_id for d in channel.returned(committed=())] == [7, 8]  # failed, stopped or refused


def test_only_plain_text_goes_into_a_running_turn() -> None:
    plain = _delivery(1, "plain")
    assert steerable(plain)
    attachment = Attachment(kind=AttachmentKind.IMAGE, name="a.png")
    assert not steerable(
        msgspec.structs.replace(plain, message=msgspec.structs.replace(plain.message, attachments=(attachment,)))
    )
    assert not steerable(_delivery(2, "/stop"))
    context = msgspec.structs.replace(plain.message, context=Conversation(system="be brief"))
    assert not steerable(msgspec.structs.replace(plain, message=context))


def test_steered_messages_are_stored_where_the_agent_sent_them_with_their_platform_ids() -> None:
    reply = (
        AgentMessage(role=Role.ASSISTANT, tool_calls="[]"),
        AgentMessage(role=Role.USER, content="b"),
        AgentMessage(role=Role.ASSISTANT, content="done"),
    )
    stored = steered_messages(reply, (_delivery(2, "b"),), now=5.0)
    assert [(m.role, m.content, m.platform_message_id) for m in stored] == [
        (Role.ASSISTANT, None, None),
        (Role.USER, "b", "m2"),
        (Role.ASSISTANT, "done", None),
    ]


def test_a_taken_message_the_agent_did_not_report_is_stored_before_its_answer() -> None:
    reply = (AgentMessage(role=Role.ASSISTANT, content="done"),)
    stored = steered_messages(reply, (_delivery(2, "b"), _delivery(3, "c")), now=5.0)
    assert [(m.role, m.content) for m in stored] == [(Role.USER, "b"), (Role.USER, "c"), (Role.ASSISTANT, "done")]
