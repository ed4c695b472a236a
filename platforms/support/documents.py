"""A file a reply carries (``/save``'s conversation, :class:`~hermes_actors.messages.OutboundDocument`), as a
sender sends it.

A sender whose platform takes files gives :func:`send_document` two ways to deliver a reply: ``upload`` (the file,
through the platform's API) and ``send_text`` (the reply's text, as any reply). The file is tried first. When it
cannot reach the chat (:class:`UploadFailed`: the file was refused or never stored, or the message that shows it
was refused), the text goes instead and the log says why, so a file the platform would not take never loses the
reply. A failure that may have shown the file (no answer to the message that shows it) and a rate limit are no
:class:`UploadFailed`: they go back to the outbox as any :class:`~hermes_actors.ports.SendError`, and the retry
sends the file once more, under the platform's idempotency key where it has one (:func:`posting_failed`).

Uploads go to the platform's own API only: the configured base URL, or an address its API answered that
:func:`same_site` admits; never a URL a message named.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from urllib.parse import quote, urlsplit

import msgspec

from hermes_actors.errors import PlatformError
from hermes_actors.messages import OutboundDocument, OutboundMessage
from hermes_actors.ports import SendError

__all__ = [
    "FormFile",
    "UploadFailed",
    "before_posting",
    "data_uri",
    "document_of",
    "form_data",
    "posting_failed",
    "same_site",
    "send_document",
]

_log = logging.getLogger(__name__)


class UploadFailed(SendError):
    """The file did not reach the chat and nothing of it was shown: the reply's text goes instead."""


class FormFile(msgspec.Struct, frozen=True, kw_only=True):
    """One file of a ``multipart/form-data`` body: its form field, file name, MIME type and bytes."""

    field: str
    name: str
    mime_type: str
    data: bytes


def document_of(message: OutboundMessage) -> OutboundDocument | None:
    """The file ``message`` carries, or ``None``."""
    return message.document if isinstance(message.document, OutboundDocument) else None


def send_document(
    message: OutboundMessage,
    upload: Callable[[OutboundDocument], str | None],
    send_text: Callable[[], str | None],
    what: str,
) -> str | None:
    """Deliver ``message``: its document by ``upload`` when it carries one, else (or when the upload fails with
    :class:`UploadFailed`) its text by ``send_text``; return the platform's id of what was sent."""
    document = document_of(message)
    if document is None:
        return send_text()
    try:
        return upload(document)
    except UploadFailed as exc:
        _log.warning("%s: the file %r was not sent (%s); the reply's text is sent instead", what, document.name, exc)
    return send_text()


@contextlib.contextmanager
def before_posting(what: str) -> Iterator[None]:
    """Steps before the message that shows the file (an upload, a token): any :class:`SendError` or platform error
    raised inside becomes :class:`UploadFailed`, since nothing was shown yet."""
    try:
        yield
    except UploadFailed:
        raise
    except (SendError, PlatformError) as exc:
        raise UploadFailed(f"{what}: {exc}") from exc


def posting_failed(error: SendError) -> SendError:
    """What a failed post of the message that shows the file becomes: ``error`` itself when the file may have been
    shown (the outcome is unknown) or the platform asked to wait (the outbox retries the file), else
    :class:`UploadFailed` (the text goes instead)."""
    if error.outcome_unknown or error.retry_after_s is not None or isinstance(error, UploadFailed):
        return error
    return UploadFailed(str(error))


def _field_value(value: str) -> str:
    return "".join(c for c in value if c not in '"\\\r\n')


def form_data(fields: Mapping[str, str], files: Sequence[FormFile]) -> tuple[bytes, str]:
    """A ``multipart/form-data`` body of ``fields`` then ``files``, and its ``Content-Type``.

    A file name outside ASCII also goes as ``filename*`` (RFC 5987), which servers that know it prefer.
    """
    boundary = f"hermes-{secrets.token_hex(16)}"
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{_field_value(key)}"\r\n\r\n'.encode()
        + value.encode()
        + b"\r\n"
        for key, value in fields.items()
    ]
    for file in files:
        name = _field_value(file.name) or "file"
        disposition = f'form-data; name="{_field_value(file.field)}"; filename="{name}"'
        if not name.isascii():
            disposition += f"; filename*=UTF-8''{quote(name, safe='')}"
        head = f"--{boundary}\r\nContent-Disposition: {disposition}\r\nContent-Type: {file.mime_type}\r\n\r\n"
        parts.append(head.encode() + file.data + b"\r\n")
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


def data_uri(document: OutboundDocument) -> str:
    """``document`` as a ``data:`` URI naming its file: ``data:<type>;filename=<name>;base64,<bytes>``."""
    mime_type = document.mime_type.split(";", 1)[0].strip() or "application/octet-stream"
    name = quote(document.name, safe="")
    return f"data:{mime_type};filename={name};base64,{base64.b64encode(document.data).decode()}"


def same_site(url: str, base_url: str, *, hosts: Sequence[str] = ()) -> bool:
    """Whether ``url`` is the platform's own API: the origin of ``base_url`` (a test server, a self-hosted
    instance), or an HTTPS address on one of ``hosts`` or their subdomains (``slack.com`` admits
    ``files.slack.com``)."""
    try:
        parts, base = urlsplit(url), urlsplit(base_url)
        port, base_port = parts.port, base.port
    except ValueError:  # a port out of range
        return False
    host = (parts.hostname or "").lower()
    if not host or parts.username is not None or parts.password is not None:
        return False
    if (parts.scheme, host, port) == (base.scheme, (base.hostname or "").lower(), base_port):
        return True
    return parts.scheme == "https" and any(host == h or host.endswith("." + h) for h in hosts)
