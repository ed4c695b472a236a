"""Matrix files into the media store: ``GET /_matrix/client/v1/media/download/{serverName}/{mediaId}``.

An ``m.image``, ``m.file``, ``m.audio`` or ``m.video`` names its file as ``mxc://{serverName}/{mediaId}``, with its
size and type in ``info``. The file is fetched through the account's own homeserver with the authenticated media
API (Matrix 1.11: the access token in the ``Authorization`` header, never in the URL; the homeserver fetches
remote media over federation itself). A redirect to another origin drops the header (aiohttp does that), so the
token never leaves the homeserver.

As Telegram's download does: a file over ``media.max_bytes`` by ``info.size`` is refused before any request, then
by the answer's ``Content-Length``, then while reading; the bytes are saved off the event loop; every failure (the
homeserver's ``M_NOT_FOUND``, ``M_TOO_LARGE``, a broken download, a file sent end-to-end encrypted) becomes a
refused attachment saying why, so the message's text still runs. The record keeps the ``mxc://`` URI as its
source: it holds no secret.
"""

from __future__ import annotations

import asyncio
import logging
import re

import aiohttp
import msgspec
from yarl import URL

from hermes_actors.media import MediaStore, format_size
from hermes_actors.messages import Attachment, InboundMessage
from platforms.matrix.client import Homeserver
from platforms.matrix.events import MatrixFile
from platforms.matrix.wire import api_error

__all__ = ["attach_file", "parse_mxc"]

_log = logging.getLogger(__name__)

_CHUNK = 64 * 1024
# mxc://<server name>/<media id>: a host (name, IPv4 or [IPv6]) with an optional port; the id is [A-Za-z0-9_-].
_MXC = re.compile(r"mxc://((?:[A-Za-z0-9.-]{1,255}|\[[0-9A-Fa-f:.]{2,45}\])(?::[0-9]{1,5})?)/([A-Za-z0-9_-]{1,255})")
_REFUSALS = {
    "M_NOT_FOUND": "the homeserver does not have it (M_NOT_FOUND)",
    "M_TOO_LARGE": "the homeserver would not fetch it: it is too large there (M_TOO_LARGE)",
    "M_LIMIT_EXCEEDED": "the homeserver is limiting downloads right now (M_LIMIT_EXCEEDED)",
    "M_FORBIDDEN": "the homeserver does not let the bot fetch it (M_FORBIDDEN)",
    "M_UNRECOGNIZED": "the homeserver has no authenticated media API (Matrix 1.11 or later is needed to fetch files)",
}


def parse_mxc(uri: str) -> tuple[str, str] | None:
    """The server name and media id of an ``mxc://`` URI, or ``None`` when it is not one."""
    found = _MXC.fullmatch(uri)
    return None if found is None else (found.group(1), found.group(2))


async def attach_file(
    inbound: InboundMessage,
    file: MatrixFile,
    *,
    api: Homeserver,
    media: MediaStore,
    session: aiohttp.ClientSession,
    timeout_s: float,
) -> InboundMessage:
    """``inbound`` with ``file`` downloaded into ``media`` as its attachment (a refused one saying why)."""
    attachment = await _fetch(file, api=api, media=media, session=session, timeout_s=timeout_s)
    return msgspec.structs.replace(inbound, attachments=(*inbound.attachments, attachment))


async def _fetch(
    file: MatrixFile, *, api: Homeserver, media: MediaStore, session: aiohttp.ClientSession, timeout_s: float
) -> Attachment:
    def refuse(problem: str, size: int | None = file.size) -> Attachment:
        return media.refuse(
            problem, kind=file.kind, mime_type=file.mime_type, name=file.name, size=size, source_url=file.url
        )

    if file.problem is not None:
        return refuse(file.problem)
    problem = media.check(file.kind, file.size)
    if problem is not None:
        return refuse(problem)
    assert file.url is not None  # a file without a problem has one
    parts = parse_mxc(file.url)
    if parts is None:
        return refuse(f"{file.url[:100]!r} is not an mxc:// URI")
    limit = media.config.max_bytes
    label = file.name or file.kind
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout_s, sock_read=timeout_s)
    try:
        url = URL(api.media_url(*parts), encoded=True)  # the server name's ":" stays percent-encoded
        async with session.get(url, headers=api.headers(), timeout=timeout) as response:
            if response.status != 200:
                body = await response.content.read(4096)
                headers = {k.lower(): v for k, v in response.headers.items()}
                error = api_error(response.status, headers, body, f"matrix account '{api.name}': media download")
                _log.warning("%s; %s (%s) was not downloaded", error, label, file.url)
                return refuse(_REFUSALS.get(error.errcode, f"its download failed (HTTP {response.status})"))
            announced = response.content_length
            if announced is not None and announced > limit:
                return refuse(f"it is {format_size(announced)}, over the {format_size(limit)} limit", announced)
            data = bytearray()
            async for chunk in response.content.iter_chunked(_CHUNK):
                data += chunk
                if len(data) > limit:
                    return refuse(f"it is over the {format_size(limit)} limit", None)
            served_type = response.content_type
    except (aiohttp.ClientError, TimeoutError) as exc:
        _log.warning("matrix account %r: downloading %s (%s) failed: %s", api.name, label, file.url, exc)
        return refuse("its download broke off")
    mime = file.mime_type or (served_type if served_type != "application/octet-stream" else None)
    return await asyncio.to_thread(
        media.save, bytes(data), kind=file.kind, mime_type=mime, name=file.name, source_url=file.url
    )
