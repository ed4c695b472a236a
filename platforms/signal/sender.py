"""Replies to Signal: JSON-RPC ``send`` through signal-cli, split at ``max_message_chars``, paced per chat.

A reply's ``chat_id`` says where it goes: a UUID (the sender's ACI, what direct chats are keyed by) or a phone
number is a ``recipient``; anything else is a base64 ``groupId``. The first part of a reply in a group quotes the
message it answers (``quoteTimestamp``/``quoteAuthor`` from the inbound id ``<uuid>:<timestamp>``), so in a busy
group each person sees which answer is theirs. The account is the reply's ``account_id``.

A reply longer than the limit leaves as several messages cut at paragraph, line or sentence ends
(:func:`platforms.support.text.split_message`); if a later part fails, the outbox retries the reply and the parts
already
sent are remembered (in memory) and not sent again. Signal has no idempotency key, so after an unknown outcome a
retry may duplicate a message. Sends to one chat are paced; a longer wait hands the reply back to the outbox.

A reply carrying a document (``/save``) is one ``send`` with the file as an ``attachment`` data URI
(``data:<type>;filename=<name>;base64,<bytes>``) and its caption as the message; when signal-cli refuses it, the
reply's text is sent instead (:mod:`platforms.support.documents`).

Failures: a Signal rate limit (``RATE_LIMIT_FAILURE``, or error -5) is retried after its ``retryAfterSeconds``
(or ``rate_limit_backoff_s``), and a captcha challenge is logged with the command that answers it; network and
I/O errors are retried with backoff; a recipient that is not registered, an identity signal-cli does not trust
(the safety number changed), a group the account is not in and an account signal-cli does not have are
permanent: the reply is given up with that reason, since no retry can fix them.
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from hermes_actors.messages import OutboundDocument, OutboundMessage
from platforms.base import SendError
from platforms.signal import rpc
from platforms.signal.config import SignalConfig, is_uuid
from platforms.signal.envelopes import PLATFORM
from platforms.support import http_client
from platforms.support.documents import data_uri, posting_failed, send_document
from platforms.support.progress import PartProgress
from platforms.support.ratelimit import Rate, RateLimiter
from platforms.support.text import split_message

__all__ = ["MAX_SLEEP_S", "SignalSender", "send_target"]

_log = logging.getLogger(__name__)

MAX_SLEEP_S = 1.0  # a pacing wait longer than this goes back to the outbox instead of blocking it
_NUMBER = re.compile(r"\+[0-9]{4,20}")
_CAPTCHA_PAGE = "https://signalcaptchas.org/challenge/generate.html"
_GROUP_GONE = ("group not found", "not a member", "not allowed to send")


def send_target(chat_id: str) -> dict[str, Any]:
    """The ``send`` params that address ``chat_id``: ``recipient`` for a UUID or number, else ``groupId``."""
    if is_uuid(chat_id) or _NUMBER.fullmatch(chat_id):
        return {"recipient": [chat_id]}
    return {"groupId": chat_id}


def _quote(message: OutboundMessage) -> dict[str, Any]:
    """``quoteTimestamp``/``quoteAuthor`` for the message a reply answers, when its id is ``<uuid>:<timestamp>``."""
    author, _, stamp = (message.reply_to or "").rpartition(":")
    if not stamp.isdigit() or not (is_uuid(author) or _NUMBER.fullmatch(author)):
        return {}
    return {"quoteTimestamp": int(stamp), "quoteAuthor": author}


class SignalSender:
    """The reply sender for every configured account; called from the outbox thread."""

    platform = PLATFORM
    idempotent_sends = False  # send has no idempotency key

    def __init__(
        self,
        accounts: Sequence[str],
        config: SignalConfig,
        *,
        client: rpc.RpcClient | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._accounts = list(accounts)
        self._config = config
        self._rpc = client or rpc.RpcClient(config.base, timeout_s=config.request_timeout_s)
        self._limiter = RateLimiter(
            per_key=Rate(per_second=config.messages_per_second, burst=float(config.burst)), clock=clock
        )
        self._sleep = sleep
        self._progress: PartProgress[str | None] = PartProgress()  # the parts of partly sent replies

    def send(self, message: OutboundMessage) -> str | None:
        """Send ``message`` (in parts when long); return the Signal timestamp of its first part."""
        account = self._account(message.account_id)
        if not message.chat_id:
            raise SendError(f"signal account {account}: a reply without a chat id cannot be sent", permanent=True)
        chat_id = message.chat_id
        quote = _quote(message) if "groupId" in send_target(chat_id) else {}
        return send_document(
            message,
            lambda document: self._send_file(account, chat_id, document, quote),
            lambda: self._send_text(account, chat_id, message, quote),
            f"signal account {account}: a reply to {chat_id}",
        )

    def _send_file(self, account: str, chat_id: str, document: OutboundDocument, quote: dict[str, Any]) -> str | None:
        """One ``send`` with the document as a data URI attachment and its caption as the message."""
        caption = split_message(document.caption, self._config.max_message_chars)[0] if document.caption else ""
        extra = {**quote, "attachment": [data_uri(document)]}
        try:
            return self._send_part(account, chat_id, caption, extra)
        except SendError as exc:
            raise posting_failed(exc) from None

    def _send_text(self, account: str, chat_id: str, message: OutboundMessage, quote: dict[str, Any]) -> str | None:
        parts = split_message(message.text, self._config.max_message_chars) if message.text.strip() else []
        if not parts:
            _log.info("signal account %s: an empty reply to %s is not sent", account, chat_id)
            return None
        sent = self._progress.sent(message)
        for index in range(len(sent), len(parts)):
            try:
                sent.append(self._send_part(account, chat_id, parts[index], quote if index == 0 else {}))
            except SendError:
                if sent:
                    self._progress.remember(message, sent)
                raise
        self._progress.forget(message)
        return sent[0]

    def _account(self, account_id: str) -> str:
        if account_id in self._accounts:
            return account_id
        if not account_id and len(self._accounts) == 1:
            return self._accounts[0]
        raise SendError(
            f"signal: no account {account_id!r} is configured; add it to platforms.signal.accounts (a reply for an "
            "account that is not served is given up)",
            permanent=True,
        )

    def _send_part(self, account: str, chat_id: str, text: str, extra: dict[str, Any]) -> str | None:
        """One ``send`` of ``text`` to ``chat_id`` with ``extra`` params (a quote, an attachment)."""
        key = f"{account}:{chat_id}"
        what = f"signal account {account}: a reply to {chat_id}"
        wait = self._limiter.delay(key)
        if wait > MAX_SLEEP_S:
            raise SendError(f"{what}: held back {wait:.1f} s by the chat's rate limit", retry_after_s=wait)
        if wait > 0:
            self._sleep(wait)
        params: dict[str, Any] = {"account": account, "message": text, **send_target(chat_id), **extra}
        try:
            result = self._rpc.call("send", params)
        except rpc.RpcError as exc:
            raise self._rpc_error(exc, account, chat_id, key, what) from None
        except http_client.HttpError as exc:
            answer = rpc.status_of(exc)
            if answer is None:
                raise http_client.send_error(exc, what) from exc
            error = http_client.status_error(answer, what)
            if error.retry_after_s is not None:
                self._limiter.penalise(key, error.retry_after_s)
            raise error from None
        failed = Counter(result.type for result in rpc.send_results(result) if result.type != "SUCCESS")
        if failed:
            summary = ", ".join(f"{count} {kind}" for kind, count in sorted(failed.items()))
            _log.warning("%s reached some recipients only (%s)", what, summary)
        timestamp = rpc.send_timestamp(result)
        return None if timestamp is None else str(timestamp)  # it was sent: no id is no reason to send it again

    def _rpc_error(self, exc: rpc.RpcError, account: str, chat_id: str, key: str, what: str) -> SendError:
        limited = exc.failures("RATE_LIMIT_FAILURE")
        if exc.code == rpc.RATE_LIMIT_ERROR or limited:
            hints = [r.retry_after_seconds for r in limited if r.retry_after_seconds is not None]
            wait = http_client.retry_after_seconds(max(hints)) if hints else None
            wait = wait or self._config.rate_limit_backoff_s
            self._limiter.penalise(key, wait)
            challenge = next((r.token for r in limited if r.token), None)
            if challenge is not None:
                _log.error(
                    "signal account %s: Signal asks for a captcha before it takes more messages; open %s, solve it, "
                    "and run: signal-cli -a %s submitRateLimitChallenge --challenge %s --captcha <the signalcaptcha:// "
                    "token>",
                    account,
                    _CAPTCHA_PAGE,
                    account,
                    challenge,
                )
            return SendError(
                f"{what}: Signal rate-limited the account ({exc.message}); it will be retried", retry_after_s=wait
            )
        text = exc.message.lower()
        if exc.code == rpc.UNTRUSTED_KEY_ERROR or exc.failures("IDENTITY_FAILURE"):
            return SendError(
                f"{what}: {chat_id}'s safety number changed and signal-cli does not trust the new identity; verify it "
                f"and run: signal-cli -a {account} trust --trust-all-known-keys {chat_id} (or start the daemon with "
                "--trust-new-identities always); the reply is given up",
                permanent=True,
            )
        if exc.failures("UNREGISTERED_FAILURE") or "not registered" in text:
            return SendError(
                f"{what}: {chat_id} is not a registered Signal user (the account was deleted or never existed); the "
                "reply is given up",
                permanent=True,
            )
        if any(marker in text for marker in _GROUP_GONE):
            return SendError(
                f"{what}: the group is gone or the account may not send to it ({exc.message}); the reply is given up",
                permanent=True,
            )
        if exc.code == rpc.INVALID_PARAMS and "account" in text:
            return SendError(
                f"{what}: signal-cli has no account {account} ({exc.message}); register or link it in signal-cli, or "
                "remove it from platforms.signal.accounts; the reply is given up",
                permanent=True,
            )
        if -32700 <= exc.code <= -32600 and exc.code != rpc.INTERNAL_ERROR:
            return SendError(
                f"{what}: signal-cli refused the request ({exc}); is platforms.signal.url a signal-cli daemon that "
                "knows the send method? the reply is given up",
                permanent=True,
            )
        return SendError(f"{what}: {exc}; it will be retried")
