"""Buttons in Feishu: an interactive card with Approve and Deny under a question for approval, and the press.

A reply asking for approval (``OutboundMessage.approval``) sends its last part as an ``interactive`` message
(:func:`approval_card`): the part's text and two buttons whose ``value`` names the request and the decision. A press
reaches the app's event URL as a ``card.action.trigger`` event (schema 2.0), authenticated like every event (the
verification token, and with an encrypt key the signature and the encryption); :func:`press_of` reads it as
``/approve <id>`` or ``/deny <id>`` from the operator who pressed, in the card's chat.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["CARD_EVENT", "Press", "approval_card", "press_of"]

CARD_EVENT = "card.action.trigger"
_KEY = "hermes_approval"
_COMMANDS = {"approve": "/approve", "deny": "/deny"}


def approval_card(text: str, approval_id: int) -> dict[str, str]:
    """The ``interactive`` message of a question for approval: its text, then Approve and Deny."""
    buttons = [
        {
            "tag": "button",
            "text": {"tag": "plain_text", "content": title},
            "type": kind,
            "value": {_KEY: str(approval_id), "decision": decision},
        }
        for title, kind, decision in (("Approve", "primary", "approve"), ("Deny", "danger", "deny"))
    ]
    card = {
        "config": {"wide_screen_mode": True},
        "elements": [
            {"tag": "div", "text": {"tag": "plain_text", "content": text}},
            {"tag": "action", "actions": buttons},
        ],
    }
    return {"msg_type": "interactive", "content": msgspec.json.encode(card).decode()}


class _Operator(msgspec.Struct, frozen=True, kw_only=True):
    open_id: str | None = None
    union_id: str | None = None
    tenant_key: str | None = None


class _Action(msgspec.Struct, frozen=True, kw_only=True):
    value: dict[str, Any] | None = None


class _Context(msgspec.Struct, frozen=True, kw_only=True):
    open_message_id: str | None = None
    open_chat_id: str | None = None


class _CardEvent(msgspec.Struct, frozen=True, kw_only=True):
    operator: _Operator
    action: _Action
    context: _Context = _Context()


class _CardEnvelope(msgspec.Struct, frozen=True, kw_only=True):
    event: _CardEvent


class Press(msgspec.Struct, frozen=True, kw_only=True):
    """A press of an approval's button: the command, who pressed, in which chat and on which message."""

    text: str
    open_id: str | None
    union_id: str | None
    chat_id: str
    message_id: str | None


_decoder = msgspec.json.Decoder(_CardEnvelope)


def press_of(plain: bytes) -> Press | None:
    """The approval decision of a ``card.action.trigger`` event's body, ``None`` for another button (or a card
    outside a chat); raises :class:`msgspec.ValidationError` for a body that is not such an event."""
    event = _decoder.decode(plain).event
    value = event.action.value or {}
    command = _COMMANDS.get(str(value.get("decision")))
    number = str(value.get(_KEY, ""))
    if command is None or not number.isdigit() or not event.context.open_chat_id:
        return None
    return Press(
        text=f"{command} {number}",
        open_id=event.operator.open_id,
        union_id=event.operator.union_id,
        chat_id=event.context.open_chat_id,
        message_id=event.context.open_message_id,
    )
