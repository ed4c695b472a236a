"""The client-server API's JSON as typed Structs, its error answers, and a ``/sync`` decoder that never stalls.

A ``/sync`` answer is decoded in layers: the envelope first (only ``next_batch`` is required), then each room and
each event on its own, so one malformed room or event is logged and stepped over instead of failing the whole
batch (which would be fetched again, and fail again, forever). A body the strict decoder refuses outright is
repaired once before it is given up: invalid UTF-8 and unpaired UTF-16 surrogate escapes become U+FFFD, and
values nested deeper than :data:`MAX_DEPTH` become ``null``. A room member can put such things in an event's
content; only that event suffers.

Errors are ``{"errcode": "M_...", "error": "..."}``; ``M_LIMIT_EXCEEDED`` (HTTP 429) carries ``retry_after_ms``
(newer servers also send ``Retry-After``), ``M_UNKNOWN_TOKEN`` (401) a ``soft_logout`` flag.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec

from hermes_actors.errors import PlatformError
from platforms.support.http_client import retry_after_seconds

__all__ = [
    "MAX_DEPTH",
    "ApiError",
    "EventError",
    "InvitedRoom",
    "JoinedRoom",
    "MediaContent",
    "MediaInfo",
    "MessageContent",
    "MessagesPage",
    "RoomEvent",
    "Rooms",
    "StrippedEvent",
    "SyncAnswer",
    "SyncError",
    "api_error",
    "decode_as",
    "decode_event",
    "decode_sync",
    "repair_json",
]

MAX_DEPTH = 64  # deeper JSON values in a repaired body become null

T = TypeVar("T")
_DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, RecursionError)


class ApiError(PlatformError):
    """A client-server API call failed.

    ``status`` is the HTTP status (``None`` when no answer came), ``errcode`` Matrix's ``M_...`` code,
    ``retry_after_s`` the rate-limit wait, ``outcome_unknown`` that the request left but no answer came back.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        errcode: str = "",
        retry_after_s: float | None = None,
        outcome_unknown: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.errcode = errcode
        self.retry_after_s = retry_after_s
        self.outcome_unknown = outcome_unknown

    @property
    def transient(self) -> bool:
        """Whether asking again later can succeed: no answer, a rate limit or a server error."""
        return self.status is None or self.status == 429 or self.status >= 500

    @property
    def token_refused(self) -> bool:
        """The homeserver does not accept the access token (``M_UNKNOWN_TOKEN``, ``M_MISSING_TOKEN``)."""
        return self.status == 401 or self.errcode in ("M_UNKNOWN_TOKEN", "M_MISSING_TOKEN")


class SyncError(PlatformError):
    """A ``/sync`` answer is not one a homeserver sends, even after repair."""


class EventError(PlatformError):
    """A room, event or content in an answer is malformed (a required field missing, a value of the wrong type)."""


class _ErrorBody(msgspec.Struct, frozen=True, kw_only=True):
    errcode: str = ""
    error: str = ""
    retry_after_ms: int | float | None = None


def api_error(status: int, headers: Mapping[str, str], body: bytes, where: str) -> ApiError:
    """The :class:`ApiError` for a non-2xx answer (``headers`` lower-cased)."""
    try:
        answer = msgspec.json.decode(body, type=_ErrorBody)
    except _DECODE_ERRORS:
        answer = _ErrorBody(error=body[:200].decode("utf-8", "replace"))
    wait: float | None = None
    if status == 429 or answer.errcode == "M_LIMIT_EXCEEDED":
        if answer.retry_after_ms is not None:
            wait = retry_after_seconds(answer.retry_after_ms / 1000)
        else:
            wait = retry_after_seconds(headers.get("retry-after"))
    code = answer.errcode or f"HTTP {status}"
    text = answer.error or "no description"
    return ApiError(
        f"{where}: {code}: {text} (HTTP {status})", status=status, errcode=answer.errcode, retry_after_s=wait
    )


# -- events ----------------------------------------------------------------------------------------------------------


