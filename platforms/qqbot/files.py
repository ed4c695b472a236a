"""The files of a QQ message, saved into the media store before the message is accepted.

QQ announces each file with a ``url`` on its media servers (a guild message's may lack the scheme:
``gchat.qpic.cn/...``, fetched as ``https``), a ``content_type`` (``image/jpeg``, or just ``file``) and often its
``filename`` and ``size``. The URLs are pre-authorised, so nothing is sent with them; a size over
``media.max_bytes`` is refused before fetching. QQ signs the events, but a URL is still fetched only through the
section's fetch policy (QQ's media hosts at public addresses, redirects included). Every failure is a refused
attachment saying why, so the text still runs and the reply names what could not be read.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from hermes_actors.media import MediaStore, kind_of
from hermes_actors.messages import Attachment, InboundMessage
from platforms.qqbot.events import AttachmentRef
from platforms.support import downloads
from platforms.support.fetch_policy import FetchPolicy
from platforms.support.http_client import open_session

__all__ = ["attach_files", "url_of"]


def url_of(ref: AttachmentRef) -> str:
    """The URL to fetch ``ref`` from (``https://`` added to one without a scheme)."""
    url = ref.url.strip()
    return url if url.startswith(("http://", "https://")) else "https://" + url.lstrip("/")


async def attach_files(
    inbound: InboundMessage,
    refs: Sequence[AttachmentRef],
    *,
    media: MediaStore,
    fetch: FetchPolicy,
    timeout_s: float,
) -> InboundMessage:
    """``inbound`` with each of ``refs`` saved into ``media`` (refused ones saying why), one at a time, fetched as
    ``fetch`` allows."""
    records: list[Attachment] = []
    async with open_session(fetch) as session:
        for ref in refs:
            mime = ref.content_type if ref.content_type and "/" in ref.content_type else None
            records.append(
                await downloads.download(
                    media,
                    session,
                    url_of(ref),
                    kind=kind_of(mime),
                    mime_type=mime,
                    name=ref.filename,
                    size=ref.size if ref.size and ref.size > 0 else None,
                    timeout_s=timeout_s,
                    where=f"qqbot app {inbound.source.account_id}",
                )
            )
    return msgspec.structs.replace(inbound, attachments=(*inbound.attachments, *records))
