"""Replies through the Cloud API: ``POST {graph_base_url}/{version}/{phone_number_id}/messages``, Bearer token.

A reply to a user is sent only inside the 24-hour customer service window (:mod:`platforms.whatsapp.window`);
outside it the reply is refused with ``SendError(permanent=True)`` saying that the window closed and a template
message is needed, logged, and given up by the outbox, which records why. The Graph API's own answer for that
case (error ``131047``, "Re-engagement message") is mapped to the same failure. Group replies carry
``recipient_type: group`` and quote the message they answer.

Text is split at ``max_message_chars`` (4,096 at most); a reply whose later parts fail resumes after the parts
already sent. Sends are paced per number (Meta's throughput, 80 messages a second by default) and per
(number, user) (Meta's pair rate limit); HTTP 429 and the throttling codes ``130429`` (throughput), ``131056``
(pair rate) and ``4``/``80007``/``131048`` (app, account and spam limits) come back as ``retry_after_s`` and keep
that number or user quiet until then. Errors no retry can fix (the user cannot receive messages, a test number
not on the allowed list) give the reply up; others are retried with backoff and a hint.

A reply carrying a document (``/save``) is uploaded to the number's media and sent as one ``document`` message
(:mod:`platforms.whatsapp.uploads`), inside the same window; a file the Cloud API refuses sends the reply's text
instead (:mod:`platforms.support.documents`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

import msgspec

from hermes_actors.messages import OutboundDocument, OutboundMessage
from platforms.base import SendError
from platforms.support import http_client
from platforms.support.documents import posting_failed, send_document
from platforms.support.progress import PartProgress
from platforms.support.ratelimit import Rate, RateLimiter
from platforms.support.text import split_message
from platforms.whatsapp.config import NumberKeys, WhatsappConfig
from platforms.whatsapp.events import PLATFORM
from platforms.whatsapp.uploads import document_message, upload_media
from platforms.whatsapp.window import WINDOW_S, Chat, ServiceWindows

__all__ = ["MAX_SLEEP_S", "RE_ENGAGEMENT", "WhatsappSender"]

_log = logging.getLogger(__name__)

MAX_SLEEP_S = 2.0  # a longer pacing wait goes back to the outbox as retry_after instead of blocking its thread
RE_ENGAGEMENT = 131047  # "Re-engagement message": more than 24 hours since the user last wrote
_THROUGHPUT = 130429  # the number's messages-per-second limit
_PAIR_RATE = 131056  # too many messages from one number to one user
_SLOW_DOWN = {4: 60.0, 80007: 60.0, 131048: 60.0}  # app calls, account rate limit, spam rate limit: seconds to wait
_PERMANENT = {
    131021: "a number cannot message itself",
    131026: "the recipient cannot receive this message (not on WhatsApp, or an outdated app)",
    131030: "the recipient is not on the test number's allowed list; add them in the Meta app or use a live number",
    131051: "the message type is not supported",
}
_HINTS = {
    190: "the access token has expired or was revoked; set a new access_token for the number",
    0: "the access token was refused; check the number's access_token",
    10: "the access token lacks whatsapp_business_messaging permission; grant it to the token",
    100: "a request parameter was refused; check phone_number_id and graph_version",
    131005: "access denied; check the access token's permissions",
    131031: "the business account is locked; see WhatsApp Manager",
    131042: "a payment problem; fix the payment method in WhatsApp Manager",
    133010: "the phone number is not registered with the Cloud API; register it",
    368: "the number is temporarily blocked for policy violations; see WhatsApp Manager",
}
_NOT_LOADED_RETRY_S = 1.0


class _ErrorData(msgspec.Struct, frozen=True, kw_only=True):
    details: str | None = None


class _GraphError(msgspec.Struct, frozen=True, kw_only=True):
    message: str = ""
    code: int | None = None
    error_subcode: int | None = None
    error_data: _ErrorData | None = None

    def describe(self) -> str:
        details = self.error_data.details if self.error_data and self.error_data.details else ""
        text = f"error {self.code}: {self.message}" + (f" ({details})" if details else "")
        return text[:400]


class _ErrorBody(msgspec.Struct, frozen=True, kw_only=True):
    error: _GraphError


class _SentId(msgspec.Struct, frozen=True, kw_only=True):
    id: str


class _Sent(msgspec.Struct, frozen=True, kw_only=True):
    messages: list[_SentId] = msgspec.field(default_factory=list)


def _graph_error(body: bytes) -> _GraphError | None:
    try:
        return msgspec.json.decode(body, type=_ErrorBody).error
    except (msgspec.DecodeError, RecursionError):
        return None


def _utc(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


class WhatsappSender:
    """Sends replies from the number named by each reply's ``account_id``; called from the outbox thread."""

    platform = PLATFORM
    idempotent_sends = False  # the messages endpoint has no idempotency key

    def __init__(
        self,
        numbers: Mapping[str, NumberKeys],
        config: WhatsappConfig,
        windows: ServiceWindows,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._numbers = numbers
        self._base = f"{config.graph_base}/{config.graph_version}"
        self._limit = config.max_message_chars
        self._timeout = config.http_timeout_s
        self._pair_wait = config.recipient_interval_s
        self._windows = windows
        self._clock = clock
        self._sleep = sleep
        self._throughput = {
            name: RateLimiter(
                overall=Rate(per_second=keys.messages_per_second, burst=max(1.0, keys.messages_per_second))
            )
            for name, keys in numbers.items()
        }
        self._pairs = RateLimiter(
            per_key=Rate(per_second=1.0 / config.recipient_interval_s, burst=float(config.recipient_burst))
        )
        self._progress: PartProgress[str] = PartProgress()  # the parts of partly sent replies

    def send(self, message: OutboundMessage) -> str | None:
        """Send ``message`` (split if long) to its user or group; return the ``wamid`` of its first part."""
        number = self._number(message.account_id)
        chat = message.chat_id
        if not chat:
            raise SendError(f"whatsapp number {number.phone_number_id}: a reply without a chat id cannot be sent")
        known = self._windows.current(number.phone_number_id, chat)
        group = known.group if known is not None else not chat.isdigit()  # a wa_id is digits, a group id is not
        if not group:
            self._check_window(number.phone_number_id, chat, known)
        quoted = message.reply_to if group and (message.reply_to or "").startswith("wamid.") else None
        return send_document(
            message,
            lambda document: self._send_file(number, chat, document, group=group, quoted=quoted),
            lambda: self._send_text(number, chat, message, group=group, quoted=quoted),
            f"whatsapp number {number.phone_number_id}: a reply to {chat}",
        )

    def _send_file(
        self, number: NumberKeys, chat: str, document: OutboundDocument, *, group: bool, quoted: str | None
    ) -> str | None:
        """Upload ``document`` to the number's media, then one ``document`` message naming it."""
        media_id = upload_media(number, self._base, document, self._timeout)
        try:
            return self._post(number, chat, document_message(media_id, document), group=group, quoted=quoted) or None
        except SendError as exc:
            raise posting_failed(exc) from None

    def _send_text(
        self, number: NumberKeys, chat: str, message: OutboundMessage, *, group: bool, quoted: str | None
    ) -> str | None:
        parts = split_message(message.text, self._limit) if message.text.strip() else []
        if not parts:
            _log.info("whatsapp number %s: an empty reply to %s is not sent", number.phone_number_id, chat)
            return None
        sent = self._progress.sent(message)
        for index in range(len(sent), len(parts)):
            text: dict[str, object] = {"type": "text", "text": {"body": parts[index]}}
            try:
                sent.append(self._post(number, chat, text, group=group, quoted=quoted if index == 0 else None))
            except SendError:
                if sent:  # a retry resumes after the parts WhatsApp already has
                    self._progress.remember(message, sent)
                raise
        self._progress.forget(message)
        return sent[0] or None

    def _number(self, account_id: str) -> NumberKeys:
        number = self._numbers.get(account_id)
        if number is None and not account_id and len(self._numbers) == 1:
            number = next(iter(self._numbers.values()))
        if number is None:
            raise SendError(
                f"whatsapp: no number {account_id!r} is configured; add it under platforms.whatsapp.numbers"
            )
        return number

    def _check_window(self, number: str, chat: str, chat_state: Chat | None) -> None:
        if chat_state is None and not self._windows.loaded:
            raise SendError(
                f"whatsapp number {number}: the 24-hour windows are not read from the inbox yet (the adapter is "
                "starting); the reply will be retried",
                retry_after_s=_NOT_LOADED_RETRY_S,
            )
        if chat_state is None:
            raise self._window_closed(number, chat, "is not open: they have not written in the last 24 hours")
        closes = chat_state.last_inbound_at + WINDOW_S
        if self._clock() >= closes:
            last = _utc(chat_state.last_inbound_at)
            raise self._window_closed(number, chat, f"closed at {_utc(closes)} (their last message was at {last})")

    def _window_closed(self, number: str, chat: str, why: str) -> SendError:
        text = (
            f"whatsapp number {number}: the 24-hour customer service window with {chat} {why}; a free-form reply "
            "can no longer be sent, so it is given up: a template message is needed to reopen the conversation"
        )
        _log.warning("%s", text)
        return SendError(text, permanent=True)

    def _pace(self, number: str, chat: str, where: str) -> None:
        wait = max(self._throughput[number].delay(number), self._pairs.delay(f"{number}:{chat}"))
        if wait > MAX_SLEEP_S:
            raise SendError(
                f"{where}: held back {wait:.1f} s by the send rate limit; it will be sent then", retry_after_s=wait
            )
        if wait > 0:
            self._sleep(wait)

    def _post(
        self, number: NumberKeys, chat: str, content: dict[str, object], *, group: bool, quoted: str | None
    ) -> str:
        """One ``messages`` call with ``content`` (``type`` and its object); return the new message's ``wamid`` or
        raise :class:`SendError`."""
        name = number.phone_number_id
        where = f"whatsapp number {name}: message to {chat}"
        self._pace(name, chat, where)
        body: dict[str, object] = {
            "messaging_product": "whatsapp",
            "recipient_type": "group" if group else "individual",
            "to": chat,
            **content,
        }
        if quoted is not None:
            body["context"] = {"message_id": quoted}
        url = f"{self._base}/{name}/messages"
        headers = {"authorization": f"Bearer {number.access_token}"}
        try:
            result = http_client.request("POST", url, json_body=body, headers=headers, timeout=self._timeout)
        except http_client.HttpError as exc:
            raise http_client.send_error(exc, where) from exc
        if 200 <= result.status < 300:
            try:
                sent = msgspec.json.decode(result.body, type=_Sent)
            except (msgspec.DecodeError, RecursionError):
                sent = _Sent()
            if not sent.messages:  # it was accepted: no id is no reason to send it again
                _log.warning("%s: accepted without a message id: %r", where, result.excerpt())
                return ""
            return sent.messages[0].id
        raise self._failure(result, name, chat, where)

    def _failure(self, result: http_client.HttpResult, number: str, chat: str, where: str) -> SendError:
        error = _graph_error(result.body)
        code = error.code if error is not None else None
        detail = error.describe() if error is not None else repr(result.excerpt())
        header_wait = http_client.retry_after_seconds(result.headers.get("retry-after"))
        if code == RE_ENGAGEMENT:
            return self._window_closed(number, chat, f"has closed (the Graph API answered {detail})")
        if code == _PAIR_RATE:
            wait = header_wait or self._pair_wait
            self._pairs.penalise(f"{number}:{chat}", wait)
            return SendError(
                f"{where}: too many messages to this user ({detail}); it will be retried", retry_after_s=wait
            )
        if code == _THROUGHPUT or code in _SLOW_DOWN or result.status == 429:
            wait = header_wait or _SLOW_DOWN.get(code or 0, 1.0)
            self._throughput[number].penalise(number, wait)
            return SendError(
                f"{where}: asked to slow down (HTTP {result.status}, {detail}); it will be retried", retry_after_s=wait
            )
        if code in _PERMANENT:
            return SendError(f"{where}: refused ({detail}): {_PERMANENT[code]}; the reply is given up", permanent=True)
        if result.status >= 500:
            return SendError(f"{where}: failed with HTTP {result.status} ({detail}); it will be retried")
        hint = _HINTS.get(code, "it will be retried with backoff") if code is not None else "it will be retried"
        if code in _HINTS:
            hint += " (the reply is retried with backoff meanwhile)"
        return SendError(f"{where}: refused with HTTP {result.status} ({detail}); {hint}")