class RoomEvent(msgspec.Struct, frozen=True, kw_only=True):
    """A timeline or state event as ``/sync`` and ``/messages`` give it (the room id is the key it came under)."""

    event_id: str
    type: str
    sender: str
    origin_server_ts: int = 0
    content: msgspec.Raw = msgspec.Raw(b"{}")
    state_key: str | None = None


class StrippedEvent(msgspec.Struct, frozen=True, kw_only=True):
    """A stripped state event of an invite (``invite_state``)."""

    type: str
    state_key: str = ""
    sender: str = ""
    content: msgspec.Raw = msgspec.Raw(b"{}")


class InReplyTo(msgspec.Struct, frozen=True, kw_only=True):
    event_id: str | None = None


class Relation(msgspec.Struct, frozen=True, kw_only=True):
    """``m.relates_to``: a thread (``rel_type: m.thread``), an edit (``m.replace``) or a plain reply."""

    rel_type: str | None = None
    event_id: str | None = None
    is_falling_back: bool = False
    in_reply_to: InReplyTo | None = msgspec.field(default=None, name="m.in_reply_to")


class MessageContent(msgspec.Struct, frozen=True, kw_only=True):
    """The content of ``m.room.message`` and ``m.sticker`` as far as this adapter reads it."""

    msgtype: str | None = None
    body: str | None = None
    filename: str | None = None
    relates_to: Relation | None = msgspec.field(default=None, name="m.relates_to")


class MediaContent(msgspec.Struct, frozen=True, kw_only=True):
    """The file fields of ``m.image``, ``m.file``, ``m.audio`` and ``m.video`` contents, read apart from the text.

    They stay untyped here so a malformed ``info`` or ``url`` costs the attachment, never the message's text:
    ``url`` is the ``mxc://`` URI of an unencrypted file, ``file`` the ``EncryptedFile`` of an end-to-end encrypted
    one, ``info`` holds ``mimetype`` and ``size`` (:class:`MediaInfo`).
    """

    url: Any = None
    file: Any = None
    info: Any = None


class MediaInfo(msgspec.Struct, frozen=True, kw_only=True):
    """The ``info`` of a media content, as far as it is read: the MIME type and the size in bytes."""

    mimetype: str | None = None
    size: int | None = None


class MemberContent(msgspec.Struct, frozen=True, kw_only=True):
    membership: str | None = None
    displayname: str | None = None
    is_direct: bool | None = None


class NameContent(msgspec.Struct, frozen=True, kw_only=True):
    name: str | None = None


_event = msgspec.json.Decoder(RoomEvent)


def decode_event(raw: bytes | msgspec.Raw) -> RoomEvent:
    """Decode one event; :class:`EventError` names what is wrong (``Expected str, got int - at $.sender``)."""
    try:
        return _event.decode(raw)
    except _DECODE_ERRORS as exc:
        raise EventError(f"not a room event: {exc}") from None


def decode_as(raw: bytes | msgspec.Raw, kind: type[T], what: str) -> T:
    """Decode ``raw`` as ``kind``; :class:`EventError` mentioning ``what`` when it does not fit."""
    try:
        return msgspec.json.decode(raw, type=kind)
    except _DECODE_ERRORS as exc:
        raise EventError(f"{what} is malformed: {exc}") from None


# -- /sync and /messages ---------------------------------------------------------------------------------------------


class Events(msgspec.Struct, frozen=True, kw_only=True):
    events: list[msgspec.Raw] = msgspec.field(default_factory=list)


class Timeline(msgspec.Struct, frozen=True, kw_only=True):
    events: list[msgspec.Raw] = msgspec.field(default_factory=list)
    limited: bool = False
    prev_batch: str | None = None


class Summary(msgspec.Struct, frozen=True, kw_only=True):
    joined_member_count: int | None = msgspec.field(default=None, name="m.joined_member_count")


class JoinedRoom(msgspec.Struct, frozen=True, kw_only=True):
    """``rooms.join.<room id>``."""

    timeline: Timeline = msgspec.field(default_factory=Timeline)
    state: Events = msgspec.field(default_factory=Events)
    summary: Summary = msgspec.field(default_factory=Summary)


class InvitedRoom(msgspec.Struct, frozen=True, kw_only=True):
    """``rooms.invite.<room id>``."""

    invite_state: Events = msgspec.field(default_factory=Events)


