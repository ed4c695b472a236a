"""Mattermost's JSON shapes: the websocket envelope, the ``posted`` event, and the REST objects read.

Every websocket message is an event ``{"event", "data", "broadcast", "seq"}`` or the answer to an action of ours
``{"status", "seq_reply", "error"}``; ``data`` stays raw until ``event`` says what it is. A ``posted`` event's
``data.post`` is the post as a JSON *string* (decoded a second time here), beside ``channel_type`` (``D`` direct,
``G`` group, ``O`` public, ``P`` private), ``team_id`` (empty for direct and group messages), ``channel_display_name``
and ``sender_name``. Ids are 26 lower-case letters and digits; times are Unix milliseconds. A malformed message is a
:class:`WireError` naming the field, never a crash.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

import msgspec

from hermes_actors.errors import PlatformError
from platforms.support import json_guard

__all__ = [
    "Channel",
    "Envelope",
    "FileInfo",
    "Hello",
    "Post",
    "PostList",
    "Posted",
    "User",
    "WireError",
    "decode",
    "decode_envelope",
    "decode_post",
]

Id = Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9]{26}$")]
OptionalId = Annotated[str, msgspec.Meta(pattern=r"^([a-z0-9]{26})?$")]
Millis = Annotated[int, msgspec.Meta(ge=0, le=10**14)]
T = TypeVar("T")


class WireError(PlatformError):
    """A message is not one Mattermost would send (not JSON, a missing field, an id of the wrong shape)."""


class Envelope(msgspec.Struct, frozen=True, kw_only=True):
    """One websocket message: an event (``event``, ``seq``) or the answer to an action (``seq_reply``)."""

    event: str | None = None
    data: msgspec.Raw = msgspec.Raw(b"null")
    seq: int | None = None
    status: str | None = None
    seq_reply: int | None = None
    error: dict[str, Any] | None = None


class Hello(msgspec.Struct, frozen=True, kw_only=True):
    server_version: str = ""
    connection_id: str = ""


class Posted(msgspec.Struct, frozen=True, kw_only=True):
    """A ``posted`` event's data; ``post`` is the post encoded as a JSON string."""

    post: str
    channel_type: str = ""
    team_id: OptionalId = ""
    channel_display_name: str = ""
    channel_name: str = ""
    sender_name: str = ""


class FileInfo(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /files/{id}/info`` (and a post's ``metadata.files``): what the file is before it is fetched."""

    id: Id
    name: str = ""
    size: int | None = None
    mime_type: str = ""


class _Metadata(msgspec.Struct, frozen=True, kw_only=True):
    files: list[FileInfo] = msgspec.field(default_factory=list)


class Post(msgspec.Struct, frozen=True, kw_only=True):
    """The fields of a post this adapter reads; ``type`` is empty for what a person wrote."""

    id: Id
    channel_id: Id
    user_id: Id
    create_at: Millis
    root_id: OptionalId = ""
    message: str = ""
    type: str = ""
    props: dict[str, Any] = msgspec.field(default_factory=dict)
    file_ids: list[Id] = msgspec.field(default_factory=list)
    metadata: _Metadata | None = None
    delete_at: int = 0

    @property
    def from_bot(self) -> bool:
        """Posted by a bot, a webhook or a plugin (their ``props`` say so, as a string or a boolean)."""
        return any(str(self.props.get(flag, "")).lower() == "true" for flag in ("from_bot", "from_webhook"))


class PostList(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /channels/{id}/posts``: the ids in ``order`` (newest first) and the posts by id."""

    order: list[str] = msgspec.field(default_factory=list)
    posts: dict[str, Post] = msgspec.field(default_factory=dict)


class User(msgspec.Struct, frozen=True, kw_only=True):
    id: Id
    username: str = ""


class Channel(msgspec.Struct, frozen=True, kw_only=True):
    """A channel: its type (``D``, ``G``, ``O``, ``P``), its team (empty for ``D`` and ``G``), names and last post."""

    id: Id
    type: str
    team_id: OptionalId = ""
    display_name: str = ""
    name: str = ""
    last_post_at: int = 0


_envelope = msgspec.json.Decoder(Envelope)
_post = msgspec.json.Decoder(Post)


def _fail(what: str, exc: Exception) -> WireError:
    if isinstance(exc, msgspec.ValidationError):
        return WireError(f"{what} is malformed: {exc}")
    return WireError(f"{what} is not valid JSON: {exc}")


def decode_envelope(text: str | bytes) -> Envelope:
    """One websocket message; :class:`WireError` says what is wrong."""
    try:
        return json_guard.decode(_envelope, text)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise _fail("a websocket message", exc) from None


def decode(raw: bytes | str | msgspec.Raw, kind: type[T], what: str) -> T:
    """``raw`` as ``kind``; :class:`WireError` names ``what`` and the field at fault."""
    data = bytes(raw) if isinstance(raw, msgspec.Raw) else raw
    try:
        return json_guard.decode(msgspec.json.Decoder(kind), data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise _fail(what, exc) from None


def decode_post(text: str) -> Post:
    """The post inside a ``posted`` event (``data.post``, a JSON string)."""
    try:
        return json_guard.decode(_post, text)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise _fail("data.post", exc) from None
