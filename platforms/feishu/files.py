"""Feishu images and files into the media store, through the message resource API with the tenant access token.

A message names its files by key in its ``content``: ``image_key`` for an image, ``file_key`` (and ``file_name``)
for a file, an audio clip or a video, and ``img`` / ``media`` elements for those inside a rich-text post.
:func:`resources_of` lists them; :func:`attach_resources` fetches each with ``GET
/open-apis/im/v1/messages/{message_id}/resources/{key}?type=image|file`` and ``Authorization: Bearer <tenant
access token>`` (the app needs ``im:message`` or ``im:message:readonly``). Feishu serves up to 100 MB this way and
not stickers, which stay stand-ins. The event states no size, so the limit is applied to the answer's
``Content-Length`` before its body is read, and to the bytes as they arrive. A token Feishu refuses
(99991661/99991663/99991664) is replaced once; any other refusal, and every failure, becomes a refused
attachment saying why. The records carry no source URL: the address is useless without the token.
"""

from __future__ import annotations

import logging
import mimetypes
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import quote

import aiohttp
import msgspec

from hermes_actors.media import MediaStore, kind_of
from hermes_actors.messages import Attachment, InboundMessage
from platforms.base import SendError
from platforms.feishu.config import AppKeys
from platforms.support import downloads
from platforms.support.downloads import DownloadFailed

__all__ = ["Resource", "TokenSource", "attach_resources", "resources_of"]

_log = logging.getLogger(__name__)

TokenSource = Callable[[str | None], Awaitable[str]]
"""The app's tenant access token; given one Feishu refused, a fresh one. Raises :class:`SendError`."""

_TOKEN_REFUSED = frozenset({99991661, 99991663, 99991664})
_RATE_LIMITED = frozenset({99991400})


class Resource(msgspec.Struct, frozen=True, kw_only=True):
    """A file of a message: its key, the resource ``type`` to ask for (``image`` or ``file``) and what it is."""

    key: str
    type: str
    kind: str
    name: str | None = None
    mime_type: str | None = None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _resource(key: object, *, image: bool, kind: str | None = None, name: object = None) -> Resource | None:
    found, label = _text(key), _text(name)
    if found is None:
        return None
    if image:
        return Resource(key=found, type="image", kind="image")
    mime = mimetypes.guess_type(label, strict=False)[0] if label else None
    return Resource(key=found, type="file", kind=kind or kind_of(mime), name=label, mime_type=mime)


def resources_of(message_type: str, content: dict[str, Any]) -> list[Resource]:
    """The files a message of ``message_type`` names in its decoded ``content`` (none for text and stickers)."""
    found: list[Resource | None] = []
    if message_type == "image":
        found.append(_resource(content.get("image_key"), image=True))
    elif message_type == "file":
        found.append(_resource(content.get("file_key"), image=False, name=content.get("file_name")))
    elif message_type == "audio":
        found.append(_resource(content.get("file_key"), image=False, kind="audio"))
    elif message_type == "media":
        found.append(_resource(content.get("file_key"), image=False, kind="video", name=content.get("file_name")))
    elif message_type == "post":
        found.extend(_post_resources(content))
    return [resource for resource in found if resource is not None]


def _post_resources(content: dict[str, Any]) -> list[Resource | None]:
    """The ``img`` and ``media`` elements of a rich-text post (possibly wrapped in a locale such as ``zh_cn``)."""
    post = content
    if "content" not in post:
        post = next((v for v in content.values() if isinstance(v, dict) and "content" in v), {})
    rows = post.get("content")
    elements = [e for row in (rows if isinstance(rows, list) else ()) if isinstance(row, list) for e in row]
    found: list[Resource | None] = []
    for element in elements:
        if not isinstance(element, dict):
            continue
        if element.get("tag") == "img":
            found.append(_resource(element.get("image_key"), image=True))
        elif element.get("tag") == "media":
            found.append(_resource(element.get("file_key"), image=False, kind="video", name=element.get("file_name")))
    return found