class Rooms(msgspec.Struct, frozen=True, kw_only=True):
    """``rooms``: each room still raw, decoded one by one."""

    join: dict[str, msgspec.Raw] = msgspec.field(default_factory=dict)
    invite: dict[str, msgspec.Raw] = msgspec.field(default_factory=dict)
    leave: dict[str, msgspec.Raw] = msgspec.field(default_factory=dict)


class SyncAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """A ``/sync`` answer: ``next_batch`` and the rest still raw."""

    next_batch: str
    rooms: msgspec.Raw = msgspec.Raw(b"{}")
    account_data: msgspec.Raw = msgspec.Raw(b"{}")


class MessagesPage(msgspec.Struct, frozen=True, kw_only=True):
    """A ``/rooms/{roomId}/messages`` answer; ``end`` is absent when there is nothing further."""

    chunk: list[msgspec.Raw] = msgspec.field(default_factory=list)
    start: str | None = None
    end: str | None = None


_sync = msgspec.json.Decoder(SyncAnswer)


def decode_sync(body: bytes) -> tuple[SyncAnswer, bool]:
    """Decode a ``/sync`` body; return it and whether it needed :func:`repair_json`. :class:`SyncError` if hopeless."""
    try:
        return _sync.decode(body), False
    except msgspec.ValidationError as exc:  # valid JSON of the wrong shape: no repair helps
        raise SyncError(f"the /sync answer is malformed: {exc}") from None
    except (msgspec.DecodeError, RecursionError) as exc:
        first = exc
    repaired = repair_json(body)
    if repaired != body:
        try:
            return _sync.decode(repaired), True
        except _DECODE_ERRORS:
            pass
    raise SyncError(f"the /sync answer is not valid JSON: {first}")


# -- repair ----------------------------------------------------------------------------------------------------------

# A \uD800-\uDBFF escape not followed by a \uDC00-\uDFFF escape, or one of those not preceded by the first kind;
# the lookbehind (?<!\\)(?:\\\\)* makes sure the backslash starts an escape rather than ending an escaped "\\".
_LONE_HIGH = re.compile(rb"(?<!\\)((?:\\\\)*)\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})")
_LONE_LOW = re.compile(rb"(?<!\\u[dD][89abAB][0-9a-fA-F]{2})(?<!\\)((?:\\\\)*)\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_STRUCTURE = re.compile(rb'["\\{}\[\]]')


def repair_json(body: bytes, max_depth: int = MAX_DEPTH) -> bytes:
    """``body`` with invalid UTF-8 and unpaired surrogate escapes as U+FFFD and too-deep values as ``null``."""
    text = body.decode("utf-8", "replace").encode()
    text = _LONE_HIGH.sub(rb"\1\\ufffd", text)
    text = _LONE_LOW.sub(rb"\1\\ufffd", text)
    return _flatten(text, max_depth)


def _flatten(text: bytes, max_depth: int) -> bytes:
    """Replace every array or object that starts deeper than ``max_depth`` with ``null`` (no recursion)."""
    out: list[bytes] = []
    copied = 0  # text[:copied] is decided
    depth = 0
    cut_from: int | None = None  # where the too-deep value being dropped starts
    in_string = False
    escaped_until = -1
    for match in _STRUCTURE.finditer(text):
        at = match.start()
        if at <= escaped_until:
            continue
        char = text[at : at + 1]
        if in_string:
            if char == b"\\":
                escaped_until = at + 1
            elif char == b'"':
                in_string = False
            continue
        if char == b'"':
            in_string = True
        elif char in (b"{", b"["):
            depth += 1
            if depth > max_depth and cut_from is None:
                cut_from = at
        elif char in (b"}", b"]") and depth > 0:
            depth -= 1
            if cut_from is not None and depth == max_depth:
                out += (text[copied:cut_from], b"null")
                copied = at + 1
                cut_from = None
    if cut_from is not None:  # unbalanced: drop the rest, the decoder reports what is missing
        out.append(text[copied:cut_from])
        copied = len(text)
    out.append(text[copied:])
    return b"".join(out)
