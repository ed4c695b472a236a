"""Slack files into the media store: each ``files[]`` entry of a message event, fetched with the app's bot token.

A file object carries its ``size``, ``mimetype``, ``name`` and ``url_private_download``; the size is checked against
``media.max_bytes`` before anything is fetched, and the download is a GET of that URL with ``Authorization: Bearer
<bot token>`` (the app needs the ``files:read`` scope). Slack answers a download it does not authorise with its
sign-in page (HTTP 200, HTML) rather than an error, so an HTML answer for a file that is not HTML is refused with
that fix. The token goes only to ``https://slack.com`` and its subdomains, or to the host of ``api_base_url``. An
event with many files may carry only a file's ``id`` (``file_access: check_file_info``): ``files.info`` then gives
the rest. A file's URL is fetched through the section's fetch policy (Slack's hosts at public addresses, redirects
included); ``files.info`` goes to the configured API. A file Slack does not host (``external``), a deleted one
(``tombstone``) and one hidden by a free workspace's storage limit are refused saying so. The records carry no source
URL: a private URL is useless without the token.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from urllib.parse import quote, urlsplit

import aiohttp
import msgspec

from hermes_actors.media import MediaStore, kind_of
from hermes_actors.messages import Attachment, InboundMessage
from platforms.support import downloads
from platforms.support.downloads import DownloadFailed, Fetched
from platforms.support.fetch_policy import FetchPolicy
from platforms.support.http_client import open_session

__all__ = ["SlackFile", "attach_files", "downloadable"]

_log = logging.getLogger(__name__)

_INFO_BYTES = 256 * 1024  # a files.info answer: the file object with its previews' URLs
_NOT_HOSTED = {
    "external": "it is an external file that Slack only links to; open it where it is kept",
    "tombstone": "it was deleted",
    "hidden_by_limit": "it is hidden by the workspace's file storage limit",
}
_INFO_HINTS = {
    "file_not_found": "Slack does not know it any more (deleted, or the app cannot see it)",
    "file_deleted": "it was deleted",
    "missing_scope": "the app lacks the files:read scope; add it and reinstall the app",
    "not_authed": "no bot token was sent; check the app's bot_token",
    "invalid_auth": "the bot token is not valid; check the app's bot_token",
    "token_revoked": "the bot token was revoked; reinstall the app and update bot_token",
    "ratelimited": "Slack asked to slow down; send it again in a minute",
}
_NO_ADDRESS = "Slack gave no download address for it"
_SIGN_IN = (
    "Slack answered with its sign-in page instead of the file; give the app the files:read scope and reinstall it"
)


class SlackFile(msgspec.Struct, frozen=True, kw_only=True):
    """A file object of a message event or of ``files.info`` (the fields used)."""

    id: str | None = None
    name: str | None = None
    title: str | None = None
    mimetype: str | None = None
    size: int | None = None
    mode: str | None = None
    file_access: str | None = None
    url_private: str | None = None
    url_private_download: str | None = None

    @property
    def url(self) -> str | None:
        """Where its bytes are: the download URL, else the private one."""
        return self.url_private_download or self.url_private


class _Info(msgspec.Struct, frozen=True, kw_only=True):
    ok: bool = False
    error: str | None = None
    file: SlackFile | None = None


_decode_info = msgspec.json.Decoder(_Info).decode


def downloadable(file: SlackFile) -> bool:
    """Whether ``file`` can become an attachment: it has a URL, or an id ``files.info`` can look up."""
    return bool(file.url or file.id)


def _trusted(url: str, api_base_url: str) -> bool:
    """Whether the bot token may go to ``url``: Slack over HTTPS, or the configured API host (a test server)."""
    parts, api = urlsplit(url), urlsplit(api_base_url)
    host = (parts.hostname or "").lower()
    if parts.scheme == "https" and (host == "slack.com" or host.endswith(".slack.com")):
        return True
    try:
        return host != "" and (parts.scheme, host, parts.port) == (api.scheme, api.hostname, api.port)
    except ValueError:  # a port out of range
        return False


async def attach_files(
    inbound: InboundMessage,
    files: Sequence[SlackFile],
    *,
    app_name: str,
    bot_token: str,
    api_base_url: str,
    media: MediaStore,
    session: aiohttp.ClientSession,
    fetch: FetchPolicy,
    timeout_s: float,
) -> InboundMessage:
    """``inbound`` with ``files`` downloaded into ``media`` as its attachments (refused ones saying why).

    ``session`` calls the API (``files.info``); the files themselves are fetched as ``fetch`` allows.
    """
    wanted = [file for file in files if downloadable(file)]
    if not wanted:
        return inbound
    async with open_session(fetch) as guarded:
        fetcher = _Fetcher(app_name, bot_token, api_base_url.rstrip("/"), media, (session, guarded), timeout_s)
        attachments = [await fetcher.attachment(file) for file in wanted]
    return msgspec.structs.replace(inbound, attachments=(*inbound.attachments, *attachments))


class _Fetcher:
    """The downloads of one event's files for one app."""

    def __init__(
        self,
        app_name: str,
        bot_token: str,
        api_base_url: str,
        media: MediaStore,
        sessions: tuple[aiohttp.ClientSession, aiohttp.ClientSession],
        timeout_s: float,
    ) -> None:
        self._where = f"slack app '{app_name}'"
        self._headers = {"Authorization": f"Bearer {bot_token}"}
        self._api = api_base_url
        self._media = media
        self._session, self._guarded = sessions  # the API's, and the fetch policy's for the files
        self._timeout = timeout_s

    async def attachment(self, file: SlackFile) -> Attachment:
        """The record of ``file``: saved, or refused saying why."""
        if file.url is None and file.id is not None and file.mode not in _NOT_HOSTED:
            looked_up = await self._info(file)
            if isinstance(looked_up, Attachment):
                return looked_up
            file = looked_up
        kind = kind_of(file.mimetype)
        name = file.name or file.title or None
        url = file.url
        problem = self._refusal(file, name)
        if problem is not None or url is None:
            refused = problem or _NO_ADDRESS
            return self._media.refuse(refused, kind=kind, mime_type=file.mimetype, name=name, size=file.size)
        expected = (file.mimetype or "").lower()

        def check(fetched: Fetched) -> str | None:
            return _SIGN_IN if fetched.content_type == "text/html" and expected != "text/html" else None

        return await downloads.download(
            self._media,
            self._guarded,
            url,
            kind=kind,
            mime_type=file.mimetype,
            name=name,
            size=file.size,
            headers=self._headers,
            timeout_s=self._timeout,
            check=check,
            where=self._where,
        )

    def _refusal(self, file: SlackFile, name: str | None) -> str | None:
        """Why ``file`` is not fetched (not hosted by Slack, no address, an address the token may not go to)."""
        not_hosted = _NOT_HOSTED.get(file.mode or "")
        if not_hosted is not None:
            return not_hosted
        if file.url is None:
            return _NO_ADDRESS
        if not _trusted(file.url, self._api):
            _log.warning("%s: %s is offered outside slack.com; the bot token is not sent there", self._where, name)
            return "Slack offered it from an address outside slack.com, where the bot token is not sent"
        return None

    async def _info(self, file: SlackFile) -> SlackFile | Attachment:
        """``files.info`` for a file the event named only by id; a refused record when Slack does not answer it."""
        kind = kind_of(file.mimetype)

        def refuse(problem: str) -> Attachment:
            return self._media.refuse(problem, kind=kind, mime_type=file.mimetype, name=file.name, size=file.size)

        url = f"{self._api}/files.info?file={quote(file.id or '', safe='')}"
        try:
            fetched = await downloads.fetch(
                self._session, url, limit=_INFO_BYTES, headers=self._headers, timeout_s=self._timeout
            )
            info = _decode_info(fetched.data)
        except DownloadFailed as exc:
            _log.warning("%s: files.info for %s failed: %s", self._where, file.id, exc.detail)
            return refuse("Slack could not be asked for it")
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            _log.warning("%s: files.info for %s answered something else: %s", self._where, file.id, exc)
            return refuse("Slack's answer about it could not be read")
        if not info.ok or info.file is None:
            code = (info.error or "no error code")[:80]
            _log.warning("%s: files.info for %s answered %r", self._where, file.id, code)
            return refuse(_INFO_HINTS.get(code, f"Slack would not describe it ({code})"))
        return info.file
