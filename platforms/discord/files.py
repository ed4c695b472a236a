"""Discord attachments into the media store: each ``attachments[]`` entry of a ``MESSAGE_CREATE``, from the CDN.

An attachment object carries its ``filename``, ``size``, ``content_type`` (absent when Discord does not know the
type) and ``url``, a signed address on ``cdn.discordapp.com`` whose query (``ex``, ``is``, ``hm``) expires after
about a day. The size is checked against the media limits before anything is fetched; the download is a plain GET of
that URL through the section's fetch policy (Discord's CDN at public addresses, redirects included), read no further
than ``media.max_bytes`` (:func:`platforms.support.downloads.fetch`). The CDN wants no credentials: the bot token
belongs to the REST API and is never sent here. The record keeps the URL without its query as ``source_url``: it says
where the file came from, while the signature would be a stale capability (and is kept out of the logs too). Every
failure (no address, a link Discord no longer serves, a broken download) becomes a refused attachment saying why, so
the message's text still runs and the reply names what could not be read.
"""

from __future__ import annotations

import asyncio
import logging
import mimetypes
from collections.abc import Sequence
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import msgspec

from hermes_actors.media import MediaStore, kind_of
from hermes_actors.messages import Attachment, InboundMessage
from platforms.discord.events import MessageAttachment
from platforms.support import downloads
from platforms.support.downloads import DownloadFailed
from platforms.support.fetch_policy import FetchPolicy
from platforms.support.http_client import open_session, shown

__all__ = ["attach_files", "mime_type_of", "source_url_of"]

_log = logging.getLogger(__name__)

_NO_ADDRESS = "Discord gave no download address for it"
_GONE = "Discord's CDN no longer serves it (HTTP {status}: the link expired or the file was deleted); send it again"


async def attach_files(
    inbound: InboundMessage,
    attachments: Sequence[MessageAttachment],
    *,
    media: MediaStore,
    fetch: FetchPolicy,
    timeout_s: float,
    where: str,
) -> InboundMessage:
    """``inbound`` with ``attachments`` downloaded into ``media`` as its attachments (refused ones saying why).

    The files are fetched one after another, as ``fetch`` allows, so at most one file's bytes are held at a time.
    ``where`` names the bot in log lines.
    """
    if not attachments:
        return inbound
    async with open_session(fetch) as session:
        records = [await _fetch(a, media=media, session=session, timeout_s=timeout_s, where=where) for a in attachments]
    return msgspec.structs.replace(inbound, attachments=(*inbound.attachments, *records))


def mime_type_of(attachment: MessageAttachment) -> str | None:
    """The attachment's media type without parameters: Discord's ``content_type``, else guessed from its name."""
    given = (attachment.content_type or "").split(";", 1)[0].strip().lower()
    if given:
        return given
    return mimetypes.guess_type(attachment.filename, strict=False)[0] if attachment.filename else None


def source_url_of(url: str | None) -> str | None:
    """``url`` without its query and fragment (the CDN's expiring signature), or ``None`` unless it is http(s)."""
    if not url:
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


async def _fetch(
    attachment: MessageAttachment, *, media: MediaStore, session: aiohttp.ClientSession, timeout_s: float, where: str
) -> Attachment:
    mime_type = mime_type_of(attachment)
    kind = kind_of(mime_type)
    name = attachment.filename or None
    stored_url = source_url_of(attachment.url)

    def refuse(problem: str, size: int | None = attachment.size) -> Attachment:
        return media.refuse(problem, kind=kind, mime_type=mime_type, name=name, size=size, source_url=stored_url)

    problem = media.check(kind, attachment.size)
    if problem is not None:
        return refuse(problem)
    if attachment.url is None or stored_url is None:
        _log.warning("%s: attachment %s came without an http(s) address", where, name or kind)
        return refuse(_NO_ADDRESS)
    try:
        fetched = await downloads.fetch(session, attachment.url, limit=media.config.max_bytes, timeout_s=timeout_s)
    except DownloadFailed as exc:
        _log.warning("%s: downloading %s from %s failed: %s", where, name or kind, shown(attachment.url), exc.detail)
        if exc.status in (403, 404):
            return refuse(_GONE.format(status=exc.status))
        return refuse(exc.problem, exc.size if exc.size is not None else attachment.size)
    return await asyncio.to_thread(
        media.save,
        fetched.data,
        kind=kind,
        mime_type=mime_type or fetched.content_type,
        name=name,
        source_url=stored_url,
    )
