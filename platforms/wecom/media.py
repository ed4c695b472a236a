"""WeCom images, voice, video and files into the media store, through ``GET /cgi-bin/media/get``.

A message names its file by ``MediaId`` (valid three days). WeCom answers with the bytes, or with a JSON error
(``errcode``) and HTTP 200, so an answer whose type is JSON or text is read as one: a refused token (42001, 40014,
40001) is replaced once; any other error, and every failed download, becomes a refused attachment saying why, so
the message's text still runs. The records carry no source URL: the address holds the access token.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from urllib.parse import urlencode

import aiohttp
import msgspec

from hermes_actors.media import MediaStore
from hermes_actors.messages import Attachment, InboundMessage
from platforms.base import SendError
from platforms.support import downloads
from platforms.support.downloads import DownloadFailed
from platforms.wecom.callback import Media
from platforms.wecom.sender import TOKEN_INVALID

__all__ = ["MEDIA_PATH", "TokenSource", "attach_media"]

_log = logging.getLogger(__name__)

MEDIA_PATH = "/cgi-bin/media/get"
TokenSource = Callable[[str | None], Awaitable[str]]
"""The app's access token; given one WeCom refused, a fresh one. Raises :class:`SendError`."""


class _Refusal(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _error_of(fetched: downloads.Fetched) -> tuple[int, str] | None:
    """WeCom's ``(errcode, errmsg)`` when the answer is a JSON error instead of the file."""
    if fetched.content_type not in (None, "application/json", "text/plain") or len(fetched.data) > 4096:
        return None
    try:
        answer = msgspec.json.decode(fetched.data)
    except (msgspec.DecodeError, RecursionError):
        return None
    if not isinstance(answer, dict) or not isinstance(answer.get("errcode"), int):
        return None
    return int(answer["errcode"]), str(answer.get("errmsg", ""))[:120]


async def attach_media(
    inbound: InboundMessage,
    media: Media,
    *,
    base_url: str,
    token: TokenSource,
    store: MediaStore,
    session: aiohttp.ClientSession,
    timeout_s: float,
) -> InboundMessage:
    """``inbound`` with the file ``media`` names downloaded into ``store`` as its attachment."""
    attachment = await _attachment(media, base_url, token, store, session, timeout_s)
    return msgspec.structs.replace(inbound, attachments=(*inbound.attachments, attachment))


async def _attachment(
    media: Media, base_url: str, token: TokenSource, store: MediaStore, session: aiohttp.ClientSession, timeout_s: float
) -> Attachment:
    def refuse(problem: str, size: int | None = None) -> Attachment:
        return store.refuse(problem, kind=media.kind, name=media.name, size=size)

    problem = store.check(media.kind, None)
    if problem is not None:
        return refuse(problem)
    refused: str | None = None
    try:
        for _ in range(2):
            current = await token(refused)
            url = f"{base_url}{MEDIA_PATH}?{urlencode({'access_token': current, 'media_id': media.media_id})}"
            fetched = await downloads.fetch(session, url, limit=store.config.max_bytes, timeout_s=timeout_s)
            error = _error_of(fetched)
            if error is None:
                return await downloads.save(
                    store, fetched.data, kind=media.kind, mime_type=fetched.content_type, name=media.name
                )
            if error[0] not in TOKEN_INVALID or refused is not None:
                raise _Refusal(*error)
            _log.info("wecom: the access token was refused fetching media (errcode %s); fetching a new one", error[0])
            refused = current
    except SendError as exc:
        _log.warning("wecom: no access token to fetch media %s: %s", media.media_id[:40], exc)
        return refuse("the app could not get a WeCom access token to fetch it")
    except DownloadFailed as exc:
        _log.warning("wecom: fetching media %s failed: %s", media.media_id[:40], exc.detail)
        return refuse(exc.problem, exc.size)
    except _Refusal as exc:
        _log.warning("wecom: media %s refused: errcode %s (%s)", media.media_id[:40], exc.code, exc)
        return refuse(f"WeCom would not hand it over (errcode {exc.code}: {exc or 'no message'})")
    return refuse("WeCom kept refusing the app's access token")  # pragma: no cover - the loop returns or raises
