"""Replies through the QQ OpenAPI, as passive replies to the message they answer.

A reply goes to ``POST /v2/users/{openid}/messages`` (direct chat), ``/v2/groups/{group_openid}/messages``
(group) or ``/channels/{channel_id}/messages`` (guild channel), chosen by the kind its chat id carries
(:mod:`platforms.qqbot.events`), with ``Authorization: QQBot <token>`` (:mod:`platforms.qqbot.token`). It carries
``msg_id``, the user's message it answers, which makes it a passive reply; in direct and group chats also
``msg_seq``, derived from the outbox id and the part's index, so a retry of one part reuses its number and QQ refuses
the repeat (code 40054005, taken as already sent) instead of showing it twice. Text longer than
``max_message_chars`` leaves as several messages; a retry resumes after the parts already accepted.

HTTP 429 (or code 22009, the message rate) comes back as ``retry_after_s`` and keeps that chat quiet until then;
401 drops the access token and is retried with a new one; another 4xx is QQ refusing this message (the passive
reply window has closed, the bot was removed from the group, ...): no retry can succeed, so the reply is given up
with QQ's code and message. 5xx and lost answers are retried.

A reply carrying a document (``/save``) is sent as its text: the rich media upload (``/v2/.../files``) takes images,
video and voice; its file type (4) is not open to bots, and a guild channel takes images only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from urllib.parse import quote

import msgspec

from hermes_actors.messages import OutboundMessage
from platforms.base import SendError
from platforms.qqbot.config import QqbotConfig, ResolvedBot
from platforms.qqbot.events import PLATFORM
from platforms.qqbot.token import AccessTokens
from platforms.support import http_client
from platforms.support.progress import PartProgress
from platforms.support.ratelimit import Rate, RateLimiter
from platforms.support.text import split_message

__all__ = ["DUPLICATE_SEQ", "MAX_SLEEP_S", "QqbotSender", "msg_seq_of"]

_log = logging.getLogger(__name__)

MAX_SLEEP_S = 2.0
DUPLICATE_SEQ = 40054005  # QQ already has a message with this msg_id and msg_seq
_RATE_CODES = frozenset({22009})
_PATHS = {"user": "/v2/users/{}/messages", "group": "/v2/groups/{}/messages", "channel": "/channels/{}/messages"}
_PARTS_PER_REPLY = 100


class _Error(msgspec.Struct, frozen=True, kw_only=True):
    code: int | None = None
    message: str = ""


class _Sent(msgspec.Struct, frozen=True, kw_only=True):
    id: str = ""


def msg_seq_of(message: OutboundMessage, part: int) -> int:
    """The ``msg_seq`` of part ``part`` of ``message``: the same on every attempt, different between replies."""
    base = (message.outbox_id or 0) % 10_000_000
    return base * _PARTS_PER_REPLY + part % _PARTS_PER_REPLY + 1


class QqbotSender:
    """Sends each reply with the bot its ``account_id`` (AppID) names; called from the outbox threads."""

    platform = PLATFORM
    idempotent_sends = False  # only direct and group replies have msg_seq; a channel repeat would show twice

    def __init__(
        self,
        bots: Mapping[str, ResolvedBot],
        config: QqbotConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._tokens = {
            bot.app_id: AccessTokens(
                bot.app_id, bot.secret, token_url=config.token_url, timeout_s=config.http_timeout_s
            )
            for bot in bots.values()
        }
        self._base = config.api_base
        self._limit = config.max_message_chars
        self._timeout = config.http_timeout_s
        self._sleep = sleep
        rate = Rate(per_second=config.messages_per_second, burst=max(1.0, config.messages_per_second))
        self._pace = RateLimiter(per_key=rate, clock=clock)
        self._progress: PartProgress[str] = PartProgress()

    def tokens(self, app_id: str) -> AccessTokens:
        """The access tokens of the bot ``app_id`` (shared with its gateway connection)."""
        return self._tokens[app_id]

    def send(self, message: OutboundMessage) -> str | None:
        """Send ``message`` (split if long) as a passive reply; return the id of its first part."""
        tokens = self._tokens.get(message.account_id)
        if tokens is None:
            raise SendError(
                f"qqbot: app {message.account_id!r} is not configured in platforms.qqbot.bots", permanent=True
            )
        kind, _, target = (message.chat_id or "").partition(".")
        if kind not in _PATHS or not target:
            raise SendError(f"qqbot: {message.chat_id!r} is not a chat this adapter made", permanent=True)
        parts = split_message(message.text, self._limit) if message.text.strip() else []
        if not parts:
            return None
        answering = message.reply_to or (message.answers[-1] if message.answers else None)
        sent = self._progress.sent(message)
        for index in range(len(sent), len(parts)):
            body: dict[str, object] = {"content": parts[index]}
            if kind != "channel":
                body["msg_type"] = 0
                body["msg_seq"] = msg_seq_of(message, index)
            if answering:
                body["msg_id"] = answering
            try:
                sent.append(self._post(tokens, kind, target, body, message.chat_id or ""))
            except SendError:
                if sent:
                    self._progress.remember(message, sent)
                raise
        self._progress.forget(message)
        return sent[0] or None

    def _post(self, tokens: AccessTokens, kind: str, target: str, body: dict[str, object], chat: str) -> str:
        where = f"qqbot app {tokens.app_id}: message to {chat}"
        wait = self._pace.delay(chat)
        if wait > MAX_SLEEP_S:
            raise SendError(f"{where}: held back {wait:.1f} s by the send rate", retry_after_s=wait)
        if wait > 0:
            self._sleep(wait)
        url = self._base + _PATHS[kind].format(quote(target, safe=""))
        try:
            result = http_client.request("POST", url, json_body=body, headers=tokens.header(), timeout=self._timeout)
        except http_client.HttpError as exc:
            raise http_client.send_error(exc, where) from exc
        if 200 <= result.status < 300:
            try:
                return msgspec.json.decode(result.body, type=_Sent).id
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                _log.warning("%s: accepted with an answer that is not QQ's: %r", where, result.excerpt())
                return ""
        return self._failure(result, tokens, chat, where)

    def _failure(self, result: http_client.HttpResult, tokens: AccessTokens, chat: str, where: str) -> str:
        try:
            error = msgspec.json.decode(result.body, type=_Error)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            error = _Error(message=result.excerpt())
        said = f"HTTP {result.status}" + (f", code {error.code}" if error.code is not None else "")
        said += f": {error.message[:300]!r}" if error.message else ""
        if error.code == DUPLICATE_SEQ:
            _log.info("%s: QQ already has this part (%s); it counts as sent", where, said)
            return ""
        if result.status == 429 or error.code in _RATE_CODES:
            wait = http_client.retry_after_seconds(result.headers.get("retry-after")) or 1.0
            self._pace.penalise(chat, wait)
            raise SendError(f"{where}: asked to slow down ({said}); it will be retried", retry_after_s=wait)
        if result.status == 401:
            tokens.forget()
            raise SendError(f"{where}: the access token was refused ({said}); it will be retried with a new one")
        if 400 <= result.status < 500:
            raise SendError(f"{where}: refused ({said}); the reply is given up", permanent=True)
        raise SendError(f"{where}: failed ({said}); it will be retried")
