"""One account's client-server API: ``{homeserver}/_matrix/client/v3/...`` with its access token.

The poller calls it asynchronously (``/sync`` long polls, joins, backfill pages, member lists) on its event loop;
the sender calls :meth:`Homeserver.put` (and :meth:`Homeserver.upload` for a reply's file) from the outbox thread.
Files are fetched from the authenticated media API (:meth:`Homeserver.media_url`, Matrix 1.11), with the same
token. The token travels in the ``Authorization`` header, never in a URL, so nothing logged can hold it. Every
failure is an :class:`~platforms.matrix.wire.ApiError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
import msgspec
from yarl import URL

from platforms.matrix.wire import ApiError, api_error
from platforms.support import http_client

__all__ = ["CLIENT_PREFIX", "MEDIA_PREFIX", "UPLOAD_PATH", "Account", "Homeserver", "room_path"]

CLIENT_PREFIX = "/_matrix/client/v3"
MEDIA_PREFIX = "/_matrix/client/v1/media"
UPLOAD_PATH = "/_matrix/media/v3/upload"  # uploads stay on the media API (Matrix 1.11 moved downloads only)
_MAX_ANSWER_BYTES = 64 * 1024 * 1024


def room_path(room_id: str, *rest: str) -> str:
    """``/rooms/{roomId}/...`` with every segment percent-encoded (room ids hold ``!`` and ``:``)."""
    return "/rooms/" + "/".join(quote(part, safe="") for part in (room_id, *rest))


class Homeserver:
    """The API of account ``name``: ``base_url`` (the homeserver) and ``token`` (its access token)."""

    def __init__(self, name: str, base_url: str, token: str, *, timeout_s: float) -> None:
        self.name = name
        self.base_url = base_url.rstrip("/")
        self._token = token
        self._timeout = timeout_s

    def url(self, path: str, query: Mapping[str, str] | None = None) -> str:
        """The URL of API ``path`` (``/sync``) with ``query``."""
        suffix = f"?{urlencode(query)}" if query else ""
        return f"{self.base_url}{CLIENT_PREFIX}{path}{suffix}"

    def media_url(self, server_name: str, media_id: str) -> str:
        """Where the file ``mxc://{server_name}/{media_id}`` is downloaded (both parts percent-encoded)."""
        parts = "/".join(quote(part, safe="") for part in (server_name, media_id))
        return f"{self.base_url}{MEDIA_PREFIX}/download/{parts}"

    def headers(self) -> dict[str, str]:
        """The ``Authorization`` header of every request (it holds the token: never log it)."""
        return {"Authorization": f"Bearer {self._token}"}

    async def call(
        self,
        session: aiohttp.ClientSession,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        timeout: float | None = None,
    ) -> bytes:
        """One request from the poller's event loop; the body of a 2xx answer, else :class:`ApiError`."""
        where = f"matrix account '{self.name}': {method} {path.split('?')[0]}"
        limit = aiohttp.ClientTimeout(total=timeout or self._timeout)
        try:
            # encoded=True: the path is sent as built, so ids stay percent-encoded exactly as room_path made them.
            url = URL(self.url(path, query), encoded=True)
            async with session.request(method, url, json=body, headers=self.headers(), timeout=limit) as response:
                data = await response.read()
                headers = {k.lower(): v for k, v in response.headers.items()}
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ApiError(f"{where}: no answer ({exc or type(exc).__name__})") from None
        if len(data) > _MAX_ANSWER_BYTES:
            raise ApiError(f"{where}: the answer is larger than {_MAX_ANSWER_BYTES} bytes", status=status)
        if not 200 <= status < 300:
            raise api_error(status, headers, data, where)
        return data

    def put(self, path: str, body: Any, *, what: str) -> bytes:
        """A blocking ``PUT`` (sends from the outbox thread); the body of a 2xx answer, else :class:`ApiError`."""
        try:
            result = http_client.request(
                "PUT", self.url(path), json_body=body, headers=self.headers(), timeout=self._timeout
            )
        except http_client.HttpError as exc:
            unknown = isinstance(exc, http_client.NoAnswer)
            raise ApiError(f"{what}: {exc}", outcome_unknown=unknown) from None
        if not 200 <= result.status < 300:
            raise api_error(result.status, result.headers, result.body, what)
        return result.body

    def upload(self, name: str, mime_type: str, data: bytes, *, what: str) -> str:
        """A blocking ``POST /_matrix/media/v3/upload`` of a file; its ``mxc://`` URI, else :class:`ApiError`."""
        url = f"{self.base_url}{UPLOAD_PATH}?{urlencode({'filename': name})}"
        headers = self.headers() | {"Content-Type": mime_type}
        try:
            result = http_client.request("POST", url, body=data, headers=headers, timeout=self._timeout)
        except http_client.HttpError as exc:
            raise ApiError(f"{what}: {exc}", outcome_unknown=isinstance(exc, http_client.NoAnswer)) from None
        if not 200 <= result.status < 300:
            raise api_error(result.status, result.headers, result.body, what)
        try:
            uri = msgspec.json.decode(result.body, type=_Uploaded).content_uri
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise ApiError(f"{what}: the upload was answered without a content_uri", status=result.status) from None
        if not uri.startswith("mxc://"):
            raise ApiError(
                f"{what}: the upload was answered with {uri[:100]!r}, not an mxc:// URI", status=result.status
            )
        return uri


class _Uploaded(msgspec.Struct, frozen=True, kw_only=True):
    content_uri: str


class Account(msgspec.Struct, frozen=True, kw_only=True):
    """One account as the poller sees it."""

    name: str
    api: Homeserver
    auto_join: bool = True
