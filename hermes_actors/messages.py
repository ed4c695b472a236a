"""Messages that cross the runtime's boundaries: the edge, actors, the disk and the outbox.

All are frozen, keyword-only msgspec Structs, encoded with msgpack into the inbox and outbox rows.
"""

from __future__ import annotations

import msgspec

from hermes_actors.routing import SessionSource

__all__ = [
    "Attachment",
    "InboundMessage",
    "OutboundMessage",
    "decode_inbound",
    "decode_outbound",
    "encode",
]


class Attachment(msgspec.Struct, frozen=True, kw_only=True):
    """A file that came with a message: a local path or URL and its media type."""

    kind: str  # image, audio, document, ...
    uri: str
    mime_type: str | None = None
    name: str | None = None


class InboundMessage(msgspec.Struct, frozen=True, kw_only=True):
    """A message from a platform, normalised by its adapter.

    ``message_id`` is the platform's id, used with the platform and account for durable dedupe.
    """

    source: SessionSource
    text: str
    message_id: str
    attachments: tuple[Attachment, ...] = ()
    received_at: float | None = None


class OutboundMessage(msgspec.Struct, frozen=True, kw_only=True):
    """A reply for a platform to deliver.

    ``possible_duplicate`` is set when an earlier attempt may have reached the platform before a crash.
    ``no_retry`` replies (a handoff's first message) are given up after one failed attempt and reported.
    ``answers`` lists the platform message ids of every inbound message the reply answers (a turn may merge
    several), so request/response platforms (the HTTP API, the terminal) can complete each waiting request.
    """

    platform: str
    text: str
    account_id: str = ""
    chat_id: str | None = None
    thread_id: str | None = None
    user_id: str | None = None
    session_id: str | None = None
    reply_to: str | None = None
    possible_duplicate: bool = False
    no_retry: bool = False
    answers: tuple[str, ...] = ()


_encoder = msgspec.msgpack.Encoder()
_inbound = msgspec.msgpack.Decoder(InboundMessage)
_outbound = msgspec.msgpack.Decoder(OutboundMessage)


def encode(message: InboundMessage | OutboundMessage) -> bytes:
    """Encode a message for an inbox or outbox row."""
    return _encoder.encode(message)


def decode_inbound(payload: bytes) -> InboundMessage:
    """Decode an inbox row's payload."""
    return _inbound.decode(payload)


def decode_outbound(payload: bytes) -> OutboundMessage:
    """Decode an outbox row's payload."""
    return _outbound.decode(payload)
