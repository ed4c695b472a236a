"""The files of a Teams message, saved into the media store before the message is accepted.

Two kinds carry bytes. A file sent in a personal chat is ``application/vnd.microsoft.teams.file.download.info``
whose ``content.downloadUrl`` is a short-lived pre-authorised link (fetched without credentials). Any other
attachment with a ``contentUrl`` is fetched from it: an image pasted into a message lives on the Bot Connector and
is fetched with the bot's token, which goes only to the origin of the activity's verified ``serviceUrl`` (any
other address is fetched without it). Web Chat and Direct Line users write these URLs themselves, so every one is
fetched through the section's fetch policy: Microsoft's file hosts (:data:`~platforms.teams.config.FILE_HOSTS`)
at public addresses, redirects included; anything else is refused without being asked. The message's own HTML
rendering (``text/html``) is not a file; cards and files shared from SharePoint or OneDrive (``reference``, which
need Microsoft Graph) are refused saying so. The records carry no source URL: the addresses are useless without
the token or expire within minutes.
"""

from __future__ import annotations

import asyncio
import logging
import mimetypes
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import msgspec

from hermes_actors.media import MediaStore, kind_of
from hermes_actors.messages import Attachment, InboundMessage
from platforms.support import downloads
from platforms.support.fetch_policy import FetchPolicy
from platforms.support.http_client import open_session
from platforms.teams.activity import TeamsAttachment

__all__ = ["FILE_DOWNLOAD_INFO", "attach_files"]

_log = logging.getLogger(__name__)

FILE_DOWNLOAD_INFO = "application/vnd.microsoft.teams.file.download.info"
_CARD = "application/vnd.microsoft.card."


def _same_origin(url: str, service_url: str) -> bool:
    parts, service = urlsplit(url), urlsplit(service_url)
    try:
        return bool(parts.hostname) and (parts.scheme, parts.hostname, parts.port) == (
            service.scheme,
            service.hostname,
            service.port,
        )
    except ValueError:  # a port out of range
        return False


def _http_url(value: Any) -> str | None:
    return value if isinstance(value, str) and urlsplit(value).scheme in ("http", "https") else None


async def attach_files(
    inbound: InboundMessage,
    files: Sequence[TeamsAttachment],
    *,
    service_url: str,
    token: Callable[[], str],
    media: MediaStore,
    fetch: FetchPolicy,
    timeout_s: float,
    where: str,
) -> InboundMessage:
    """``inbound`` with ``files`` saved into ``media`` as its attachments (refused ones saying why).

    ``token`` is called (off the loop) only for a file on the Bot Connector, which needs the bot's token; every URL
    is fetched as ``fetch`` allows.
    """
    if not files:
        return inbound
    records: list[Attachment] = []
    async with open_session(fetch) as session:
        for file in files:
            records.append(await _record(file, service_url, token, media, session, timeout_s, where))
    return msgspec.structs.replace(inbound, attachments=(*inbound.attachments, *records))


async def _record(
    file: TeamsAttachment,
    service_url: str,
    token: Callable[[], str],
    media: MediaStore,
    session: aiohttp.ClientSession,
    timeout_s: float,
    where: str,
) -> Attachment:
    content_type = file.contentType.lower()
    name = (file.name or "")[:200] or None
    if content_type == FILE_DOWNLOAD_INFO:
        content = file.content if isinstance(file.content, dict) else {}
        url = _http_url(content.get("downloadUrl"))
        mime = mimetypes.guess_type(name or "", strict=False)[0]
        if url is None:
            return media.refuse("Teams gave no download address for it", kind="document", name=name)
        return await downloads.download(
            media, session, url, kind=kind_of(mime), mime_type=mime, name=name, timeout_s=timeout_s, where=where
        )
    if content_type.startswith(_CARD):
        return media.refuse("it is a card, which is not read", kind="document", mime_type=content_type, name=name)
    if content_type == "reference" or content_type.startswith("application/vnd.microsoft"):
        return media.refuse(
            "it is a file shared from SharePoint or OneDrive, which the bot cannot read",
            kind=kind_of(mimetypes.guess_type(name or "", strict=False)[0]),
            name=name,
        )
    url = _http_url(file.contentUrl)
    if url is None:
        return media.refuse("Teams gave no download address for it", kind=kind_of(content_type), name=name)
    headers: dict[str, str] = {}
    if _same_origin(url, service_url):  # on the Bot Connector (pasted images): it wants the bot's token
        try:
            headers["Authorization"] = f"Bearer {await asyncio.to_thread(token)}"
        except Exception as exc:
            _log.warning("%s: no token to fetch %s with: %s", where, name or content_type, exc)
            return media.refuse(
                "the bot could not sign in to fetch it", kind=kind_of(content_type), mime_type=content_type, name=name
            )
    return await downloads.download(
        media,
        session,
        url,
        kind=kind_of(content_type),
        mime_type=content_type,
        name=name,
        headers=headers,
        timeout_s=timeout_s,
        where=where,
    )
