"""The iLink bot API on the wire: request headers, an abortable long poll, and decoding answers into pieces.

Every call is a JSON ``POST {base}/ilink/bot/<method>`` carrying ``Authorization: Bearer <bot_token>``,
``AuthorizationType: ilink_bot_token`` and ``X-WECHAT-UIN`` (the base64 of a random unsigned 32-bit number written
in decimal), with a ``base_info`` object in the body. Answers carry ``ret`` and ``errcode`` (0 is success; -14 is
an expired session that needs a new QR login; -2 is the frequency limit) and ``errmsg``. ``getupdates`` takes the
opaque ``get_updates_buf`` cursor and answers ``msgs``, the next ``get_updates_buf`` and the server's suggested
``longpolling_timeout_ms``. A message has ``message_id``, ``from_user_id``, ``group_id`` (present in groups),
``message_type`` (1 a user, 2 a bot), ``create_time_ms``, ``context_token`` (echoed in replies) and ``item_list``,
whose items have a ``type`` (1 text in ``text_item.text``, 2 image, 3 voice, 4 file, 5 video).

A media item (``image_item``, ``voice_item``, ``file_item``, ``video_item``) carries a ``media`` object: the
``encrypt_query_param`` that names the encrypted file on WeChat's CDN and its AES-128 key ``aes_key`` (base64 of
the 16 key bytes, or of their 32 hex digits); an image may carry the key as hex in ``image_item.aeskey`` too. A
file's ``len`` and a video's ``video_size`` give the size, an image's ``mid_size`` the size WeChat states for it.
Each becomes a :class:`MediaRef` for :mod:`platforms.wechat.files` to fetch; a media item that names no file or
no key becomes one with the reason it cannot be fetched. These fields are read leniently: a malformed one costs
the file, never the message's text.

Answers are decoded once, at the edge, with typed decoders; one malformed message or item is skipped with a reason
and never spoils the rest of its answer.
"""

from __future__ import annotations

import base64
import concurrent.futures
import hashlib
import mimetypes
import re
import secrets
import threading
from typing import Any

import msgspec

from hermes_actors.media import kind_of
from hermes_actors.messages import Attachment
from platforms.support.http_client import HttpClient, HttpError, HttpResult, Unreachable, shared_client, shown

__all__ = [
    "BASE_INFO",
    "MAX_INBOUND_CHARS",
    "RATE_LIMITED",
    "SESSION_EXPIRED",
    "LongPoll",
    "Malformed",
    "MediaRef",
    "Piece",
    "SendAnswer",
    "Updates",
    "decode_message",
    "decode_send_answer",
    "decode_updates",
    "error_code",
    "request_headers",
]

SESSION_EXPIRED = -14
RATE_LIMITED = -2
MAX_INBOUND_CHARS = 64_000  # a longer message is cut: a turn is not the place for megabytes of text
BASE_INFO = {"channel_version": "hermes-actors"}

_MAX_ID_CHARS = 256
_MESSAGE_TYPE_BOT = 2
_TEXT = 1
_STAND_INS = {2: "[image]", 3: "[voice]", 4: "[file]", 5: "[video]"}
_TRUNCATED = "\n[message truncated]"
_MEDIA_KINDS = {2: "image", 3: "audio", 4: "document", 5: "video"}
_MEDIA_FIELDS = {2: "image_item", 3: "voice_item", 4: "file_item", 5: "video_item"}
_SIZE_FIELDS = {2: "mid_size", 4: "len", 5: "video_size"}
_MIME_TYPES = {3: "audio/silk", 5: "video/mp4"}  # WeChat voice is SILK; videos are MP4
_MAX_PARAM_CHARS = 8192
_DIGITS = re.compile(r"[0-9]{1,15}")


class Malformed(Exception):
    """An answer, a message or an item that does not have the iLink shape; the text says what is wrong."""


def request_headers(bot_token: str) -> dict[str, str]:
    """The headers of every iLink call; ``X-WECHAT-UIN`` is fresh each time, as the protocol has it."""
    uin = base64.b64encode(str(secrets.randbits(32)).encode()).decode()
    return {
        "Content-Type": "application/json",
        "AuthorizationType": "ilink_bot_token",
        "Authorization": f"Bearer {bot_token}",
        "X-WECHAT-UIN": uin,
    }


# -- answers ------------------------------------------------------------------------------------------------------


class Updates(msgspec.Struct, frozen=True, kw_only=True):
    """A ``getupdates`` answer; ``msgs`` stay raw so each message is decoded (and refused) on its own."""

    ret: int | None = None
    errcode: int | None = None
    errmsg: str | None = None
    msgs: list[msgspec.Raw] | None = None
    get_updates_buf: str | None = None
    longpolling_timeout_ms: int | None = None


class SendAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """A ``sendmessage`` answer."""

    ret: int | None = None
    errcode: int | None = None
    errmsg: str | None = None


class _TextItem(msgspec.Struct, frozen=True, kw_only=True):
    text: str | None = None


