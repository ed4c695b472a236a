"""The Events API as it arrives: the request signature check, the envelope and message event decoded once, and
the inbound message a user's message becomes.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from typing import Any

import msgspec

from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource
from platforms.slack.config import SLACK_ID, ResolvedApp
from platforms.slack.files import SlackFile
from platforms.support import json_guard
from platforms.support.http_host import Refused

__all__ = ["PLATFORM", "REPLAY_WINDOW_S", "Skipped", "decode_envelope", "to_inbound", "verify"]

REPLAY_WINDOW_S = 300  # how far X-Slack-Request-Timestamp may be from our clock, either way
PLATFORM = "slack"
_TS = re.compile(r"[0-9]{1,12}\.[0-9]{1,9}")
_TIMESTAMP = re.compile(r"[0-9]{1,15}")
_USER_TEXT_SUBTYPES = frozenset({"thread_broadcast", "file_share", "me_message"})
_EDITS = frozenset({"message_changed", "message_deleted"})


def verify(key: bytes, headers: Mapping[str, str], body: bytes, now: float) -> None:
    """Check ``X-Slack-Signature`` and the replay window, or raise :class:`Refused` (401)."""
    timestamp = headers.get("X-Slack-Request-Timestamp")
    offered = headers.get("X-Slack-Signature")
    if timestamp is None or offered is None:
        raise Refused(401, "unsigned request: X-Slack-Request-Timestamp and X-Slack-Signature are required")
    if not _TIMESTAMP.fullmatch(timestamp):
        raise Refused(401, "X-Slack-Request-Timestamp must be an integer number of Unix seconds")
    skew = now - int(timestamp)
    if abs(skew) > REPLAY_WINDOW_S:
        when = f"{skew:.0f} s old" if skew > 0 else f"{-skew:.0f} s in the future"
        raise Refused(401, f"X-Slack-Request-Timestamp is {when}, outside the {REPLAY_WINDOW_S} s window")
    digest = hmac.new(key, b"v0:" + timestamp.encode() + b":" + body, hashlib.sha256).hexdigest()
    if not (offered.isascii() and hmac.compare_digest(offered.encode(), f"v0={digest}".encode())):
        raise Refused(401, "X-Slack-Signature does not match the body and the app's signing secret")


class _Authorization(msgspec.Struct, frozen=True, kw_only=True):
    user_id: str | None = None
    is_bot: bool = False


class _Envelope(msgspec.Struct, frozen=True, kw_only=True):
    """The outer Events API body; ``event`` stays raw until its type is known to be a message."""

    type: str
    challenge: str | None = None
    team_id: str | None = None
    event_id: str | None = None
    event: dict[str, Any] | None = None
    authorizations: list[_Authorization] = msgspec.field(default_factory=list)


class _Profile(msgspec.Struct, frozen=True, kw_only=True):
    display_name: str | None = None
    real_name: str | None = None


class _MessageEvent(msgspec.Struct, frozen=True, kw_only=True):
    """A ``message`` or ``app_mention`` event (the fields used)."""

    channel: str
    ts: str
    user: str | None = None
    text: str | None = None
    channel_type: str | None = None
    thread_ts: str | None = None
    team: str | None = None
    files: list[SlackFile] = msgspec.field(default_factory=list)
    user_profile: _Profile | None = None


_envelope_decoder = msgspec.json.Decoder(_Envelope)


def decode_envelope(body: bytes) -> _Envelope:
    try:
        return json_guard.decode(_envelope_decoder, body)
    except msgspec.ValidationError as exc:
        raise Refused(400, f"the body is not an Events API payload ({exc})") from None
    except msgspec.DecodeError as exc:
        raise Refused(400, f"the body is not valid JSON ({exc})") from None


def _checked_id(value: str | None, pattern: re.Pattern[str], field: str) -> str:
    if value is None:
        raise Refused(400, f"{field} is missing")
    if not pattern.fullmatch(value):
        what = "a Slack ts such as 1764460800.000100" if pattern is _TS else "a Slack id such as C0123ABCD"
        raise Refused(400, f"{field} {value[:40]!r} is not {what}")
    return value


def _unescape(text: str) -> str:
    """Slack sends ``&``, ``<`` and ``>`` as entities; the agent should see what the user typed."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _stand_in(file: SlackFile) -> str:
    kind = (file.mimetype or "").partition("/")[0]
    label = kind if kind in ("image", "audio", "video") else "file"
    name = (file.name or "").replace("]", ")")[:80]
    return f"[{label}: {name}]" if name else f"[{label}]"


