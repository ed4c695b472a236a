"""Feishu event subscription v2 requests: unseal, authenticate, and turn ``im.message.receive_v1`` into a message
(and ``card.action.trigger``, a press of an approval card's button, into ``/approve`` or ``/deny``).

A request is checked in the order that leaks least: with an encrypt key, the ``X-Lark-Signature`` (hex SHA-256 of
timestamp + nonce + encrypt key + raw body) when the headers are present, its ``X-Lark-Request-Timestamp`` within
five minutes of our clock as Slack's must be (a signed request recorded and sent again later is refused), then the
AES-256-CBC body is decrypted (key: SHA-256 of the encrypt key; IV: the first 16 bytes of the base64 data; PKCS#7
padding). The URL-verification challenge is the one request Feishu does not sign, so an unsigned request is
answered only when it is a challenge that carries the app's verification token; every event must then carry the
token too. The ``cryptography`` package (the ``feishu`` extra) is imported only when an encrypted body arrives.

Images, files, audio and video keep a stand-in such as ``[image]`` in the text; the keys their ``content``
names come with the message (:class:`Received`) for :mod:`platforms.feishu.files` to download before the
message is accepted.

The event id is the inbound message id: Feishu retries an unacknowledged event for hours under the same
``event_id``, and the gateway's inbox drops the repeats durably. Sessions are keyed by the tenant (scope), the app
(account), the chat, the thread's root message and the sender's ``union_id`` (stable across a tenant's apps).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Mapping
from typing import Annotated, Any

import msgspec

from hermes_actors.messages import InboundMessage
from hermes_actors.routing import SessionSource
from platforms.feishu.cards import CARD_EVENT, press_of
from platforms.feishu.config import AppKeys
from platforms.feishu.files import Resource, resources_of
from platforms.support import json_guard
from platforms.support.http_host import Refused

__all__ = ["PLATFORM", "REPLAY_WINDOW_S", "Challenge", "Ignored", "Received", "open_event"]

PLATFORM = "feishu"
REPLAY_WINDOW_S = 300  # how far X-Lark-Request-Timestamp may be from our clock, either way
MESSAGE_EVENT = "im.message.receive_v1"

_CHAT_TYPES = {"p2p": "dm", "group": "group"}
_PLACEHOLDERS = {
    "image": "[image]",
    "file": "[file]",
    "audio": "[audio]",
    "media": "[video]",
    "sticker": "[sticker]",
    "folder": "[folder]",
    "location": "[location]",
    "share_chat": "[shared chat]",
    "share_user": "[shared contact]",
    "interactive": "[card]",
}
_MENTION = re.compile(r"@_(?:user_\d+|all)")
_SIGNATURE_HEADERS = ("x-lark-request-timestamp", "x-lark-request-nonce", "x-lark-signature")
_TIMESTAMP = re.compile(r"[0-9]{1,15}")

_Id = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
_Name = Annotated[str, msgspec.Meta(max_length=256)]


class Challenge(msgspec.Struct, frozen=True, kw_only=True):
    """A URL-verification request: answer ``{"challenge": challenge}``."""

    challenge: str


class Ignored(msgspec.Struct, frozen=True, kw_only=True):
    """An authentic event that holds no user message (another event type, a bot's message): answer 200."""

    reason: str


class Received(msgspec.Struct, frozen=True, kw_only=True):
    """A user message to accept, and the files its content names (to download first)."""

    inbound: InboundMessage
    resources: tuple[Resource, ...] = ()


# -- the wire format (decoded once, at the edge; errors name the field path) ----------------------------------


class _Header(msgspec.Struct, frozen=True, kw_only=True):
    event_id: _Id
    event_type: _Name
    token: str = ""
    app_id: _Name = ""
    tenant_key: _Name = ""
    create_time: str = ""


class _Outer(msgspec.Struct, frozen=True, kw_only=True):
    """What every body may hold: a sealed ``encrypt``, a v1-style challenge, or the v2 ``schema`` and ``header``."""

    encrypt: str | None = None
    type: str | None = None
    token: str | None = None
    challenge: str | None = None
    schema: str | None = None
    header: _Header | None = None


class _UserIds(msgspec.Struct, frozen=True, kw_only=True):
    open_id: _Name | None = None
    union_id: _Name | None = None
    user_id: _Name | None = None


class _Sender(msgspec.Struct, frozen=True, kw_only=True):
    sender_id: _UserIds | None = None
    sender_type: _Name = "user"
    tenant_key: _Name | None = None


class _Mention(msgspec.Struct, frozen=True, kw_only=True):
    key: _Name
    name: _Name = ""
    id: _UserIds | None = None


class _Message(msgspec.Struct, frozen=True, kw_only=True):
    message_id: _Id
    chat_id: _Id
    chat_type: _Name
    message_type: _Name
    content: str
    root_id: _Name | None = None
    parent_id: _Name | None = None
    thread_id: _Name | None = None
    mentions: list[_Mention] | None = None


class _MessageEvent(msgspec.Struct, frozen=True, kw_only=True):
    sender: _Sender
    message: _Message


class _MessageEnvelope(msgspec.Struct, frozen=True, kw_only=True):
    header: _Header
    event: _MessageEvent


class _TextContent(msgspec.Struct, frozen=True, kw_only=True):
    text: str


_outer = msgspec.json.Decoder(_Outer)
_message_envelope = msgspec.json.Decoder(_MessageEnvelope)
_text_content = msgspec.json.Decoder(_TextContent)
_any_object = msgspec.json.Decoder(dict[str, Any])


def _decode(decoder: msgspec.json.Decoder[Any], data: bytes, what: str) -> Any:
    try:
        return json_guard.decode(decoder, data)
    except msgspec.ValidationError as exc:
        raise Refused(400, f"{what} is not in Feishu's event format ({exc})") from None
    except msgspec.DecodeError as exc:
        raise Refused(400, f"{what} is not valid JSON ({exc})") from None


# -- authentication and decryption ----------------------------------------------------------------------------


def _signed(app: AppKeys, headers: Mapping[str, str], body: bytes, now: float) -> bool:
    """Whether the request carries a valid signature; ``False`` without signature headers, 401 for a bad one or
    one made outside the replay window (a signed request recorded and sent again later)."""
    values = [headers.get(name) for name in _SIGNATURE_HEADERS]
    if all(value is None for value in values):
        return False
    timestamp, nonce, signature = values
    if timestamp is None or nonce is None or signature is None:
        raise Refused(401, "X-Lark-Request-Timestamp, X-Lark-Request-Nonce and X-Lark-Signature go together")
    if not _TIMESTAMP.fullmatch(timestamp):
        raise Refused(401, "X-Lark-Request-Timestamp must be an integer number of Unix seconds")
    skew = now - int(timestamp)
    if abs(skew) > REPLAY_WINDOW_S:
        when = f"{skew:.0f} s old" if skew > 0 else f"{-skew:.0f} s in the future"
        raise Refused(401, f"X-Lark-Request-Timestamp is {when}, outside the {REPLAY_WINDOW_S} s window")
    assert app.encrypt_key is not None
    expected = hashlib.sha256((timestamp + nonce + app.encrypt_key).encode() + body).hexdigest()
    if not hmac.compare_digest(signature.strip().lower().encode(), expected.encode()):
        raise Refused(401, f"X-Lark-Signature does not match the body and the encrypt key of app {app.name!r}")
    return True


def _decrypt(key: bytes, sealed: str) -> bytes | None:
    """The plaintext of a sealed body, or ``None`` when it is not one made with ``key``."""
    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    try:
        data = base64.b64decode(sealed, validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(data) < 32 or len(data) % 16:
        return None
    decryptor = Cipher(algorithms.AES(key), modes.CBC(data[:16])).decryptor()
    padded = decryptor.update(data[16:]) + decryptor.finalize()
    unpadder = padding.PKCS7(128).unpadder()
    try:
        return unpadder.update(padded) + unpadder.finalize()
    except ValueError:
        return None


def _unseal(app: AppKeys, sealed: str, *, signed: bool) -> tuple[bytes, _Outer]:
    """Decrypt a sealed body; a failure is 401 when unsigned (the sender lacks the key), else 400 (garbled)."""
    assert app.aes_key is not None
    status = 400 if signed else 401
    plain = _decrypt(app.aes_key, sealed)
    if plain is None:
        raise Refused(status, f"the body cannot be decrypted with the encrypt key of app {app.name!r}")
    try:
        outer = json_guard.decode(_outer, plain)
    except (msgspec.ValidationError, json_guard.NestingError) as exc:  # JSON, so the key fitted
        raise Refused(status, f"the decrypted body is not in Feishu's event format ({exc})") from None
    except msgspec.DecodeError:
        # A wrong key passes the padding check about once in 256 tries and yields bytes that are not JSON at all.
        raise Refused(status, f"the body cannot be decrypted with the encrypt key of app {app.name!r}") from None
    if outer.encrypt is not None:
        raise Refused(400, "the decrypted body is sealed again")
    return plain, outer


def _check_token(app: AppKeys, token: str | None) -> None:
    if token is None or not hmac.compare_digest(token.encode(), app.verification_token.encode()):
        raise Refused(401, f"the verification token does not match app {app.name!r}'s")


def open_event(
    app: AppKeys, headers: Mapping[str, str], body: bytes, *, received_at: float
) -> Challenge | Ignored | Received:
    """Authenticate and decode one request to ``app``'s URL; raise :class:`Refused` with the HTTP answer.

    ``headers`` must have lower-case names (or be case-insensitive, as aiohttp's are). ``received_at`` is the
    time now by the adapter's clock: it stamps the message and bounds a signature's timestamp.
    """
    outer = _decode(_outer, body, "the body")
    plain = body
    signed = False
    if outer.encrypt is not None:
        if app.aes_key is None:
            raise Refused(
                400,
                f"the body is encrypted but app {app.name!r} has no encrypt key; set "
                f"platforms.feishu.apps.{app.name}.encrypt_key to the app's Encrypt Key",
            )
        signed = _signed(app, headers, body, received_at)
        plain, outer = _unseal(app, outer.encrypt, signed=signed)
    elif app.aes_key is not None:
        raise Refused(401, f"app {app.name!r} has an encrypt key, so its events arrive encrypted; refused a plain one")
    if outer.type == "url_verification":
        _check_token(app, outer.token)
        if not outer.challenge:
            raise Refused(400, "a url_verification request needs a challenge")
        return Challenge(challenge=outer.challenge)
    if app.aes_key is not None and not signed:
        raise Refused(
            401,
            "unsigned event: X-Lark-Signature, X-Lark-Request-Timestamp and X-Lark-Request-Nonce are required "
            "when the app has an encrypt key",
        )
    header = outer.header
    _check_token(app, header.token if header is not None else outer.token)
    if outer.schema != "2.0" or header is None:
        raise Refused(400, "only event schema 2.0 is handled; choose the v2.0 event format for the app's events")
    if header.app_id != app.app_id:
        raise Refused(
            400,
            f"the event is for app {header.app_id!r}, but this URL is app {app.name!r} ({app.app_id}); "
            f"give each app its own request URL, /feishu/events/<name>",
        )
    if header.event_type == CARD_EVENT:
        return _pressed(app, header, plain, received_at)
    if header.event_type != MESSAGE_EVENT:
        return Ignored(reason=f"event type {header.event_type!r} is not handled")
    envelope: _MessageEnvelope = _decode(_message_envelope, plain, "the message event")
    return _to_inbound(app, envelope, received_at)


def _pressed(app: AppKeys, header: _Header, plain: bytes, received_at: float) -> Ignored | Received:
    """A press of an approval card's button (:mod:`platforms.feishu.cards`), from the person who pressed."""
    try:
        press = press_of(plain)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise Refused(400, f"the card action event is malformed ({exc})") from None
    if press is None:
        return Ignored(reason="a press of a card button that is not an approval's")
    source = SessionSource(
        platform=PLATFORM,
        account_id=app.name,
        scope_id=header.tenant_key or None,
        chat_type="group",
        chat_id=press.chat_id,
        user_id=press.open_id or None,
        user_id_alt=press.union_id or None,
        message_id=press.message_id,
    )
    inbound = InboundMessage(source=source, text=press.text, message_id=header.event_id, received_at=received_at)
    return Received(inbound=inbound)


# -- messages ---------------------------------------------------------------------------------------------------


def _to_inbound(app: AppKeys, envelope: _MessageEnvelope, received_at: float) -> Ignored | Received:
    message, sender = envelope.event.message, envelope.event.sender
    if sender.sender_type != "user":
        return Ignored(reason=f"message {message.message_id} comes from a {sender.sender_type!r}, not a user")
    chat_type = _CHAT_TYPES.get(message.chat_type)
    if chat_type is None:
        return Ignored(reason=f"message {message.message_id} is in a chat of unknown type {message.chat_type!r}")
    text = _text_of(message)
    if not text.strip():
        return Ignored(reason=f"message {message.message_id} has no text")
    ids = sender.sender_id or _UserIds()
    # A thread is keyed by its root message: a reply to it can open the thread, and the thread's first post
    # (which has a thread_id but no root_id) is its own root.
    thread = (message.root_id or message.message_id) if message.thread_id else None
    source = SessionSource(
        platform=PLATFORM,
        account_id=app.name,
        scope_id=envelope.header.tenant_key or None,
        chat_type=chat_type,
        chat_id=message.chat_id,
        thread_id=thread,
        user_id=ids.open_id or None,
        user_id_alt=ids.union_id or None,
        message_id=message.message_id,
    )
    inbound = InboundMessage(source=source, text=text, message_id=envelope.header.event_id, received_at=received_at)
    return Received(inbound=inbound, resources=tuple(_resources(message)))


def _resources(message: _Message) -> list[Resource]:
    """The files ``message`` names; none when its content is not the JSON object Feishu sends (the stand-in stays)."""
    if message.message_type == "text":
        return []
    try:
        content = json_guard.decode(_any_object, message.content)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return []
    return resources_of(message.message_type, content)


def _text_of(message: _Message) -> str:
    """The message as text: its words with @mentions named; attachments as a short stand-in such as ``[image]``."""
    if message.message_type == "text":
        try:
            text = json_guard.decode(_text_content, message.content).text
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise Refused(400, f"$.event.message.content is not a text message's JSON ({exc})") from None
    elif message.message_type == "post":
        try:
            text = _post_text(json_guard.decode(_any_object, message.content))
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise Refused(400, f"$.event.message.content is not a post message's JSON ({exc})") from None
    else:
        return _PLACEHOLDERS.get(message.message_type, f"[{message.message_type}]")
    names = {mention.key: mention.name for mention in message.mentions or () if mention.name}
    names.setdefault("@_all", "all")
    return _MENTION.sub(lambda found: "@" + names[found[0]] if found[0] in names else found[0], text)


def _post_text(content: dict[str, Any]) -> str:
    """The text of a rich-text post, line by line (the post may be wrapped in a locale such as ``zh_cn``)."""
    post = content
    if "content" not in post:
        post = next((v for v in content.values() if isinstance(v, dict) and "content" in v), {})
    lines: list[str] = []
    title = post.get("title")
    if isinstance(title, str) and title.strip():
        lines.append(title)
    rows = post.get("content")
    for row in rows if isinstance(rows, list) else ():
        if isinstance(row, list):
            lines.append("".join(_element_text(element) for element in row if isinstance(element, dict)))
    return "\n".join(lines).strip()


def _element_text(element: dict[str, Any]) -> str:
    tag = element.get("tag")
    if tag in ("text", "a", "code_block", "md"):
        text = element.get("text")
        return text if isinstance(text, str) else ""
    if tag == "at":
        name, key = element.get("user_name"), element.get("user_id")
        return f"@{name}" if isinstance(name, str) and name else key if isinstance(key, str) else ""
    return {"img": "[image]", "media": "[video]"}.get(tag, "") if isinstance(tag, str) else ""
