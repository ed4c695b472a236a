"""Replies through the BlueBubbles server's REST API: ``POST /api/v1/message/text?password=...``.

The body is ``{"chatGuid", "message", "tempGuid", "method"}``: the chat the user's message came from, one part of
the reply, a ``tempGuid`` derived from the outbox id and the part's index (the same on every attempt, so the server
and its clients can match a retried send to the first), and ``apple-script`` or ``private-api``; with the Private
API a reply also quotes the message it answers (``selectedMessageGuid``, ``partIndex`` 0). The server answers
``{"status": 200, "data": {"guid"}}`` once Messages has the message. Text longer than ``max_message_chars`` leaves as
several messages; a retry resumes after the parts already accepted. The server does not drop a repeated
``tempGuid`` by itself, so sends do not count as idempotent.

HTTP 429 comes back as ``retry_after_s``; 401 (a wrong password) is retried with a hint, as the password may be
fixed; 400 and 404 (no such chat, a malformed request) are refused for good with the server's message; 5xx (Messages
failed to send) and lost answers are retried.

A reply carrying a document (``/save``) is one ``POST /api/v1/message/attachment`` (``multipart/form-data``:
``chatGuid``, ``tempGuid``, ``name``, ``method`` and the file as ``attachment``; Messages shows an attachment without
a caption); when the server refuses it, the reply's text is sent instead (:mod:`platforms.support.documents`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from urllib.parse import urlencode

import msgspec

from hermes_actors.messages import OutboundDocument, OutboundMessage
from platforms.base import SendError
from platforms.bluebubbles.config import BluebubblesConfig, ServerKeys
from platforms.bluebubbles.events import PLATFORM
from platforms.support import http_client
from platforms.support.documents import FormFile, form_data, posting_failed, send_document
from platforms.support.progress import PartProgress
from platforms.support.ratelimit import Rate, RateLimiter
from platforms.support.text import split_message

__all__ = ["MAX_SLEEP_S", "BluebubblesSender", "temp_guid_of"]

_log = logging.getLogger(__name__)

MAX_SLEEP_S = 2.0


class _Detail(msgspec.Struct, frozen=True, kw_only=True):
    type: str = ""
    message: str = ""


class _Answer(msgspec.Struct, frozen=True, kw_only=True):
    message: str = ""
    error: _Detail | str | None = None
    data: dict[str, object] | str | None = None


def temp_guid_of(message: OutboundMessage, part: int | str) -> str:
    """The ``tempGuid`` of part ``part`` of ``message``: the same on every attempt, different between replies."""
    return f"hermes-{message.outbox_id or 0}-{part}"


class BluebubblesSender:
    """Sends replies through one BlueBubbles server; called from the outbox threads."""

    platform = PLATFORM
    idempotent_sends = False

    def __init__(
        self,
        keys: ServerKeys,
        config: BluebubblesConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._name = config.server_name
        query = urlencode({"password": keys.password})
        self._url = f"{config.server}/api/v1/message/text?{query}"
        self._attachment_url = f"{config.server}/api/v1/message/attachment?{query}"
        self._method = config.method
        self._limit = config.max_message_chars
        self._timeout = config.http_timeout_s
        self._sleep = sleep
        rate = Rate(per_second=config.messages_per_second, burst=max(1.0, config.messages_per_second))
        self._pace = RateLimiter(per_key=rate, clock=clock)
        self._progress: PartProgress[str] = PartProgress()

    def send(self, message: OutboundMessage) -> str | None:
        """Send ``message`` (split if long) to its chat; return the server's guid of its first part."""
        if message.account_id not in ("", self._name):
            raise SendError(
                f"bluebubbles: server {message.account_id!r} is not configured (this one is {self._name!r})",
                permanent=True,
            )
        chat = message.chat_id or ""
        if not chat:
            raise SendError(f"bluebubbles server {self._name}: a reply without a chat cannot be sent", permanent=True)
        return send_document(
            message,
            lambda document: self._send_file(chat, message, document),
            lambda: self._send_text(chat, message),
            f"bluebubbles server {self._name}: a reply to {chat}",
        )

    def _send_file(self, chat: str, message: OutboundMessage, document: OutboundDocument) -> str | None:
        """One ``POST /api/v1/message/attachment`` (``multipart/form-data``; an attachment has no caption)."""
        fields = {"chatGuid": chat, "tempGuid": temp_guid_of(message, "file"), "name": document.name}
        fields["method"] = self._method
        file = FormFile(field="attachment", name=document.name, mime_type=document.mime_type, data=document.data)
        try:
            return self._post(chat, self._attachment_url, form=form_data(fields, [file])) or None
        except SendError as exc:
            raise posting_failed(exc) from None

    def _send_text(self, chat: str, message: OutboundMessage) -> str | None:
        parts = split_message(message.text, self._limit) if message.text.strip() else []
        if not parts:
            return None
        sent = self._progress.sent(message)
        for index in range(len(sent), len(parts)):
            body: dict[str, object] = {
                "chatGuid": chat,
                "message": parts[index],
                "tempGuid": temp_guid_of(message, index),
                "method": self._method,
            }
            if self._method == "private-api" and message.reply_to and index == 0:
                body |= {"selectedMessageGuid": message.reply_to, "partIndex": 0}
            try:
                sent.append(self._post(chat, self._url, body=body))
            except SendError:
                if sent:
                    self._progress.remember(message, sent)
                raise
        self._progress.forget(message)
        return sent[0] or None

    def _post(
        self, chat: str, url: str, *, body: dict[str, object] | None = None, form: tuple[bytes, str] | None = None
    ) -> str:
        where = f"bluebubbles server {self._name}: message to {chat}"
        wait = self._pace.delay(chat)
        if wait > MAX_SLEEP_S:
            raise SendError(f"{where}: held back {wait:.1f} s by the send rate", retry_after_s=wait)
        if wait > 0:
            self._sleep(wait)
        raw, headers = (None, None) if form is None else (form[0], {"content-type": form[1]})
        try:
            result = http_client.request("POST", url, body=raw, json_body=body, headers=headers, timeout=self._timeout)
        except http_client.HttpError as exc:
            raise http_client.send_error(exc, where) from exc
        try:
            answer = msgspec.json.decode(result.body, type=_Answer)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            answer = _Answer(message=result.excerpt())
        if 200 <= result.status < 300:
            guid = answer.data.get("guid") if isinstance(answer.data, dict) else None
            return guid if isinstance(guid, str) else ""
        detail = answer.error.message if isinstance(answer.error, _Detail) else (answer.error or "")
        said = f"HTTP {result.status}: {(answer.message + (f' ({detail})' if detail else ''))[:300]!r}"
        if result.status == 429:
            wait = http_client.retry_after_seconds(result.headers.get("retry-after")) or 1.0
            self._pace.penalise(chat, wait)
            raise SendError(f"{where}: asked to slow down ({said}); it will be retried", retry_after_s=wait)
        if result.status == 401:
            raise SendError(f"{where}: the server refused the password ({said}); check platforms.bluebubbles.password")
        if result.status in (400, 404):
            raise SendError(f"{where}: refused ({said}); the reply is given up", permanent=True)
        raise SendError(f"{where}: failed ({said}); it will be retried")
