"""Bounded downloads of attachments into the media store, for adapters that serve or poll on an aiohttp loop.

Every adapter that fetches a user's file has the same duty (the Telegram adapter set the pattern): learn the size
as early as the platform says it and refuse a file over ``media.max_bytes`` before fetching it; refuse again on
the response's ``Content-Length``; stop reading once the body passes the limit; save the bytes off the event
loop; and turn every failure into a refused attachment that says why, so the message's text still runs and the
reply names what could not be read. :func:`fetch` is the bounded request (also for a platform's small JSON
lookups), :func:`save` the write into the media store, and :func:`download` both, for a file whose URL and
credentials are known.

Credentials travel in headers, never in the records: attachments made here carry no source URL (a platform's
download address is useless without its token, and some hold a signed capability). Redirects are followed the
way aiohttp does, which drops ``Authorization`` when one leads to another origin. A URL a payload names is
fetched through a session of :func:`platforms.support.http_client.open_session`; what its policy refuses
becomes a refused attachment that says why, like any other failure.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

import aiohttp
import msgspec

from hermes_actors.errors import PlatformError
from hermes_actors.media import MediaStore, format_size
from hermes_actors.messages import Attachment
from platforms.support.fetch_policy import FetchRefused
from platforms.support.http_client import shown

__all__ = ["DownloadFailed", "Fetched", "download", "fetch", "save"]

_log = logging.getLogger(__name__)

_CHUNK = 64 * 1024
_ERROR_BODY_BYTES = 4096  # enough for any platform's JSON error answer


class Fetched(msgspec.Struct, frozen=True, kw_only=True):
    """A complete 2xx answer: its body, its headers and its media type (lower case, without parameters;
    ``None`` when the server named none or only ``application/octet-stream``)."""

    data: bytes
    content_type: str | None
    headers: dict[str, str]  # lower-cased names


class DownloadFailed(PlatformError):
    """A request that did not give the file.

    ``problem`` completes "I could not read X: " for people. ``status`` and ``body`` (the start of the answer)
    are set when the server answered with a non-2xx status, so a platform can read its own error format.
    ``too_large`` is set when the file passed the limit, and ``size`` too when the server said how large it is.
    ``detail`` is for logs.
    """

    def __init__(
        self,
        problem: str,
        *,
        status: int | None = None,
        body: bytes = b"",
        size: int | None = None,
        too_large: bool = False,
        detail: str | None = None,
    ) -> None:
        super().__init__(problem)
        self.problem = problem
        self.status = status
        self.body = body
        self.size = size
        self.too_large = too_large or size is not None
        self.detail = detail or problem


def _declared_size(response: aiohttp.ClientResponse) -> int | None:
    """The body's size from ``Content-Length``, unless it is encoded (then the decoded size is not known)."""
    if response.headers.get("Content-Encoding", "identity").lower() != "identity":
        return None
    return response.content_length


def _over(limit: int, size: int | None = None) -> str:
    if size is None:
        return f"it is over the {format_size(limit)} limit"
    return f"it is {format_size(size)}, over the {format_size(limit)} limit"


def _media_type(header: str | None) -> str | None:
    """``image/png`` of ``image/png; charset=binary``; ``None`` for none or the say-nothing ``octet-stream``."""
    media_type = (header or "").split(";", 1)[0].strip().lower()
    return media_type if media_type and media_type != "application/octet-stream" else None


def _failure(exc: BaseException, url: str) -> DownloadFailed:
    """The :class:`DownloadFailed` for a transport error; its detail names the address without its query."""
    text = (str(exc) or type(exc).__name__).replace(url, shown(url))
    detail = f"{type(exc).__name__}: {text}"
    if isinstance(exc, TimeoutError):
        return DownloadFailed("its download timed out", detail=detail)
    if isinstance(exc, aiohttp.ClientConnectorError | aiohttp.InvalidURL):
        return DownloadFailed("the server holding it could not be reached", detail=detail)
    return DownloadFailed("its download broke off", detail=detail)


async def fetch(
    session: aiohttp.ClientSession,
    url: str,
    *,
    limit: int,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
) -> Fetched:
    """GET ``url`` and read at most ``limit`` bytes of its body; raise :class:`DownloadFailed` otherwise.

    A ``Content-Length`` over ``limit`` is refused before the body is read; a body without one is read until it
    passes ``limit``. ``timeout_s`` bounds connecting and each wait for more bytes.
    """
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout_s, sock_read=timeout_s)
    try:
        async with session.get(url, headers=dict(headers or {}), timeout=timeout) as response:
            if not 200 <= response.status < 300:
                body = await response.content.read(_ERROR_BODY_BYTES)
                raise DownloadFailed(
                    f"its download failed (HTTP {response.status})",
                    status=response.status,
                    body=body,
                    detail=f"GET {shown(url)} answered HTTP {response.status}: {body[:300]!r}",
                )
            declared = _declared_size(response)
            if declared is not None and declared > limit:
                raise DownloadFailed(_over(limit, declared), size=declared)
            data = bytearray()
            async for chunk in response.content.iter_chunked(_CHUNK):
                data += chunk
                if len(data) > limit:
                    raise DownloadFailed(_over(limit), too_large=True)
            return Fetched(
                data=bytes(data),
                content_type=_media_type(response.headers.get("Content-Type")),
                headers={name.lower(): value for name, value in response.headers.items()},
            )
    except FetchRefused as exc:
        raise DownloadFailed(exc.problem, detail=f"refused by the fetch policy: {exc}") from exc
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise _failure(exc, url) from exc


async def save(
    media: MediaStore, data: bytes, *, kind: str, mime_type: str | None = None, name: str | None = None
) -> Attachment:
    """:meth:`MediaStore.save` ``data`` on a worker thread: the write is fsynced, and a describe step may be slow."""
    return await asyncio.to_thread(media.save, data, kind=kind, mime_type=mime_type, name=name)


async def download(
    media: MediaStore,
    session: aiohttp.ClientSession,
    url: str,
    *,
    kind: str,
    mime_type: str | None = None,
    name: str | None = None,
    size: int | None = None,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
    check: Callable[[Fetched], str | None] | None = None,
    where: str = "download",
) -> Attachment:
    """Fetch ``url`` into ``media`` as an attachment of ``kind``; never raises for the file's sake.

    ``size`` (when the platform said it) is checked against the limits before anything is fetched. ``check``
    looks at the answer before it is saved and returns a problem (such as a sign-in page instead of a file) or
    ``None``. Without ``mime_type`` the answer's ``Content-Type`` is used. Every failure is a refused record
    that says why, and a warning naming ``where``.
    """

    def refuse(problem: str, known: int | None = size) -> Attachment:
        return media.refuse(problem, kind=kind, mime_type=mime_type, name=name, size=known)

    problem = media.check(kind, size)
    if problem is not None:
        return refuse(problem)
    try:
        fetched = await fetch(session, url, limit=media.config.max_bytes, headers=headers, timeout_s=timeout_s)
    except DownloadFailed as exc:
        _log.warning("%s: fetching %s from %s failed: %s", where, name or kind, shown(url), exc.detail)
        return refuse(exc.problem, None if exc.too_large and exc.size is None else exc.size or size)
    problem = check(fetched) if check is not None else None
    if problem is not None:
        _log.warning("%s: %s from %s was not read: %s", where, name or kind, shown(url), problem)
        return refuse(problem, len(fetched.data))
    return await save(media, fetched.data, kind=kind, mime_type=mime_type or fetched.content_type, name=name)
