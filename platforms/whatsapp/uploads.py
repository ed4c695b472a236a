"""A reply's document (``/save``) as the Cloud API takes a file: uploaded to the number's media, then sent by id.

``POST {graph_base_url}/{version}/{phone_number_id}/media`` takes ``multipart/form-data`` (``messaging_product:
whatsapp``, ``type``: the MIME type, ``file``) and answers the media ``id``; a ``document`` message then names it
with its ``filename`` and ``caption`` (1,024 characters at most). The Cloud API takes documents of a fixed list of
types (plain text, PDF, Office); any other ``text/*`` file (Markdown) goes up as ``text/plain``, keeping its name.
"""

from __future__ import annotations

import msgspec

from hermes_actors.messages import OutboundDocument
from platforms.support import http_client
from platforms.support.documents import FormFile, UploadFailed, form_data
from platforms.whatsapp.config import NumberKeys

__all__ = ["DOCUMENT_TYPES", "MAX_CAPTION", "document_message", "upload_media"]

MAX_CAPTION = 1024
DOCUMENT_TYPES = frozenset(
    {
        "text/plain",
        "application/pdf",
        "application/msword",
        "application/vnd.ms-excel",
        "application/vnd.ms-powerpoint",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    }
)


class _Uploaded(msgspec.Struct, frozen=True, kw_only=True):
    id: str


def _document_type(mime_type: str) -> str | None:
    kind = mime_type.split(";", 1)[0].strip().lower()
    if kind in DOCUMENT_TYPES:
        return kind
    return "text/plain" if kind.startswith("text/") else None


def upload_media(number: NumberKeys, base: str, document: OutboundDocument, timeout: float) -> str:
    """Upload ``document`` to ``number``'s media; return the media id, or raise :class:`UploadFailed`."""
    where = f"whatsapp number {number.phone_number_id}: a file upload"
    kind = _document_type(document.mime_type)
    if kind is None:
        raise UploadFailed(f"{where}: WhatsApp takes no documents of type {document.mime_type}")
    file = FormFile(field="file", name=document.name, mime_type=kind, data=document.data)
    body, content_type = form_data({"messaging_product": "whatsapp", "type": kind}, [file])
    headers = {"authorization": f"Bearer {number.access_token}", "content-type": content_type}
    url = f"{base}/{number.phone_number_id}/media"
    try:
        result = http_client.request("POST", url, body=body, headers=headers, timeout=timeout)
    except http_client.HttpError as exc:
        raise UploadFailed(f"{where}: {exc.reason}") from None
    if not 200 <= result.status < 300:
        raise UploadFailed(f"{where}: refused with HTTP {result.status}: {result.excerpt()!r}")
    try:
        return msgspec.json.decode(result.body, type=_Uploaded).id
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise UploadFailed(f"{where}: answered without a media id: {result.excerpt()!r}") from None


def document_message(media_id: str, document: OutboundDocument) -> dict[str, object]:
    """The ``type``/``document`` fields of a message that shows the uploaded ``media_id``."""
    fields: dict[str, object] = {"id": media_id, "filename": document.name}
    if document.caption:
        fields["caption"] = document.caption[:MAX_CAPTION]
    return {"type": "document", "document": fields}
