"""Telegram photos and documents into the media store: ``getFile``, then a bounded download of its ``file_path``.

This is the download path other adapters copy: learn the size as early as the platform says it (the update's
``file_size``, then ``getFile``'s), refuse a file over ``media.max_bytes`` before fetching it, stop reading once
the body passes the limit, and hand the bytes to :meth:`MediaStore.save` off the event loop. Every failure
(Telegram refusing ``getFile``, a file over the Bot API's 20 MB download limit, a broken download) becomes a
refused attachment saying why, so the message's text still runs and the reply names what could not be read.
The download URL holds the bot token, so it is never stored: the records carry no source URL.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import aiohttp
import msgspec

from hermes_actors.media import MediaStore, format_size
from hermes_actors.messages import Attachment, InboundMessage
from platforms.telegram.api import BotApi, BotApiError, read_answer, result_as
from platforms.telegram.updates import TelegramFile

__all__ = ["attach_files"]

_log = logging.getLogger(__name__)

_CHUNK = 64 * 1024


class _File(msgspec.Struct, frozen=True, kw_only=True):
    """The ``File`` object ``getFile`` answers with."""

    file_id: str
    file_path: str | None = None
    file_size: int | None = None


async def attach_files(
    inbound: InboundMessage,
    files: Sequence[TelegramFile],
    *,
    bot: BotApi,
    media: MediaStore,
    session: aiohttp.ClientSession,
    timeout_s: float,
) -> InboundMessage:
    """``inbound`` with ``files`` downloaded into ``media`` as its attachments (refused ones saying why)."""
    if not files:
        return inbound
    attachments = [await _fetch(file, bot=bot, media=media, session=session, timeout_s=timeout_s) for file in files]
    return msgspec.structs.replace(inbound, attachments=(*inbound.attachments, *attachments))


def _file_url(bot: BotApi, file_path: str) -> str:
    """Where a file is downloaded: ``{base}/file/bot{token}/{file_path}`` beside ``{base}/bot{token}/{method}``."""
    base, _, token = bot.url("").rpartition("/bot")  # a token has no "/": the last "/bot" starts it
    return f"{base}/file/bot{token}{file_path.lstrip('/')}"


async def _fetch(
    file: TelegramFile, *, bot: BotApi, media: MediaStore, session: aiohttp.ClientSession, timeout_s: float
) -> Attachment:
    def refuse(problem: str, size: int | None = file.size) -> Attachment:
        return media.refuse(problem, kind=file.kind, mime_type=file.mime_type, name=file.name, size=size)

    problem = media.check(file.kind, file.size)
    if problem is not None:
        return refuse(problem)
    where = f"telegram bot '{bot.name}': getFile"
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout_s, sock_read=timeout_s)
    try:
        async with session.post(bot.url("getFile"), json={"file_id": file.file_id}, timeout=timeout) as response:
            body = await response.read()
            headers = {k.lower(): v for k, v in response.headers.items()}
            info = result_as(read_answer(response.status, headers, body, where), _File, where)
    except BotApiError as exc:
        _log.warning("%s for %s failed: %s", where, file.name or file.kind, exc)
        return refuse(f"Telegram did not hand it over ({exc.description})")
    except (aiohttp.ClientError, TimeoutError) as exc:
        _log.warning("%s for %s failed: %s", where, file.name or file.kind, bot.redact(str(exc) or type(exc).__name__))
        return refuse("Telegram could not be reached to fetch it")
    if info is None or not info.file_path:
        return refuse("Telegram gave no download for it (bots can fetch files up to 20 MB)")
    size = info.file_size if info.file_size is not None else file.size
    problem = media.check(file.kind, size)
    if problem is not None:
        return refuse(problem, size)
    limit = media.config.max_bytes
    try:
        async with session.get(_file_url(bot, info.file_path), timeout=timeout) as response:
            if response.status != 200:
                return refuse(f"its download failed (HTTP {response.status})", size)
            data = bytearray()
            async for chunk in response.content.iter_chunked(_CHUNK):
                data += chunk
                if len(data) > limit:
                    return refuse(f"it is over the {format_size(limit)} limit", None)
    except (aiohttp.ClientError, TimeoutError) as exc:
        _log.warning(
            "telegram bot %r: downloading %s failed: %s", bot.name, file.name or file.kind, bot.redact(str(exc))
        )
        return refuse("its download broke off", size)
    return await asyncio.to_thread(media.save, bytes(data), kind=file.kind, mime_type=file.mime_type, name=file.name)
