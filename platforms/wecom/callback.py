"""WeCom application callbacks: the URL check (``GET``) and message pushes (``POST``), opened and decoded.

Both carry ``msg_signature``, ``timestamp`` and ``nonce`` in the query. The ``GET`` sent when the callback URL is
saved has an ``echostr`` to decrypt and send back as it is; each ``POST`` is ``<xml>`` with ``ToUserName`` (the
corp), ``AgentID`` and ``Encrypt``, whose plaintext is the message's own XML. A timestamp more than
:data:`REPLAY_WINDOW_S` from our clock is refused (a signed request recorded and sent later); inside the window a
replay meets the durable dedupe: ``MsgId`` for messages. Events (entering the app, menu clicks) hold nothing to
answer and are acknowledged without a turn.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import msgspec

from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource
from platforms.support.http_host import Refused
from platforms.wecom.config import AppKeys
from platforms.wecom.crypto import CryptoError, XmlError, open_sealed, parse_flat_xml, signed

__all__ = ["MEDIA_KINDS", "PLATFORM", "REPLAY_WINDOW_S", "Ignored", "Media", "Received", "open_echo", "open_message"]

PLATFORM = "wecom"
REPLAY_WINDOW_S = 300
MEDIA_KINDS = {"image": "image", "voice": "audio", "video": "video", "file": "document"}

_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_LIMIT = 256
_STAND_INS = {"image": "[image]", "voice": "[voice message]", "video": "[video]", "file": "[file]"}


class Ignored(msgspec.Struct, frozen=True, kw_only=True):
    """An authentic push that holds no user message (an event): answer 200 with an empty body."""

    reason: str


class Media(msgspec.Struct, frozen=True, kw_only=True):
    """A file to fetch with ``media/get`` before the message is accepted."""

    media_id: str
    kind: str
    name: str | None = None


class Received(msgspec.Struct, frozen=True, kw_only=True):
    """A user message to accept, and the file it carries, if any."""

    inbound: InboundMessage
    media: Media | None = None


def _check_query(app: AppKeys, query: Mapping[str, str], sealed: str, now: float) -> None:
    found = [query.get(name) for name in ("msg_signature", "timestamp", "nonce")]
    if any(value is None or not value for value in found):
        raise Refused(401, "msg_signature, timestamp and nonce are required in the query")
    mac, timestamp, nonce = (value or "" for value in found)
    if not _TIMESTAMP.fullmatch(timestamp):
        raise Refused(401, "timestamp must be an integer number of Unix seconds")
    skew = now - int(timestamp)
    if abs(skew) > REPLAY_WINDOW_S:
        when = f"{skew:.0f} s old" if skew > 0 else f"{-skew:.0f} s in the future"
        raise Refused(401, f"the timestamp is {when}, outside the {REPLAY_WINDOW_S} s window")
    if not signed(mac, app.token, timestamp, nonce, sealed):
        raise Refused(401, f"msg_signature does not match the token of app {app.name!r}")


def _open(app: AppKeys, sealed: str) -> bytes:
    try:
        return open_sealed(app.aes_key, sealed, app.corp_id)
    except CryptoError as exc:
        raise Refused(400, f"the ciphertext cannot be opened with app {app.name!r}'s EncodingAESKey: {exc}") from None


def open_echo(app: AppKeys, query: Mapping[str, str], *, now: float) -> str:
    """The decrypted ``echostr`` of a URL check, to answer as it is; :class:`Refused` otherwise."""
    echo = query.get("echostr")
    if not echo:
        raise Refused(400, "a URL check needs echostr in the query")
    _check_query(app, query, echo, now)
    try:
        return _open(app, echo).decode()
    except UnicodeDecodeError:
        raise Refused(400, "the decrypted echostr is not UTF-8") from None


def _xml(data: bytes, what: str) -> dict[str, str]:
    try:
        return parse_flat_xml(data)
    except XmlError as exc:
        raise Refused(400, f"{what} is not WeCom's XML: {exc}") from None


def open_message(app: AppKeys, query: Mapping[str, str], body: bytes, *, now: float) -> Ignored | Received:
    """Authenticate, decrypt and decode one message push; raise :class:`Refused` with the HTTP answer."""
    outer = _xml(body, "the body")
    sealed = outer.get("Encrypt", "").strip()
    if not sealed:
        raise Refused(400, "the body has no Encrypt element; set the app's callback to encrypted (safe) mode")
    _check_query(app, query, sealed, now)
    fields = _xml(_open(app, sealed), "the decrypted message")
    if fields.get("ToUserName") != app.corp_id:
        raise Refused(400, f"the message is addressed to {fields.get('ToUserName', '')[:64]!r}, not {app.corp_id!r}")
    agent = fields.get("AgentID", "").strip()
    if agent and agent != str(app.agent_id):
        raise Refused(400, f"the message is for agent {agent[:20]!r}, but app {app.name!r} is agent {app.agent_id}")
    kind = fields.get("MsgType", "")
    user = fields.get("FromUserName", "")
    if not user or len(user) > _LIMIT or not kind:
        raise Refused(400, "the decrypted message needs FromUserName and MsgType")
    if kind == "event":
        return Ignored(reason=f"event {fields.get('Event', '')[:64]!r} from {user}")
    msg_id = fields.get("MsgId", "").strip()
    if not msg_id or len(msg_id) > _LIMIT:
        raise Refused(400, f"a {kind!r} message needs a MsgId")
    text = fields.get("Content", "").strip() if kind == "text" else _STAND_INS.get(kind, f"[{kind[:32]}]")
    if not text:
        return Ignored(reason=f"message {msg_id} has no text")
    media = None
    media_id = fields.get("MediaId", "").strip()
    if kind in MEDIA_KINDS and media_id:
        media = Media(media_id=media_id, kind=MEDIA_KINDS[kind], name=fields.get("FileName") or None)
    source = SessionSource(
        platform=PLATFORM,
        account_id=app.name,
        scope_id=app.corp_id,
        chat_type="dm",
        chat_id=user,
        user_id=user,
        message_id=msg_id,
    )
    inbound = InboundMessage(source=source, text=text, message_id=msg_id, received_at=now)
    return Received(inbound=inbound, media=media)
