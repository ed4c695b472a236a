"""DingTalk pictures, files, audio and video into the media store, by the ``downloadCode`` a callback carries.

``POST /v1.0/robot/messageFiles/download`` with ``{"downloadCode", "robotCode"}`` and the robot's access token
(header ``x-acs-dingtalk-access-token``) answers ``{"downloadUrl"}``: a short-lived address that needs no
credentials, fetched within ``media.max_bytes`` through the section's fetch policy (DingTalk names no download
hosts: any public host, never an address inside the network unless ``fetch.allow_private`` says so). A token
DingTalk refuses (HTTP 401) is replaced once; every other failure becomes a refused attachment saying why, so the
message's text still runs. The records carry no source URL (the download address is a capability).
"""

from __future__ import annotations

import logging
import mimetypes
from collections.abc import Awaitable, Callable

import aiohttp
import msgspec

from hermes_actors.media import MediaStore, kind_of
from hermes_actors.messages import Attachment, InboundMessage
from platforms.base import SendError
from platforms.dingtalk.callback import FileRef
from platforms.support import downloads
from platforms.support.downloads import DownloadFailed
from platforms.support.fetch_policy import FetchPolicy
from platforms.support.http_client import open_session

__all__ = ["DOWNLOAD_PATH", "TokenSource", "attach_files"]

_log = logging.getLogger(__name__)

DOWNLOAD_PATH = "/v1.0/robot/messageFiles/download"
TokenSource = Callable[[str | None], Awaitable[str]]
"""The robot's access token; given one DingTalk refused, a fresh one. Raises :class:`SendError`."""


class _Located(msgspec.Struct, frozen=True):
    downloadUrl: str


class _Error(msgspec.Struct, frozen=True):
    code: str = ""
    message: str = ""


def _refusal(status: int, data: bytes) -> str:
    """What to tell people about a refused download: DingTalk's own code and message when it sent them."""
    try:
        error = msgspec.json.decode(data, type=_Error)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return f"DingTalk would not hand it over (HTTP {status})"
    return f"DingTalk would not hand it over ({error.code[:60] or status}: {error.message[:120] or 'no message'})"


async def attach_files(
    inbound: InboundMessage,
    files: tuple[FileRef, ...],
    *,
    api_base_url: str,
    robot_code: str,
    token: TokenSource,
    media: MediaStore,
    session: aiohttp.ClientSession,
    fetch: FetchPolicy,
    timeout_s: float,
) -> InboundMessage:
    """``inbound`` with ``files`` downloaded into ``media`` as its attachments.

    ``session`` asks DingTalk where each file is; the file itself is fetched as ``fetch`` allows.
    """
    found = []
    async with open_session(fetch) as guarded:
        for file in files:
            found.append(await _attachment(file, api_base_url, robot_code, token, media, (session, guarded), timeout_s))
    return msgspec.structs.replace(inbound, attachments=(*inbound.attachments, *found))


async def _attachment(
    file: FileRef,
    api_base_url: str,
    robot_code: str,
    token: TokenSource,
    media: MediaStore,
    sessions: tuple[aiohttp.ClientSession, aiohttp.ClientSession],
    timeout_s: float,
) -> Attachment:
    api, guarded = sessions
    mime = mimetypes.guess_type(file.name, strict=False)[0] if file.name else None
    kind = kind_of(mime) if file.kind == "document" and mime else file.kind

    def refuse(problem: str, size: int | None = None) -> Attachment:
        return media.refuse(problem, kind=kind, mime_type=mime, name=file.name, size=size)

    problem = media.check(kind, None)
    if problem is not None:
        return refuse(problem)
    try:
        url = await _locate(file, api_base_url, robot_code, token, api, timeout_s)
        fetched = await downloads.fetch(guarded, url, limit=media.config.max_bytes, timeout_s=timeout_s)
    except SendError as exc:
        _log.warning("dingtalk: no access token to fetch a file: %s", exc)
        return refuse("the robot could not get a DingTalk access token to fetch it")
    except DownloadFailed as exc:
        _log.warning("dingtalk: fetching a file failed: %s", exc.detail)
        return refuse(exc.problem, exc.size)
    return await downloads.save(media, fetched.data, kind=kind, mime_type=mime or fetched.content_type, name=file.name)


async def _locate(
    file: FileRef,
    api_base_url: str,
    robot_code: str,
    token: TokenSource,
    session: aiohttp.ClientSession,
    timeout_s: float,
) -> str:
    """The file's ``downloadUrl``; :class:`DownloadFailed` saying why there is none."""
    body = {"downloadCode": file.download_code, "robotCode": robot_code}
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    refused: str | None = None
    for _ in range(2):
        current = await token(refused)
        headers = {"x-acs-dingtalk-access-token": current}
        try:
            async with session.post(
                api_base_url + DOWNLOAD_PATH, json=body, headers=headers, timeout=timeout
            ) as answer:
                status, data = answer.status, await answer.content.read(64 * 1024)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise DownloadFailed(
                "DingTalk could not be reached to locate it", detail=f"{DOWNLOAD_PATH}: {exc}"
            ) from exc
        if status == 401 and refused is None:
            _log.info("dingtalk: the access token was refused locating a file; fetching a new one")
            refused = current
            continue
        if status != 200:
            raise DownloadFailed(_refusal(status, data), status=status, body=data, detail=repr(data[:200]))
        try:
            return msgspec.json.decode(data, type=_Located).downloadUrl
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise DownloadFailed("DingTalk's answer named no download address", detail=repr(data[:200])) from None
    raise DownloadFailed("DingTalk kept refusing the robot's access token")
