"""The images of a chat request (``image_url`` content parts) as attachments of the inbound message."""

from __future__ import annotations

from hermes_actors.media import MediaStore, kind_of
from hermes_actors.messages import Attachment

__all__ = ["image_attachment"]


def image_attachment(media: MediaStore, url: str) -> Attachment:
    """Save a ``data:`` image into the media store; record an http(s) one by its URL; refuse anything else."""
    if url.startswith(("http://", "https://")):
        return media.link(url, kind="image")
    if not url.startswith("data:"):
        return media.refuse("only data: and http(s) image URLs are accepted", kind="image", source_url=url[:200])
    header, _, payload = url[len("data:") :].partition(",")
    mime, *parameters = header.split(";")
    mime = mime.strip().lower() or "image/png"
    if "base64" not in parameters:
        return media.refuse("only base64 data: URLs are read", kind=kind_of(mime), mime_type=mime)
    return media.save_base64(payload, kind=kind_of(mime), mime_type=mime)
