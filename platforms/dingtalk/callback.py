"""DingTalk robot callbacks (HTTP mode): authenticate the request and turn its JSON into an inbound message.

DingTalk signs each callback with two headers: ``timestamp`` (Unix milliseconds) and ``sign``, the base64 of
HMAC-SHA256 keyed with the app secret over ``timestamp + "\\n" + app secret``. The signature does not cover the
body: one made more than an hour from our clock (either way) is refused, as DingTalk's own check does, and within
the hour a pair carries one message (:mod:`platforms.dingtalk.signatures`), so :func:`open_callback` returns the
timestamp with the message.

The body names the conversation (``conversationId``; ``conversationType`` "1" one-to-one, "2" group), the sender
(``senderStaffId`` inside the corp, ``senderId`` always), the corp the robot belongs to (``chatbotCorpId``, the
session's scope) and a ``sessionWebhook`` that replies to this conversation until ``sessionWebhookExpiredTime``
(Unix milliseconds). That webhook, if it is DingTalk's (:mod:`platforms.dingtalk.webhook`; any other is dropped
with a warning), is kept as a :class:`Route` committed with the inbox row, so a reply made after a restart still
finds it, and knows the conversation's type and user for the robot send API.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
from collections.abc import Mapping
from typing import Annotated, Any

import msgspec

from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource
from platforms.dingtalk.config import RobotKeys
from platforms.dingtalk.webhook import webhook_problem
from platforms.support import json_guard
from platforms.support.http_client import shown
from platforms.support.http_host import Refused

__all__ = [
    "PLATFORM",
    "REPLAY_WINDOW_S",
    "FileRef",
    "Ignored",
    "Received",
    "Route",
    "Signed",
    "decode_callback",
    "decode_route",
    "encode_route",
    "expected_sign",
    "open_callback",
    "route_key",
]

_log = logging.getLogger(__name__)

PLATFORM = "dingtalk"
REPLAY_WINDOW_S = 3600  # how far the ``timestamp`` header may be from our clock, either way

_TIMESTAMP = re.compile(r"[0-9]{1,16}")
_TYPES = {"1": "dm", "2": "group"}
_PLACEHOLDERS = {
    "picture": "[image]",
    "richText": "[rich text]",
    "file": "[file]",
    "audio": "[audio]",
    "video": "[video]",
}

_Id = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
_Name = Annotated[str, msgspec.Meta(max_length=256)]


class Route(msgspec.Struct, frozen=True, kw_only=True):
    """How to answer a conversation: its session webhook while valid, else the robot send API."""

    chat_type: str  # "dm" or "group"
    conversation_id: str
    user_id: str | None = None  # the staff id a one-to-one reply goes to through the robot API
    webhook: str | None = None
    webhook_expires_at: float | None = None  # Unix seconds


class Ignored(msgspec.Struct, frozen=True, kw_only=True):
    """An authentic callback that holds nothing to answer."""

    message_id: str
    reason: str


class FileRef(msgspec.Struct, frozen=True, kw_only=True):
    """A file of a message: its ``downloadCode`` (for ``/v1.0/robot/messageFiles/download``) and what it is."""

    download_code: str
    kind: str
    name: str | None = None


class Received(msgspec.Struct, frozen=True, kw_only=True):
    """A message to accept, the route its replies take, and the files to download first."""

    inbound: InboundMessage
    route: Route
    files: tuple[FileRef, ...] = ()


class Signed(msgspec.Struct, frozen=True, kw_only=True):
    """A callback whose ``sign`` checked out: its ``timestamp`` header (Unix milliseconds) and what it holds."""

    timestamp_ms: int
    opened: Ignored | Received

    @property
    def message_id(self) -> str:
        """The callback's ``msgId``."""
        opened = self.opened
        return opened.message_id if isinstance(opened, Ignored) else opened.inbound.message_id


class _Text(msgspec.Struct, frozen=True, kw_only=True):
    content: str = ""


class _Callback(msgspec.Struct, frozen=True, kw_only=True):
    msgId: _Id
    conversationId: _Id
    conversationType: _Name
    senderId: _Name = ""
    senderStaffId: _Name = ""
    senderNick: _Name = ""
    chatbotCorpId: _Name = ""
    senderCorpId: _Name = ""
    robotCode: _Name = ""
    conversationTitle: _Name = ""
    msgtype: _Name = "text"
    text: _Text | None = None
    content: dict[str, Any] | None = None  # pictures, files, audio, video and rich text
    sessionWebhook: Annotated[str, msgspec.Meta(max_length=2048)] = ""
    sessionWebhookExpiredTime: int | None = None


_callback = msgspec.json.Decoder(_Callback)
_route = msgspec.json.Decoder(Route)


def route_key(robot: str, conversation_id: str) -> str:
    """The cursor account under which a conversation's :class:`Route` is stored."""
    return f"route:{robot}:{conversation_id}"


def encode_route(route: Route) -> str:
    """A route as the text of a poll cursor."""
    return msgspec.json.encode(route).decode()


