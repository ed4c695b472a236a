"""Buttons in Slack: the Approve and Deny buttons of a question for approval, and the presses Slack sends back.

A reply asking for approval (``OutboundMessage.approval``) carries :func:`approval_blocks`: its text, then an
``actions`` block with two buttons whose ``value`` is the request's id. A press reaches the app's Interactivity
Request URL (``POST /slack/actions/<app>``) as a signed form with a ``block_actions`` ``payload``, checked like an
event (the signing secret and the replay window); :func:`press_to_inbound` turns it into ``/approve <id>`` or
``/deny <id>`` from the person who pressed, in the channel (and thread) of the question.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

import msgspec

from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource
from platforms.slack.config import SLACK_ID, ResolvedApp
from platforms.slack.events import PLATFORM, Skipped
from platforms.support import json_guard
from platforms.support.http_host import Refused

__all__ = ["APPROVE_ACTION", "DENY_ACTION", "approval_blocks", "press_to_inbound"]

APPROVE_ACTION = "hermes_approve"
DENY_ACTION = "hermes_deny"
_COMMANDS = {APPROVE_ACTION: "/approve", DENY_ACTION: "/deny"}
_MAX_SECTION = 3000  # a section block's text limit


def approval_blocks(text: str, approval_id: int) -> list[dict[str, Any]]:
    """The blocks of a question for approval: its text, then Approve and Deny."""
    return [
        {"type": "section", "text": {"type": "plain_text", "text": text[:_MAX_SECTION]}},
        {
            "type": "actions",
            "block_id": f"hermes_approval_{approval_id}",
            "elements": [
                {
                    "type": "button",
                    "text": {"type": "plain_text", "text": "Approve"},
                    "style": "primary",
                    "action_id": APPROVE_ACTION,
                    "value": str(approval_id),
                },
                {
                    "type": "button",
                    "text": {"type": "plain_text", "text": "Deny"},
                    "style": "danger",
                    "action_id": DENY_ACTION,
                    "value": str(approval_id),
                },
            ],
        },
    ]


class _Named(msgspec.Struct, frozen=True, kw_only=True):
    id: str


class _Action(msgspec.Struct, frozen=True, kw_only=True):
    action_id: str
    value: str | None = None
    action_ts: str | None = None


class _Pressed(msgspec.Struct, frozen=True, kw_only=True):
    ts: str | None = None
    thread_ts: str | None = None


class _Payload(msgspec.Struct, frozen=True, kw_only=True):
    """A ``block_actions`` payload (the fields used)."""

    type: str
    user: _Named | None = None
    team: _Named | None = None
    channel: _Named | None = None
    message: _Pressed | None = None
    actions: list[_Action] = msgspec.field(default_factory=list)


_decoder = msgspec.json.Decoder(_Payload)


def press_to_inbound(app: ResolvedApp, body: bytes, *, received_at: float) -> InboundMessage | Skipped:
    """The decision a signed interactivity request stands for, or :class:`Skipped` (another kind of payload, another
    button); :class:`Refused` for a body that is not one Slack sends."""
    raw = parse_qs(body.decode("utf-8", "replace")).get("payload")
    if not raw:
        raise Refused(400, "an interactivity request carries a form field 'payload'")
    try:
        payload = json_guard.decode(_decoder, raw[0].encode())
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise Refused(400, f"the payload is not an interactivity payload ({exc})") from None
    if payload.type != "block_actions":
        return Skipped(reason=f"a {payload.type[:40]!r} payload is no button press")
    pressed = next((a for a in payload.actions if a.action_id in _COMMANDS), None)
    if pressed is None or pressed.value is None or not pressed.value.isdigit():
        return Skipped(reason="a press of a button that is not an approval's")
    if payload.user is None or payload.team is None or payload.channel is None:
        raise Refused(400, "a button press names its user, team and channel")
    team, channel, user = payload.team.id, payload.channel.id, payload.user.id
    for value, field in ((team, "$.team.id"), (channel, "$.channel.id"), (user, "$.user.id")):
        if not SLACK_ID.fullmatch(value):
            raise Refused(400, f"{field} {value[:40]!r} is not a Slack id such as C0123ABCD")
    if app.team_id is not None and team != app.team_id:
        raise Refused(403, f"app {app.name!r} accepts workspace {app.team_id} only, not {team}")
    question = payload.message or _Pressed()
    source = SessionSource(
        platform=PLATFORM,
        account_id=app.name,
        scope_id=team,
        chat_type="dm" if channel.startswith("D") else "group",
        chat_id=channel,
        thread_id=question.thread_ts,
        user_id=user,
    )
    stamp = pressed.action_ts or question.ts or f"{received_at:.6f}"
    text = f"{_COMMANDS[pressed.action_id]} {pressed.value}"
    return InboundMessage(
        source=source, text=text, message_id=f"{team}:{channel}:press:{stamp}", received_at=received_at
    )
