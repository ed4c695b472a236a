"""A reply's file as the senders send it (platforms/support/documents.py): the text instead of a failed upload,
which failures go back to the outbox, and the wire pieces (multipart bodies, data URIs, the upload hosts)."""

from __future__ import annotations

import base64
import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes_actors.errors import PlatformError
from hermes_actors.messages import OutboundDocument, OutboundMessage
from platforms.base import SendError
from platforms.support.documents import (
    FormFile,
    UploadFailed,
    before_posting,
    data_uri,
    document_of,
    form_data,
    posting_failed,
    same_site,
    send_document,
)
from tests.platforms.form_data import parse_form
from tests.platforms.signal_fake import parse_data_uri

DOCUMENT = OutboundDocument(name="chat.md", mime_type="text/markdown; charset=utf-8", data=b"# chat\n", caption="c")
REPLY = OutboundMessage(platform="x", chat_id="c1", text="# chat", document=DOCUMENT)


def test_a_reply_without_a_document_goes_as_text() -> None:
    sent: list[str] = []

    def upload(document: OutboundDocument) -> str:
        raise AssertionError("no file to upload")

    def text() -> str:
        sent.append("text")
        return "t1"

    assert document_of(OutboundMessage(platform="x", text="hi")) is None
    assert send_document(OutboundMessage(platform="x", text="hi"), upload, text, "x") == "t1"
    assert sent == ["text"]


def test_a_failed_upload_sends_the_text_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    def upload(document: OutboundDocument) -> str:
        raise UploadFailed("the file is too large")

    with caplog.at_level(logging.WARNING, logger="platforms.support.documents"):
        assert send_document(REPLY, upload, lambda: "t1", "x bot: a reply to c1") == "t1"
    (record,) = caplog.records
    assert record.getMessage() == (
        "x bot: a reply to c1: the file 'chat.md' was not sent (the file is too large); "
        "the reply's text is sent instead"
    )


def test_an_upload_that_may_have_been_shown_goes_back_to_the_outbox_without_the_text() -> None:
    def upload(document: OutboundDocument) -> str:
        raise SendError("no answer", outcome_unknown=True)

    def text() -> str:
        raise AssertionError("the file may be in the chat already")

    with pytest.raises(SendError, match="no answer") as raised:
        send_document(REPLY, upload, text, "x")
    assert raised.value.outcome_unknown


@pytest.mark.parametrize(
    ("error", "kept"),
    [
        (SendError("lost", outcome_unknown=True), True),
        (SendError("slow down", retry_after_s=3.0), True),
        (SendError("refused", permanent=True), False),
        (SendError("server error"), False),
    ],
)
def test_a_failed_post_of_the_file_is_retried_only_when_it_may_have_been_shown_or_must_wait(
    error: SendError, kept: bool
) -> None:
    mapped = posting_failed(error)
    assert (mapped is error) is kept
    assert isinstance(mapped, UploadFailed) is not kept
    assert str(mapped) == str(error)


def test_steps_before_posting_fail_as_upload_failures_and_nothing_else_is_caught() -> None:
    for error in (SendError("token refused", retry_after_s=1.0), PlatformError("HTTP 500")):
        with pytest.raises(UploadFailed, match="upload: "), before_posting("upload"):
            raise error
    with pytest.raises(KeyError), before_posting("upload"):
        raise KeyError("a bug stays a bug")


def test_a_form_carries_fields_and_a_file_as_a_server_reads_them() -> None:
    data = bytes(range(256)) + b"\r\n--hermes-not-the-boundary\r\n"
    file = FormFile(field="files[0]", name='Résumé "q".md', mime_type="text/markdown", data=data)
    body, content_type = form_data({"payload_json": '{"content": "é"}', "channel_id": "C1"}, [file])
    fields, files = parse_form(content_type, body)
    assert fields == {"payload_json": '{"content": "é"}', "channel_id": "C1"}
    ((upload),) = files
    assert (upload.field, upload.content_type, upload.data) == ("files[0]", "text/markdown", data)
    assert upload.filename == "Résumé q.md"  # quotes cannot close the header; the name survives as filename*


_VALUE = st.text(st.characters(codec="utf-8", blacklist_characters="\r\n"), max_size=40)


@given(
    st.dictionaries(st.text("abcdefgh_", min_size=1, max_size=8), _VALUE, max_size=4),
    st.binary(max_size=2000),
    st.text(st.characters(whitelist_categories=("L", "N", "P", "Zs"), blacklist_characters='"\\'), max_size=30).filter(
        lambda name: name != "" and name == name.strip()  # a parser may trim a name's edges; what we send does not
    ),
)
def test_any_fields_bytes_and_file_name_round_trip_through_a_form(
    fields: dict[str, str], data: bytes, name: str
) -> None:
    body, content_type = form_data(fields, [FormFile(field="file", name=name, mime_type="application/x-y", data=data)])
    parsed, (upload,) = parse_form(content_type, body)
    assert parsed == fields
    assert (upload.filename, upload.data) == (name, data)


def test_a_data_uri_names_the_file_and_carries_its_bytes_in_base64() -> None:
    uri = data_uri(DOCUMENT)
    assert uri == "data:text/markdown;filename=chat.md;base64," + base64.b64encode(DOCUMENT.data).decode()
    assert parse_data_uri(uri) == ("chat.md", "text/markdown", b"# chat\n")
    odd = OutboundDocument(name="a b;c,d.md", mime_type="", data=b"x")
    assert parse_data_uri(data_uri(odd)) == ("a b;c,d.md", "application/octet-stream", b"x")


@pytest.mark.parametrize(
    ("url", "base", "hosts", "admitted"),
    [
        ("https://files.slack.com/upload/v1/abc", "https://slack.com/api", ("slack.com",), True),
        ("https://slack.com/upload", "https://slack.com/api", ("slack.com",), True),
        ("http://files.slack.com/upload/v1/abc", "https://slack.com/api", ("slack.com",), False),
        ("https://slack.com.evil.example/upload", "https://slack.com/api", ("slack.com",), False),
        ("https://evilslack.com/upload", "https://slack.com/api", ("slack.com",), False),
        ("https://user@files.slack.com/upload", "https://slack.com/api", ("slack.com",), False),
        ("http://127.0.0.1:8080/upload/v1/F1", "http://127.0.0.1:8080/api", (), True),
        ("http://127.0.0.1:8081/upload/v1/F1", "http://127.0.0.1:8080/api", (), False),
        ("http://localhost:8080/upload/v1/F1", "http://127.0.0.1:8080/api", (), False),
        ("http://127.0.0.1:99999/upload", "http://127.0.0.1:8080/api", (), False),
        ("file:///etc/passwd", "https://slack.com/api", ("slack.com",), False),
    ],
)
def test_uploads_go_only_to_the_configured_api_or_the_platforms_own_hosts(
    url: str, base: str, hosts: tuple[str, ...], admitted: bool
) -> None:
    assert same_site(url, base, hosts=hosts) is admitted
