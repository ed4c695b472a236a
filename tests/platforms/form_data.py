"""``multipart/form-data`` as the fakes of platforms read an upload: fields as text, files as :class:`Upload`.

Parsed with the standard library's MIME parser from the raw body, so a fake that already read the body (to check a
signature, say) can still look at its form.
"""

from __future__ import annotations

import email.parser
import email.policy
from dataclasses import dataclass
from email.message import EmailMessage

__all__ = ["Upload", "is_form", "parse_form"]


@dataclass(frozen=True)
class Upload:
    """One file of a form: its field, file name, MIME type (as sent) and bytes."""

    field: str
    filename: str
    content_type: str
    data: bytes


def is_form(content_type: str) -> bool:
    """Whether a ``Content-Type`` header names a multipart form."""
    return content_type.split(";", 1)[0].strip().lower() == "multipart/form-data"


def parse_form(content_type: str, raw: bytes) -> tuple[dict[str, str], list[Upload]]:
    """The text fields and the files of a ``multipart/form-data`` body; ``ValueError`` when it is not one."""
    if not is_form(content_type):
        raise ValueError(f"not a multipart form: {content_type!r}")
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    parsed = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + raw)
    if not isinstance(parsed, EmailMessage) or not parsed.is_multipart():
        raise ValueError("the body is not a multipart form")
    fields: dict[str, str] = {}
    files: list[Upload] = []
    for part in parsed.iter_parts():
        if not isinstance(part, EmailMessage):
            raise ValueError("a part of the form is not a MIME part")
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            raise ValueError("a part of the form has no name")
        payload = part.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        filename = part.get_filename()
        if filename is None:
            fields[name] = data.decode("utf-8")
        else:
            files.append(Upload(name, filename, part.get_content_type(), data))
    return fields, files