def decode_route(text: str) -> Route | None:
    """The route stored as ``text``, or ``None`` when it is not one."""
    try:
        return _route.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def expected_sign(timestamp: str, secret: str) -> str:
    """The ``sign`` header DingTalk sends with ``timestamp`` for an app with ``secret``."""
    digest = hmac.new(secret.encode(), f"{timestamp}\n{secret}".encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def _check_sign(robot: RobotKeys, headers: Mapping[str, str], now: float) -> int:
    timestamp, sign = headers.get("timestamp"), headers.get("sign")
    if timestamp is None or sign is None:
        raise Refused(401, "unsigned request: the timestamp and sign headers are required")
    if not _TIMESTAMP.fullmatch(timestamp):
        raise Refused(401, "the timestamp header must be an integer number of Unix milliseconds")
    skew = now - int(timestamp) / 1000
    if abs(skew) > REPLAY_WINDOW_S:
        when = f"{skew:.0f} s old" if skew > 0 else f"{-skew:.0f} s in the future"
        raise Refused(401, f"the timestamp is {when}, outside the {REPLAY_WINDOW_S} s window")
    if not hmac.compare_digest(sign.strip().encode(), expected_sign(timestamp, robot.app_secret).encode()):
        raise Refused(401, f"the sign header does not match the app secret of robot {robot.name!r}")
    return int(timestamp)


def open_callback(
    robot: RobotKeys, headers: Mapping[str, str], body: bytes, *, received_at: float, api_base_url: str
) -> Signed:
    """Authenticate and decode one callback to ``robot``'s URL; raise :class:`Refused` with the HTTP answer."""
    timestamp_ms = _check_sign(robot, headers, received_at)
    opened = decode_callback(robot, body, received_at=received_at, api_base_url=api_base_url)
    return Signed(timestamp_ms=timestamp_ms, opened=opened)


def decode_callback(
    robot: RobotKeys, body: bytes | str, *, received_at: float, api_base_url: str
) -> Ignored | Received:
    """Decode a robot message (an HTTP callback's body, or a stream frame's ``data``); :class:`Refused` 400 says
    what is wrong with it. A ``sessionWebhook`` that is not DingTalk's (by :func:`~platforms.dingtalk.webhook.
    webhook_problem`, given the configured ``api_base_url``) is dropped with a warning."""
    try:
        callback = json_guard.decode(_callback, body)
    except msgspec.ValidationError as exc:
        raise Refused(400, f"the body is not in DingTalk's robot callback format ({exc})") from None
    except msgspec.DecodeError as exc:
        raise Refused(400, f"the body is not valid JSON ({exc})") from None
    if callback.robotCode and callback.robotCode != robot.robot_code:
        raise Refused(
            400,
            f"the callback is for robot code {callback.robotCode!r}, but this URL is robot {robot.name!r} "
            f"({robot.robot_code}); give each robot its own URL, /dingtalk/robot/<name>",
        )
    chat_type = _TYPES.get(callback.conversationType)
    if chat_type is None:
        raise Refused(400, f'$.conversationType must be "1" or "2", not {callback.conversationType!r}')
    text = _text_of(callback)
    if not text.strip():
        return Ignored(message_id=callback.msgId, reason=f"message {callback.msgId} has no text")
    user = callback.senderStaffId or callback.senderId or None
    source = SessionSource(
        platform=PLATFORM,
        account_id=robot.name,
        scope_id=callback.chatbotCorpId or callback.senderCorpId or None,
        chat_type=chat_type,
        chat_id=callback.conversationId,
        user_id=user,
        chat_name=callback.conversationTitle or None,
        user_name=callback.senderNick or None,
        message_id=callback.msgId,
    )
    inbound = InboundMessage(source=source, text=text, message_id=callback.msgId, received_at=received_at)
    webhook = callback.sessionWebhook or None
    problem = webhook_problem(webhook, api_base_url) if webhook is not None else None
    if webhook is not None and problem is not None:
        _log.warning(
            "dingtalk robot %r: ignored the sessionWebhook %s of message %s: %s; its replies take the "
            "conversation's stored route or the robot API",
            robot.name,
            _shown(webhook),
            callback.msgId,
            problem,
        )
        webhook = None
    expires = callback.sessionWebhookExpiredTime
    route = Route(
        chat_type=chat_type,
        conversation_id=callback.conversationId,
        user_id=callback.senderStaffId or None,
        webhook=webhook,
        webhook_expires_at=expires / 1000 if expires is not None and webhook is not None else None,
    )
    return Received(inbound=inbound, route=route, files=tuple(_files_of(callback)))


def _shown(url: str) -> str:
    """``url`` for the log, without its query (the session is a credential)."""
    try:
        return shown(url)
    except ValueError:
        return "(not a URL)"


_KINDS = {"picture": "image", "file": "document", "audio": "audio", "video": "video"}


def _code(value: object) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= 4096 else None


def _files_of(callback: _Callback) -> list[FileRef]:
    """The files a message carries: its own for a picture, file, audio or video; the pictures of rich text."""
    content = callback.content or {}
    kind = _KINDS.get(callback.msgtype)
    if kind is not None:
        code, name = _code(content.get("downloadCode")), content.get("fileName")
        return [FileRef(download_code=code, kind=kind, name=name if isinstance(name, str) else None)] if code else []
    if callback.msgtype != "richText":
        return []
    found = []
    for part in content.get("richText") or ():
        code = _code(part.get("downloadCode")) if isinstance(part, dict) and part.get("type") == "picture" else None
        if code is not None:
            found.append(FileRef(download_code=code, kind="image"))
    return found


def _text_of(callback: _Callback) -> str:
    """The message as text: its words; a file as a stand-in such as ``[image]`` (audio with DingTalk's
    transcription when it sent one); rich text as its text parts with ``[image]`` for each picture."""
    content = callback.content or {}
    if callback.msgtype == "text":
        return (callback.text.content if callback.text is not None else "").strip()
    if callback.msgtype == "audio" and isinstance(content.get("recognition"), str) and content["recognition"].strip():
        return f"[audio] {content['recognition'].strip()}"
    if callback.msgtype == "richText" and isinstance(content.get("richText"), list):
        parts = [
            part["text"] if isinstance(part.get("text"), str) else "[image]" if part.get("type") == "picture" else ""
            for part in content["richText"]
            if isinstance(part, dict)
        ]
        return "".join(parts).strip()
    return _PLACEHOLDERS.get(callback.msgtype, f"[{callback.msgtype[:32]}]")
