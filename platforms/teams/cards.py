"""Buttons in Teams: an Adaptive Card with Approve and Deny under a question for approval, and the press Teams sends.

A reply asking for approval (``OutboundMessage.approval``) carries :func:`approval_card` on its last part: the
question's text and two ``Action.Submit`` buttons whose ``data`` names the request and the decision. A press comes
back as a ``message`` activity from the person who pressed it, with that ``data`` as its ``value`` and no text,
signed like every activity (the Bot Framework token); :func:`submitted_decision` reads it as ``/approve <id>`` or
``/deny <id>``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CARD_TYPE", "approval_card", "submitted_decision"]

CARD_TYPE = "application/vnd.microsoft.card.adaptive"
_KEY = "hermes_approval"
_COMMANDS = {"approve": "/approve", "deny": "/deny"}


def approval_card(text: str, approval_id: int) -> dict[str, Any]:
    """The attachment of a question for approval: its text, then Approve and Deny."""
    buttons = [
        {"type": "Action.Submit", "title": title, "data": {_KEY: approval_id, "decision": decision}}
        for title, decision in (("Approve", "approve"), ("Deny", "deny"))
    ]
    return {
        "contentType": CARD_TYPE,
        "content": {
            "type": "AdaptiveCard",
            "version": "1.4",
            "body": [{"type": "TextBlock", "text": text, "wrap": True}],
            "actions": buttons,
        },
    }


def submitted_decision(value: object) -> str | None:
    """The command a press of an approval card's button stands for, ``None`` for any other ``value``."""
    if not isinstance(value, dict):
        return None
    approval_id, command = value.get(_KEY), _COMMANDS.get(str(value.get("decision")))
    if command is None or not isinstance(approval_id, int) or isinstance(approval_id, bool) or approval_id < 0:
        return None
    return f"{command} {approval_id}"