async def attach_resources(
    inbound: InboundMessage,
    resources: Sequence[Resource],
    *,
    app: AppKeys,
    token: TokenSource,
    media: MediaStore,
    session: aiohttp.ClientSession,
    timeout_s: float,
) -> InboundMessage:
    """``inbound`` with the ``resources`` of its Feishu message downloaded into ``media`` as its attachments."""
    message_id = inbound.source.message_id
    if not resources or message_id is None:
        return inbound
    fetcher = _Fetcher(app, message_id, token, media, session, timeout_s)
    attachments = [await fetcher.attachment(resource) for resource in resources]
    return msgspec.structs.replace(inbound, attachments=(*inbound.attachments, *attachments))


def _code_of(body: bytes) -> tuple[int | None, str]:
    """The ``code`` and ``msg`` of a Feishu error answer, or ``(None, "")`` when it is not one."""
    try:
        answer = msgspec.json.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return None, ""
    if not isinstance(answer, dict):
        return None, ""
    code, msg = answer.get("code"), answer.get("msg")
    return (code if isinstance(code, int) else None), (msg if isinstance(msg, str) else "")


class _Fetcher:
    """The downloads of one message's resources for one app."""

    def __init__(
        self,
        app: AppKeys,
        message_id: str,
        token: TokenSource,
        media: MediaStore,
        session: aiohttp.ClientSession,
        timeout_s: float,
    ) -> None:
        self._app = app
        self._where = f"feishu app '{app.name}'"
        self._message = quote(message_id, safe="")
        self._token = token
        self._media = media
        self._session = session
        self._timeout = timeout_s

    async def attachment(self, resource: Resource) -> Attachment:
        """The record of ``resource``: saved, or refused saying why."""

        def refuse(problem: str, size: int | None = None) -> Attachment:
            return self._media.refuse(
                problem, kind=resource.kind, mime_type=resource.mime_type, name=resource.name, size=size
            )

        problem = self._media.check(resource.kind, None)
        if problem is not None:
            return refuse(problem)
        url = (
            f"{self._app.base_url}/open-apis/im/v1/messages/{self._message}/resources/"
            f"{quote(resource.key, safe='')}?type={resource.type}"
        )
        try:
            fetched = await self._fetch(url)
        except SendError as exc:
            _log.warning("%s: no tenant access token to fetch %s: %s", self._where, resource.key, exc)
            return refuse("the app could not get a Feishu access token to fetch it")
        except DownloadFailed as exc:
            _log.warning("%s: fetching resource %s failed: %s", self._where, resource.key, exc.detail)
            return refuse(_problem(exc), exc.size)
        return await downloads.save(
            self._media,
            fetched.data,
            kind=resource.kind,
            mime_type=resource.mime_type or fetched.content_type,
            name=resource.name,
        )

    async def _fetch(self, url: str) -> downloads.Fetched:
        """Fetch with the app's token; a token Feishu refuses is replaced once."""
        token = await self._token(None)
        limit = self._media.config.max_bytes
        try:
            return await self._fetch_with(url, token, limit)
        except DownloadFailed as exc:
            code, _ = _code_of(exc.body)
            if code not in _TOKEN_REFUSED:
                raise
            _log.info("%s: the tenant access token was refused (code %s); fetching a new one", self._where, code)
        return await self._fetch_with(url, await self._token(token), limit)

    async def _fetch_with(self, url: str, token: str, limit: int) -> downloads.Fetched:
        headers = {"Authorization": f"Bearer {token}"}
        return await downloads.fetch(self._session, url, limit=limit, headers=headers, timeout_s=self._timeout)


def _problem(exc: DownloadFailed) -> str:
    """What to tell people about a failed fetch: Feishu's own code and message when it sent one."""
    code, msg = _code_of(exc.body)
    if code is None:
        return exc.problem
    if code in _RATE_LIMITED:
        return "Feishu asked to slow down; send it again in a minute"
    if code in _TOKEN_REFUSED:
        return "Feishu refused the app's access token; check app_id and app_secret"
    return f"Feishu would not hand it over (code {code}: {msg[:120] or 'no message'})"
