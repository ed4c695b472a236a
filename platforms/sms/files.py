"""MMS media into the media store: each ``MediaUrl{N}`` of an incoming message, fetched from Twilio.

A media URL names the file on Twilio's API (``/2010-04-01/Accounts/{AccountSid}/Messages/{MessageSid}/Media/
{MediaSid}``) and answers with a redirect to where the bytes are kept. An account may require HTTP basic auth
(``AccountSid:AuthToken``) for it, so the credentials are sent, but only to the API's own origin (``api_base_url``);
a redirect elsewhere drops them (aiohttp does), and a URL on another host is fetched without them. Twilio signs the
webhook, but each URL and redirect is still fetched only through the section's fetch policy (Twilio's API and media
hosts at public addresses). The download reads no further than ``media.max_bytes``; the type Twilio named
(``MediaContentType{N}``) is kept. Every failure becomes a refused attachment saying why, so the text still runs and
the reply names what could not be read. The records carry no source URL (fetching it may need the account's
credentials).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from urllib.parse import urlsplit

import msgspec

from hermes_actors.media import MediaStore, kind_of
from hermes_actors.messages import Attachment, InboundMessage
from platforms.sms.config import TwilioKeys
from platforms.sms.events import MediaRef
from platforms.support import downloads
from platforms.support.fetch_policy import FetchPolicy
from platforms.support.http_client import open_session

__all__ = ["attach_media", "basic_auth"]


def basic_auth(keys: TwilioKeys) -> dict[str, str]:
    """The ``Authorization`` header of the account (HTTP basic, ``AccountSid:AuthToken``)."""
    pair = f"{keys.account_sid}:{keys.auth_token}".encode()
    return {"Authorization": "Basic " + base64.b64encode(pair).decode()}


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


async def attach_media(
    inbound: InboundMessage,
    media_refs: Sequence[MediaRef],
    *,
    keys: TwilioKeys,
    api_base: str,
    media: MediaStore,
    fetch: FetchPolicy,
    timeout_s: float,
) -> InboundMessage:
    """``inbound`` with each of ``media_refs`` saved into ``media`` (refused ones saying why), one at a time,
    fetched as ``fetch`` allows."""
    records: list[Attachment] = []
    async with open_session(fetch) as session:
        for ref in media_refs:
            headers = basic_auth(keys) if _origin(ref.url) == _origin(api_base) else {}
            records.append(
                await downloads.download(
                    media,
                    session,
                    ref.url,
                    kind=kind_of(ref.content_type),
                    mime_type=ref.content_type,
                    headers=headers,
                    timeout_s=timeout_s,
                    where=f"sms number {inbound.source.account_id}",
                )
            )
    return msgspec.structs.replace(inbound, attachments=(*inbound.attachments, *records))