class _FileItem(msgspec.Struct, frozen=True, kw_only=True):
    file_name: str | None = None


class _Item(msgspec.Struct, frozen=True, kw_only=True):
    type: int | None = None
    text_item: _TextItem | None = None
    voice_item: _TextItem | None = None  # its ``text`` is WeChat's transcript
    file_item: _FileItem | None = None


class _MediaItem(msgspec.Struct, frozen=True, kw_only=True):
    """The media fields of an item, untyped: they are checked one by one (:func:`_media_ref`)."""

    type: Any = None
    image_item: Any = None
    voice_item: Any = None
    file_item: Any = None
    video_item: Any = None


class MediaRef(msgspec.Struct, frozen=True, kw_only=True):
    """A file an item names on WeChat's CDN: where (``query``: its ``encrypt_query_param``), how to decrypt it
    (``aes_key`` as sent, base64; ``hex_key`` an image's ``aeskey``), and what it is.

    ``problem`` says why it cannot be fetched (no file or no key named). It holds what opens the file, so it is
    never stored: only the attachment made from it is.
    """

    kind: str  # image, audio, video or document
    query: str | None = None
    aes_key: str | None = None
    hex_key: str | None = None
    name: str | None = None
    mime_type: str | None = None
    size: int | None = None
    problem: str | None = None


class _Message(msgspec.Struct, frozen=True, kw_only=True):
    message_id: int | str | None = None
    from_user_id: str | None = None
    group_id: str | None = None
    message_type: int | None = None
    create_time_ms: int | None = None
    context_token: str | None = None
    item_list: list[msgspec.Raw] | None = None


_updates = msgspec.json.Decoder(Updates)
_send_answer = msgspec.json.Decoder(SendAnswer)
_message = msgspec.json.Decoder(_Message)
_item = msgspec.json.Decoder(_Item)


def _decode(decoder: msgspec.json.Decoder[Any], data: bytes, what: str) -> Any:
    try:
        return decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise Malformed(f"{what} has the wrong shape ({exc})") from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise Malformed(f"{what} is not valid JSON ({exc})") from None


def decode_updates(body: bytes) -> Updates:
    """Decode a ``getupdates`` answer, or raise :class:`Malformed`."""
    updates: Updates = _decode(_updates, body, "the getupdates answer")
    return updates


def decode_send_answer(body: bytes) -> SendAnswer:
    """Decode a ``sendmessage`` answer, or raise :class:`Malformed`."""
    answer: SendAnswer = _decode(_send_answer, body, "the sendmessage answer")
    return answer


def error_code(answer: Updates | SendAnswer) -> int:
    """The answer's error code from ``ret`` and ``errcode`` (a known code wins); 0 means success."""
    codes = [code for code in (answer.ret, answer.errcode) if code]
    for known in (SESSION_EXPIRED, RATE_LIMITED):
        if known in codes:
            return known
    return codes[0] if codes else 0


# -- messages -----------------------------------------------------------------------------------------------------


class Piece(msgspec.Struct, frozen=True, kw_only=True):
    """One inbound message, normalised; pieces from one sender become one turn when they come close together.

    ``typed`` is true when every item was text, so the text is what the sender typed (and a resend of it can be
    recognised by its hash); stand-ins such as ``[image]`` are not. ``attachments`` are the records of the files
    its items named, once fetched (:mod:`platforms.wechat.files`); a turn of several pieces carries them all.
    """

    message_id: str
    chat_type: str  # "dm" or "group"
    chat_id: str
    user_id: str
    text: str
    context_token: str | None = None
    created_ms: int | None = None
    typed: bool = True
    attachments: tuple[Attachment, ...] = ()


