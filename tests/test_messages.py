"""The message types' closed values are StrEnums that keep the bytes of rows written when they were bare strings."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from hermes_actors.media import KINDS, MediaStore, kind_of
from hermes_actors.messages import (
    Attachment,
    AttachmentKind,
    InboundMessage,
    OutboundError,
    OutboundMessage,
    decode_inbound,
    decode_outbound,
    encode,
)
from hermes_actors.routing import SessionSource

# An inbox row as written before the kinds were an enum (Attachment.kind: str): a saved image and a refused
# document, from telegram chat 42.
OLD_INBOUND_ROW = bytes.fromhex(
    "85a6736f757263658ba8706c6174666f726da874656c656772616daa6163636f756e745f6964c0a873636f70655f6964c0a9636861"
    "745f74797065a2646da7636861745f6964a23432a97468726561645f6964c0a7757365725f6964a137ab757365725f69645f616c74"
    "c0a9636861745f6e616d65c0a9757365725f6e616d65c0aa6d6573736167655f6964c0a474657874a46c6f6f6baa6d657373616765"
    "5f6964a26d31ab6174746163686d656e74739289a46b696e64a5696d616765a96d696d655f74797065a9696d6167652f706e67a46e"
    "616d65a76361742e706e67a473697a6503a470617468b22f682f6d656469612f61622f61622e706e67a6736861323536a26162aa73"
    "6f757263655f75726cc0a56572726f72c0ab6465736372697074696f6ec089a46b696e64a8646f63756d656e74a96d696d655f7479"
    "7065c0a46e616d65a76269672e706466a473697a65c0a470617468c0a6736861323536c0aa736f757263655f75726cc0a56572726f"
    "72a7746f6f20626967ab6465736372697074696f6ec0ab72656365697665645f6174cb41d954fc40000000"
)

# An outbox notice as written when OutboundMessage.error was a bare string.
OLD_OUTBOUND_ROW = bytes.fromhex(
    "8da8706c6174666f726daa6170695f736572766572a474657874a96e6f74207361766564aa6163636f756e745f6964a0a7636861"
    "745f6964a163a97468726561645f6964c0a7757365725f6964c0aa73657373696f6e5f6964c0a87265706c795f746fc0b2706f73"
    "7369626c655f6475706c6963617465c2a86e6f5f7265747279c2a7616e737765727391a26d31a96f7574626f785f6964c0a56572"
    "726f72b373746f726167655f756e617661696c61626c65"
)


def test_an_inbox_row_written_with_string_kinds_decodes_to_the_members_and_encodes_back_byte_for_byte() -> None:
    message = decode_inbound(OLD_INBOUND_ROW)
    assert message.source == SessionSource(platform="telegram", chat_id="42", user_id="7")
    assert [a.kind for a in message.attachments] == [AttachmentKind.IMAGE, AttachmentKind.DOCUMENT]
    assert all(type(a.kind) is AttachmentKind for a in message.attachments)
    assert message.attachments[1].error == "too big"
    assert encode(message) == OLD_INBOUND_ROW


def test_an_outbox_notice_written_with_a_string_error_decodes_to_the_member_and_encodes_back() -> None:
    notice = decode_outbound(OLD_OUTBOUND_ROW)
    assert notice.error is OutboundError.STORAGE_UNAVAILABLE
    assert notice.answers == ("m1",)
    # The same fields and values as the old row, the error written as the same string. Not the same bytes: with more
    # than 15 fields (tool calls, documents) msgspec writes the map's header in its 3-byte form whatever it holds.
    assert msgspec.msgpack.decode(encode(notice)) == msgspec.msgpack.decode(OLD_OUTBOUND_ROW)


def test_members_encode_as_their_values() -> None:
    made = InboundMessage(
        source=SessionSource(platform="telegram", chat_id="42", user_id="7"),
        text="look",
        message_id="m1",
        attachments=(Attachment(kind=AttachmentKind.VIDEO, name="clip.mp4"),),
    )
    assert msgspec.msgpack.decode(encode(made))["attachments"][0]["kind"] == "video"
    notice = OutboundMessage(platform="api_server", text="x", error=OutboundError.STORAGE_UNAVAILABLE)
    assert msgspec.msgpack.decode(encode(notice))["error"] == "storage_unavailable"


def test_a_row_with_a_kind_that_is_none_of_them_is_refused() -> None:
    row = msgspec.msgpack.decode(OLD_INBOUND_ROW)
    row["attachments"][0]["kind"] = "sticker"
    with pytest.raises(msgspec.ValidationError, match="kind"):
        decode_inbound(msgspec.msgpack.encode(row))


def test_kinds_follow_the_mime_type() -> None:
    assert KINDS == (AttachmentKind.IMAGE, AttachmentKind.AUDIO, AttachmentKind.VIDEO, AttachmentKind.DOCUMENT)
    assert kind_of("image/png") is AttachmentKind.IMAGE
    assert kind_of("Audio/ogg") is AttachmentKind.AUDIO
    assert kind_of("video/mp4") is AttachmentKind.VIDEO
    assert kind_of("application/pdf") is AttachmentKind.DOCUMENT
    assert kind_of(None) is AttachmentKind.DOCUMENT


def test_the_media_store_makes_records_with_members_from_either_spelling(tmp_path: Path) -> None:
    media = MediaStore(tmp_path / "media")
    assert media.save(b"\x89PNG", kind="image", name="a.png").kind is AttachmentKind.IMAGE
    assert media.save(b"words", name="notes.txt").kind is AttachmentKind.DOCUMENT
    assert media.refuse("too big", kind="video").kind is AttachmentKind.VIDEO
    assert media.link("https://example.com/a.jpg", kind=AttachmentKind.IMAGE).kind is AttachmentKind.IMAGE
    assert media.save_base64("aGk=", kind="audio", mime_type="audio/ogg").kind is AttachmentKind.AUDIO
    kinds = "image, audio, video, document"
    assert media.check("sticker", 1) == f"sticker files are not accepted here (media.allowed_kinds: {kinds})"
    with pytest.raises(ValueError, match="'sticker' is not an attachment kind"):
        media.refuse("odd", kind="sticker")
