"""The attachments of an iMessage, fetched from the BlueBubbles server into the media store.

``GET /api/v1/attachment/{guid}/download?password=...`` answers with the file's bytes; the server's ``totalBytes``
is checked against ``media.max_bytes`` before fetching, and ``mimeType`` and ``transferName`` are kept. Every
failure is a refused attachment saying why, so the text still runs. The records carry no source URL (it holds the
password).
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote, urlencode

import aiohttp
import msgspec

from hermes_actors.media import MediaStore, kind_of
from hermes_actors.messages import Attachment, InboundMessage
from platforms.bluebubbles.events import AttachmentRef
from platforms.support import downloads

__all__ = ["attach_files", "download_url"]


def download_url(server: str, guid: str, password: str) -> str:
    """Where the server serves attachment ``guid``."""
    return f"{server}/api/v1/attachment/{quote(guid, safe='')}/download?{urlencode({'password': password})}"


async def attach_files(
    inbound: InboundMessage,
    refs: Sequence[AttachmentRef],
    *,
    server: str,
    password: str,
    media: MediaStore,
    session: aiohttp.ClientSession,
    timeout_s: float,
) -> InboundMessage:
    """``inbound`` with each of ``refs`` saved into ``media`` (refused ones saying why), one at a time."""
    records: list[Attachment] = []
    for ref in refs:
        records.append(
            await downloads.download(
                media,
                session,
                download_url(server, ref.guid, password),
                kind=kind_of(ref.mime_type),
                mime_type=ref.mime_type,
                name=ref.transfer_name,
                size=ref.total_bytes if ref.total_bytes and ref.total_bytes > 0 else None,
                timeout_s=timeout_s,
                where=f"bluebubbles server {inbound.source.account_id}",
            )
        )
    return msgspec.structs.replace(inbound, attachments=(*inbound.attachments, *records))