def _text_of(event: _MessageEvent, bot_user: str | None) -> str:
    """The message text as the agent should read it: entities decoded, our own @-mention removed, files named."""
    text = event.text or ""
    if bot_user is not None:
        stripped = re.sub(rf"<@{re.escape(bot_user)}(?:\|[^>]*)?>", "", text).strip()
        text = stripped or ("" if event.files else text)  # a bare mention still expects an answer
    parts = [_unescape(text).strip(), *(_stand_in(file) for file in event.files)]
    return "\n".join(part for part in parts if part)


class Skipped(msgspec.Struct, frozen=True, kw_only=True):
    """An event that starts no turn, and why; ``quiet`` ones (bots' messages, our own replies) log at debug."""

    reason: str
    quiet: bool = False


def to_inbound(
    app: ResolvedApp, envelope: _Envelope, *, reply_in_thread: bool, received_at: float
) -> tuple[InboundMessage, list[SlackFile]] | Skipped:
    """Map an ``event_callback`` to an inbound message and its files, or a :class:`Skipped`; :class:`Refused`
    if broken."""
    raw = envelope.event
    if raw is None:
        raise Refused(400, "$.event is missing from an event_callback")
    kind, subtype = raw.get("type"), raw.get("subtype")
    if not isinstance(kind, str) or not isinstance(subtype, str | None):
        raise Refused(400, "$.event.type must be a string (and $.event.subtype a string when present)")
    if kind not in ("message", "app_mention"):
        return Skipped(reason=f"a {kind[:40]!r} event is not a message")
    if subtype in _EDITS:
        return Skipped(reason=f"a {subtype} event (edits and deletions do not start turns)")
    if raw.get("bot_id") is not None or subtype == "bot_message":
        return Skipped(reason="a bot's message (ours or another app's)", quiet=True)
    if subtype is not None and subtype not in _USER_TEXT_SUBTYPES:
        return Skipped(reason=f"a {subtype[:40]!r} message is not user text")
    try:
        event = msgspec.convert(raw, _MessageEvent)
    except msgspec.ValidationError as exc:
        raise Refused(400, f"$.event is not a message event ({exc})") from None
    team = _checked_id(envelope.team_id or event.team, SLACK_ID, "$.team_id")
    if app.team_id is not None and team != app.team_id:
        raise Refused(403, f"app {app.name!r} accepts workspace {app.team_id} only, not {team}")
    channel = _checked_id(event.channel, SLACK_ID, "$.event.channel")
    user = _checked_id(event.user, SLACK_ID, "$.event.user")
    ts = _checked_id(event.ts, _TS, "$.event.ts")
    thread_ts = _checked_id(event.thread_ts, _TS, "$.event.thread_ts") if event.thread_ts is not None else None
    bot_user = next((a.user_id for a in envelope.authorizations if a.is_bot and a.user_id), None)
    if user == bot_user:
        return Skipped(reason="our own message", quiet=True)
    text = _text_of(event, bot_user)
    if not text:
        return Skipped(reason="a message without text or files")
    # app_mention has no channel_type; only DMs have D ids, so both copies of a message agree on the chat type.
    is_dm = event.channel_type == "im" or (event.channel_type is None and channel.startswith("D"))
    if thread_ts is None and reply_in_thread and not is_dm:
        thread_ts = ts  # the reply opens a thread under this message, and that thread is the session
    profile = event.user_profile
    source = SessionSource(
        platform=PLATFORM,
        account_id=app.name,
        scope_id=team,
        chat_type="dm" if is_dm else "group",
        chat_id=channel,
        thread_id=thread_ts,
        user_id=user,
        user_name=(profile.display_name or profile.real_name or None) if profile is not None else None,
        message_id=ts,
    )
    inbound = InboundMessage(source=source, text=text, message_id=f"{team}:{channel}:{ts}", received_at=received_at)
    return inbound, event.files
