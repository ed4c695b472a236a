"""Replies through Twilio's Messages API: ``POST {api_base_url}/2010-04-01/Accounts/{AccountSid}/Messages.json``.

The request is form-encoded (``To``, ``From``, ``Body``) with HTTP basic auth (``AccountSid:AuthToken``); Twilio
answers 201 with the message resource, whose ``sid`` is the reply's id. A reply goes from the number that received
the user's message (its ``account_id``) to the user (its ``chat_id``). Text longer than ``max_message_chars``
(1,600 at most, Twilio's limit) leaves as several messages cut at paragraph, line or sentence boundaries; if part 3
of 4 fails, the retry resumes after the parts already accepted (:mod:`platforms.support.progress`, keyed by the
outbox id). The Messages API has no idempotency key, so sends do not count as idempotent.

Sends are paced per number (``messages_per_second``). HTTP 429 (error 20429) comes back as ``retry_after_s``
(``Retry-After``, else one second) and keeps that number quiet until then. HTTP 400 is Twilio refusing this message
(21211 the number is not valid, 21610 the user replied STOP, 21614 not a mobile number, 21408 a region not enabled,
...): no retry can succeed, so the reply is given up with Twilio's code and message as the reason. 401, 403 and 404
(the credentials or the account) are retried with a hint; 5xx and lost answers are retried.

A reply carrying a document (``/save``) is sent as its text: an MMS names its media by a public ``MediaUrl`` that
Twilio fetches, and the gateway publishes no files.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from urllib.parse import quote, urlencode

import msgspec

from hermes_actors.messages import OutboundMessage
from platforms.base import SendError
from platforms.sms.config import SmsConfig, TwilioKeys
from platforms.sms.events import PLATFORM
from platforms.sms.files import basic_auth
from platforms.support import http_client
from platforms.support.progress import PartProgress
from platforms.support.ratelimit import Rate, RateLimiter
from platforms.support.text import split_message

__all__ = ["MAX_SLEEP_S", "SmsSender"]

_log = logging.getLogger(__name__)

MAX_SLEEP_S = 2.0  # a longer pacing wait goes back to the outbox as retry_after instead of blocking its thread
_HINTS = {
    21211: "the recipient's number is not a valid phone number",
    21408: "the account may not send to this region; enable it under Messaging > Geo permissions",
    21606: "the From number cannot send SMS (not one of the account's SMS-capable numbers)",
    21610: "the recipient has replied STOP and unsubscribed; they must reply START first",
    21612: "Twilio cannot route from this number to the recipient",
    21614: "the recipient's number is not a mobile number",
    21617: "the body is longer than Twilio allows",
}
_AUTH_HINTS = {
    401: "Twilio refused the credentials; check platforms.sms.account_sid and the auth token",
    403: "Twilio refused the request for this account; check its permissions and status in the Console",
    404: "Twilio does not know the account; check platforms.sms.account_sid",
}


class _Error(msgspec.Struct, frozen=True, kw_only=True):
    code: int | None = None
    message: str = ""


class _Created(msgspec.Struct, frozen=True, kw_only=True):
    sid: str = ""


class SmsSender:
    """Sends replies from the number named by each reply's ``account_id``; called from the outbox threads."""

    platform = PLATFORM
    idempotent_sends = False  # the Messages API has no idempotency key

    def __init__(
        self,
        keys: TwilioKeys,
        config: SmsConfig,
        *,
        numbers: Collection[str],
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._keys = keys
        self._numbers = frozenset(numbers)
        self._url = f"{config.api_base}/2010-04-01/Accounts/{quote(keys.account_sid)}/Messages.json"
        self._limit = config.max_message_chars
        self._timeout = config.http_timeout_s
        self._sleep = sleep
        rate = Rate(per_second=config.messages_per_second, burst=max(1.0, config.messages_per_second))
        self._pace = RateLimiter(per_key=rate, clock=clock)
        self._progress: PartProgress[str] = PartProgress()

    def send(self, message: OutboundMessage) -> str | None:
        """Send ``message`` (split if long) to its user; return the ``sid`` of its first part."""
        number = self._number(message.account_id)
        to = message.chat_id
        if not to:
            raise SendError(f"sms number {number}: a reply without a recipient cannot be sent", permanent=True)
        parts = split_message(message.text, self._limit) if message.text.strip() else []
        if not parts:
            _log.info("sms number %s: an empty reply to %s is not sent", number, to)
            return None
        sent = self._progress.sent(message)
        for index in range(len(sent), len(parts)):
            try:
                sent.append(self._post(number, to, parts[index]))
            except SendError:
                if sent:  # a retry resumes after the parts Twilio already has
                    self._progress.remember(message, sent)
                raise
        self._progress.forget(message)
        return sent[0] or None

    def _number(self, account_id: str) -> str:
        if account_id in self._numbers:
            return account_id
        if not account_id and len(self._numbers) == 1:
            return next(iter(self._numbers))
        raise SendError(
            f"sms: the number {account_id!r} is not configured; add it to platforms.sms.numbers", permanent=True
        )

    def _post(self, number: str, to: str, text: str) -> str:
        where = f"sms number {number}: message to {to}"
        wait = self._pace.delay(number)
        if wait > MAX_SLEEP_S:
            raise SendError(
                f"{where}: held back {wait:.1f} s by the send rate; it will be sent then", retry_after_s=wait
            )
        if wait > 0:
            self._sleep(wait)
        body = urlencode({"To": to, "From": number, "Body": text}).encode()
        headers = basic_auth(self._keys) | {"Content-Type": "application/x-www-form-urlencoded"}
        try:
            result = http_client.request("POST", self._url, body=body, headers=headers, timeout=self._timeout)
        except http_client.HttpError as exc:
            raise http_client.send_error(exc, where) from exc
        if 200 <= result.status < 300:
            try:
                created = msgspec.json.decode(result.body, type=_Created)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                created = _Created()
            if not created.sid:  # accepted: no sid is no reason to send it again
                _log.warning("%s: accepted without a sid: %r", where, result.excerpt())
            return created.sid
        raise self._failure(result, number, where)

    def _failure(self, result: http_client.HttpResult, number: str, where: str) -> SendError:
        try:
            error = msgspec.json.decode(result.body, type=_Error)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            error = _Error(message=result.excerpt())
        said = f"HTTP {result.status}" + (f", error {error.code}" if error.code is not None else "")
        said += f": {error.message[:300]!r}" if error.message else ""
        if result.status == 429 or error.code == 20429:
            wait = http_client.retry_after_seconds(result.headers.get("retry-after")) or 1.0
            self._pace.penalise(number, wait)
            return SendError(f"{where}: asked to slow down ({said}); it will be retried", retry_after_s=wait)
        if result.status == 400:
            hint = _HINTS.get(error.code or 0, "Twilio refuses this message")
            return SendError(f"{where}: refused ({said}): {hint}; the reply is given up", permanent=True)
        if result.status in _AUTH_HINTS:
            return SendError(f"{where}: refused ({said}): {_AUTH_HINTS[result.status]}; it will be retried")
        return SendError(f"{where}: failed ({said}); it will be retried")
