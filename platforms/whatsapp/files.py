"""WhatsApp media into the media store: look the media id up on the Graph API, then fetch its URL with the token.

An image, audio, video or document message names its file by a media ``id``. ``GET
{graph_base_url}/{version}/{id}?phone_number_id=<our number>`` with ``Authorization: Bearer <access token>`` answers
``{"url", "mime_type", "sha256", "file_size", "id"}`` (``phone_number_id`` makes Meta check the media belongs to the
number); the ``url`` is valid for five minutes and is fetched with the same Bearer token. The size is checked against
``media.max_bytes`` from ``file_size`` before the download starts, and again as bytes arrive. The token goes only
over HTTPS or to the configured Graph host, and the ``url`` is fetched only through the section's fetch policy
(Meta's media hosts at public addresses, redirects included). A ``sha256`` that does not match the bytes is logged,
not refused (Meta documents no encoding for it). Stickers stay stand-ins. Every failure becomes a refused attachment
saying why; the records carry no source URL (the URL is a short-lived capability).
"""

from __future__ import annotations

import base64
import binascii
import logging
from urllib.parse import quote, urlsplit

import aiohttp
import msgspec

from hermes_actors.media import MediaStore
from hermes_actors.messages import Attachment, InboundMessage
from platforms.support import downloads
from platforms.support.downloads import DownloadFailed
from platforms.support.fetch_policy import FetchPolicy
from platforms.support.http_client import open_session
from platforms.whatsapp.config import NumberKeys

__all__ = ["MediaRef", "attach_media"]

_log = logging.getLogger(__name__)

_LOOKUP_BYTES = 64 * 1024
_HINTS = {
    190: "the number's access token has expired or was revoked; set a new access_token",
    10: "the access token lacks the whatsapp_business_messaging permission",
    100: "WhatsApp no longer has it (media stay downloadable for 30 days)",
}


class MediaRef(msgspec.Struct, frozen=True, kw_only=True):
    """A media message's file: its media id, kind, type and file name as the webhook gave them."""

    media_id: str
    kind: str
    mime_type: str | None = None
    name: str | None = None
    sha256: str | None = None  # as the webhook stated it


class _Info(msgspec.Struct, frozen=True, kw_only=True):
    """The Graph API's answer for a media id."""

    url: str
    mime_type: str | None = None
    sha256: str | None = None
    file_size: int | str | None = None


class _GraphError(msgspec.Struct, frozen=True, kw_only=True):
    message: str = ""
    code: int | None = None


class _ErrorBody(msgspec.Struct, frozen=True, kw_only=True):
    error: _GraphError


def _size(value: int | str | None) -> int | None:
    """``file_size`` as a number (Meta has sent it as a number and as a string of digits)."""
    if isinstance(value, int):
        return value if value >= 0 else None
    return int(value) if isinstance(value, str) and value.isdigit() else None


def _digest_of(stated: str | None) -> bytes | None:
    """The 32 bytes of a stated SHA-256, written in hex or base64; ``None`` when it is neither."""
    text = (stated or "").strip()
    try:
        raw = bytes.fromhex(text) if len(text) == 64 else base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error):
        return None
    return raw if len(raw) == 32 else None


def _problem(exc: DownloadFailed) -> str:
    """What to tell people about a failed lookup: the Graph API's error when it sent one."""
    try:
        error = msgspec.json.decode(exc.body, type=_ErrorBody).error
    except (msgspec.DecodeError, RecursionError):
        return f"WhatsApp did not hand it over (HTTP {exc.status})"
    hint = _HINTS.get(error.code or -1)
    return hint or f"WhatsApp would not hand it over (error {error.code}: {error.message[:120]})"


def _trusted(url: str, graph_base: str) -> bool:
    """Whether the access token may go to ``url``: anywhere over HTTPS (Meta's CDN), or the configured Graph host."""
    parts, graph = urlsplit(url), urlsplit(graph_base)
    try:
        same_host = (parts.scheme, parts.hostname, parts.port) == (graph.scheme, graph.hostname, graph.port)
    except ValueError:  # a port out of range
        return False
    return bool(parts.hostname) and (parts.scheme == "https" or same_host)


async def attach_media(
    inbound: InboundMessage,
    ref: MediaRef,
    *,
    number: NumberKeys,
    graph_base: str,
    graph_version: str,
    media: MediaStore,
    session: aiohttp.ClientSession,
    fetch: FetchPolicy,
    timeout_s: float,
) -> InboundMessage:
    """``inbound`` with the file of ``ref`` downloaded into ``media`` as its attachment (refused saying why).

    ``session`` asks the Graph API about the media; the URL it answers with is fetched as ``fetch`` allows.
    """
    async with open_session(fetch) as guarded:
        attachment = await _fetch(
            ref,
            number=number,
            graph_base=graph_base,
            graph_version=graph_version,
            media=media,
            sessions=(session, guarded),
            timeout_s=timeout_s,
        )
    return msgspec.structs.replace(inbound, attachments=(*inbound.attachments, attachment))


async def _fetch(
    ref: MediaRef,
    *,
    number: NumberKeys,
    graph_base: str,
    graph_version: str,
    media: MediaStore,
    sessions: tuple[aiohttp.ClientSession, aiohttp.ClientSession],
    timeout_s: float,
) -> Attachment:
    session, guarded = sessions
    where = f"whatsapp number {number.phone_number_id}"

    def refuse(problem: str, size: int | None = None) -> Attachment:
        return media.refuse(problem, kind=ref.kind, mime_type=ref.mime_type, name=ref.name, size=size)

    problem = media.check(ref.kind, None)
    if problem is not None:
        return refuse(problem)
    headers = {"Authorization": f"Bearer {number.access_token}"}
    lookup = (
        f"{graph_base}/{graph_version}/{quote(ref.media_id, safe='')}"
        f"?phone_number_id={quote(number.phone_number_id, safe='')}"
    )
    try:
        answer = await downloads.fetch(session, lookup, limit=_LOOKUP_BYTES, headers=headers, timeout_s=timeout_s)
        info = msgspec.json.decode(answer.data, type=_Info)
    except DownloadFailed as exc:
        _log.warning("%s: looking up media %s failed: %s", where, ref.media_id, exc.detail)
        return refuse(_problem(exc) if exc.status is not None else exc.problem)
    except (msgspec.DecodeError, RecursionError) as exc:
        _log.warning("%s: the lookup of media %s answered something else: %s", where, ref.media_id, exc)
        return refuse("WhatsApp's answer about it could not be read")
    size = _size(info.file_size)
    if not _trusted(info.url, graph_base):
        _log.warning(
            "%s: media %s is offered at a plain-HTTP address; the token is not sent there", where, ref.media_id
        )
        return refuse("WhatsApp offered it at an address the access token is not sent to", size)
    attachment = await downloads.download(
        media,
        guarded,
        info.url,
        kind=ref.kind,
        mime_type=ref.mime_type or info.mime_type,
        name=ref.name,
        size=size,
        headers=headers,
        timeout_s=timeout_s,
        where=where,
    )
    _check_digest(attachment, ref.sha256 or info.sha256, where)
    return attachment


def _check_digest(attachment: Attachment, stated: str | None, where: str) -> None:
    """Log when the bytes saved are not the ones WhatsApp described."""
    expected = _digest_of(stated)
    if attachment.sha256 is None or expected is None or expected.hex() == attachment.sha256:
        return
    _log.warning(
        "%s: %s has sha256 %s, not the %s WhatsApp stated; it is kept",
        where,
        attachment.name or attachment.kind,
        attachment.sha256,
        expected.hex(),
    )