def _identifier(value: object, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise Malformed(f"${field} must be a non-empty string")
    if len(value) > _MAX_ID_CHARS:
        raise Malformed(f"${field} is longer than {_MAX_ID_CHARS} characters")
    return value


def _item_text(raw: msgspec.Raw, index: int) -> tuple[str, bool]:
    """The text an item contributes and whether it was typed text."""
    item: _Item = _decode(_item, raw, f"item_list[{index}]")
    if item.type == _TEXT:
        if item.text_item is None or item.text_item.text is None:
            raise Malformed(f"item_list[{index}] is a text item without text_item.text")
        return item.text_item.text, True
    stand_in = _STAND_INS.get(item.type or 0, "[unsupported message]")
    if item.voice_item is not None and item.voice_item.text:
        return f"{stand_in} {item.voice_item.text}", False
    if item.file_item is not None and item.file_item.file_name:
        return f"[file: {item.file_item.file_name}]", False
    return stand_in, False


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _size(value: Any) -> int | None:
    """A size WeChat states: a number, or (``file_item.len``) its digits as a string."""
    if type(value) is int and value >= 0:
        return value
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        return int(value)
    return None


def _media_ref(raw: msgspec.Raw) -> MediaRef | None:
    """The file a media item names, or ``None`` for an item that is not one (text, an unknown type)."""
    try:
        item = msgspec.json.decode(raw, type=_MediaItem)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    if type(item.type) is not int or item.type not in _MEDIA_KINDS:
        return None
    found = getattr(item, _MEDIA_FIELDS[item.type])
    fields: dict[str, Any] = found if isinstance(found, dict) else {}
    media: dict[str, Any] = fields["media"] if isinstance(fields.get("media"), dict) else {}
    name = _text(fields.get("file_name"))
    mime = _MIME_TYPES.get(item.type) or (mimetypes.guess_type(name, strict=False)[0] if name else None)
    kind = _MEDIA_KINDS[item.type] if item.type != 4 else kind_of(mime)
    size = _size(fields.get(_SIZE_FIELDS[item.type])) if item.type in _SIZE_FIELDS else None
    query = _text(media.get("encrypt_query_param"))
    aes_key, hex_key = _text(media.get("aes_key")), _text(fields.get("aeskey"))
    ref = MediaRef(kind=kind, query=query, aes_key=aes_key, hex_key=hex_key, name=name, mime_type=mime, size=size)
    if query is None or len(query) > _MAX_PARAM_CHARS:
        return msgspec.structs.replace(ref, query=None, problem="WeChat named no file to download for it")
    if aes_key is None and hex_key is None:
        return msgspec.structs.replace(ref, problem="WeChat sent no key to decrypt it")
    return ref


def decode_message(raw: msgspec.Raw) -> tuple[Piece, tuple[MediaRef, ...]] | None:
    """Normalise one entry of ``msgs`` and find the files its items name; ``None`` for a bot's own message;
    :class:`Malformed` for a bad one."""
    message: _Message = _decode(_message, raw, "the message")
    if message.message_type == _MESSAGE_TYPE_BOT:
        return None
    sender = _identifier(message.from_user_id, "from_user_id")
    group = _identifier(message.group_id, "group_id") if message.group_id else None
    if not message.item_list:
        raise Malformed("item_list is missing or empty: the message has no content")
    texts: list[str] = []
    typed = True
    refs: list[MediaRef] = []
    for index, item in enumerate(message.item_list):
        text, was_typed = _item_text(item, index)
        texts.append(text)
        typed = typed and was_typed
        ref = None if was_typed else _media_ref(item)
        if ref is not None:
            refs.append(ref)
    text = "\n".join(texts)
    if not text.strip():
        raise Malformed("the message has only empty text")
    if len(text) > MAX_INBOUND_CHARS:
        text = text[:MAX_INBOUND_CHARS] + _TRUNCATED
    if message.message_id is None or message.message_id == "":
        # Without an id, the content and the time stand in: a resend of it still collides.
        identity = msgspec.json.encode([sender, group, message.create_time_ms, text])
        message_id = "content-" + hashlib.sha256(identity).hexdigest()[:32]
    else:
        message_id = _identifier(str(message.message_id), "message_id")
    piece = Piece(
        message_id=message_id,
        chat_type="group" if group else "dm",
        chat_id=group or sender,
        user_id=sender,
        text=text,
        context_token=message.context_token or None,
        created_ms=message.create_time_ms,
        typed=typed,
    )
    return piece, tuple(refs)


# -- the long poll --------------------------------------------------------------------------------------------------


class LongPoll:
    """``POST`` requests that another thread can abort: :meth:`abort` ends a request held by the server.

    The server keeps a ``getupdates`` request open for tens of seconds; stopping must not wait for it.
    """

    def __init__(self, *, max_bytes: int = 16 * 1024 * 1024, client: HttpClient | None = None) -> None:
        self._max_bytes = max_bytes
        self._client = client if client is not None else shared_client()
        self._lock = threading.Lock()
        self._pending: concurrent.futures.Future[HttpResult] | None = None
        self._aborted = False

    def abort(self) -> None:
        """End the request in progress (it raises :class:`Unreachable`) and refuse further requests."""
        with self._lock:
            self._aborted = True
            pending = self._pending
        if pending is not None:
            pending.cancel()

    def post(self, url: str, body: object, headers: dict[str, str], timeout: float) -> HttpResult | None:
        """Send one JSON POST; ``None`` when no answer came within ``timeout`` (an idle long poll).

        :class:`Unreachable` when the request did not leave (or the poll was aborted), :class:`NoAnswer` when the
        connection broke after it left.
        """
        stopping = f"POST {shown(url)}: the poll is stopping"
        with self._lock:
            if self._aborted:
                raise Unreachable(stopping)
            pending = self._client.submit(
                "POST", url, body=msgspec.json.encode(body), headers=headers, timeout=timeout, max_bytes=self._max_bytes
            )
            self._pending = pending
        try:
            return pending.result()
        except concurrent.futures.CancelledError:
            raise Unreachable(stopping) from None
        except HttpError as exc:
            if exc.timed_out:
                return None
            if self._aborted:
                raise Unreachable(stopping) from exc
            raise
        finally:
            with self._lock:
                self._pending = None
