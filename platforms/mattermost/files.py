"""A post's files into the media store: ``file_ids`` → ``GET /files/{id}/info`` → ``GET /files/{id}``.

A post names its files by id; ``metadata.files`` (when the event carries it) already says each one's name, size and
type, else ``GET /api/v4/files/{id}/info`` does. The size is checked against the media limits before the file is
fetched; ``GET /api/v4/files/{id}`` is fetched with the bot's Bearer token (the server checks the bot may read the
channel), no further than ``media.max_bytes``. The records carry no source URL: the address is useless without the
token. Every failure becomes a refused attachment saying why, so the post's text still runs and the reply names what
could not be read.
"""

from __future__ import annotations

import asyncio
import logging
import mimetypes
from urllib.parse import quote

import aiohttp
import msgspec

from hermes_actors.media import MediaStore, kind_of
from hermes_actors.messages import Attachment, InboundMessage
from platforms.mattermost.rest import RestClient, RestError
from platforms.mattermost.wire import FileInfo, Post
from platforms.support import downloads

__all__ = ["attach_files"]

_log = logging.getLogger(__name__)


async def attach_files(
    inbound: InboundMessage,
    post: Post,
    *,
    rest: RestClient,
    media: MediaStore,
    session: aiohttp.ClientSession,
    timeout_s: float,
) -> InboundMessage:
    """``inbound`` with the files of ``post`` saved into ``media`` (refused ones saying why), one at a time."""
    if not post.file_ids:
        return inbound
    known = {info.id: info for info in post.metadata.files} if post.metadata is not None else {}
    records = []
    for file_id in post.file_ids:
        records.append(await _fetch(file_id, known.get(file_id), rest, media, session, timeout_s))
    return msgspec.structs.replace(inbound, attachments=(*inbound.attachments, *records))


async def _fetch(
    file_id: str,
    info: FileInfo | None,
    rest: RestClient,
    media: MediaStore,
    session: aiohttp.ClientSession,
    timeout_s: float,
) -> Attachment:
    where = f"mattermost bot '{rest.name}'"
    if info is None:
        try:
            info = await asyncio.to_thread(rest.file_info, file_id)
        except RestError as exc:
            _log.warning("%s: cannot look up file %s: %s", where, file_id, exc)
            problem = "Mattermost no longer has it" if exc.status == 404 else "its details could not be read"
            return media.refuse(problem, kind="document")
    name = info.name or None
    mime_type = (info.mime_type or "").split(";", 1)[0].strip().lower() or None
    if mime_type is None and name:
        mime_type = mimetypes.guess_type(name, strict=False)[0]
    return await downloads.download(
        media,
        session,
        f"{rest.base}/files/{quote(file_id)}",
        kind=kind_of(mime_type),
        mime_type=mime_type,
        name=name,
        size=info.size,
        headers=rest.auth,
        timeout_s=timeout_s,
        where=where,
    )
