"""Replies to Telegram: ``sendMessage`` split at 4096 UTF-16 units, paced per chat, and forum topics for handoffs.

A reply longer than Telegram's limit leaves as several messages, cut at paragraph, line or sentence boundaries
(:func:`platforms.support.text.split_message` counting UTF-16 code units, as Telegram does). If part 3 of 4 fails, the
outbox retries the reply and this sender remembers, in memory, which parts already went, so the chat does not
see parts 1 and 2 twice; only a crash in between can repeat them. Telegram has no way to mark a message as a
possible duplicate, so a reply the outbox flags that way is sent as it is.

Pacing: before each message the chat's token bucket (about one message a second, a small burst for the parts of
one reply), the group bucket (about twenty a minute) and the bot's bucket (about thirty a second) are taken. A
short wait is slept through; a longer one hands the reply back to the outbox with ``retry_after`` so other chats
are not held up. A 429 from Telegram carries ``parameters.retry_after``: the reply comes back then, and the chat
stays quiet until then. Replies to a group quote the message they answer (``reply_parameters``), so in a busy
group each person sees which answer is theirs; a reply in a forum topic goes to the same topic. A reply carrying a
document (``/save``) is one ``sendDocument`` upload, its caption cut to Telegram's 1024 characters; when Telegram
refuses it, the reply's text goes instead (:mod:`platforms.support.documents`). A reply asking for approval
(``OutboundMessage.approval``) carries Approve and Deny buttons on its last part (an inline keyboard; a press comes
back as a ``callback_query``, :mod:`platforms.telegram.updates`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from hermes_actors.messages import ApprovalRequest, OutboundDocument, OutboundMessage
from platforms.base import SendError
from platforms.support.documents import FormFile, posting_failed, send_document
from platforms.support.progress import PartProgress
from platforms.support.ratelimit import Rate, RateLimiter
from platforms.support.text import split_message, utf16_length
from platforms.telegram.api import BotApi, BotApiError, result_as
from platforms.telegram.config import TelegramConfig
from platforms.telegram.updates import PLATFORM, approval_markup

__all__ = ["MAX_MESSAGE_UTF16", "MAX_SLEEP_S", "MAX_TOPIC_NAME", "TelegramSender"]

_log = logging.getLogger(__name__)

MAX_MESSAGE_UTF16 = 4096  # sendMessage's text limit, in UTF-16 code units
MAX_TOPIC_NAME = 128  # createForumTopic's name limit
MAX_CAPTION = 1024  # sendDocument's caption limit, in characters
MAX_SLEEP_S = 1.0  # a pacing wait longer than this goes back to the outbox instead of blocking it


class _SentMessage(msgspec.Struct, frozen=True, kw_only=True):
    message_id: int


class _ForumTopic(msgspec.Struct, frozen=True, kw_only=True):
    message_thread_id: int


class _Limits:
    """The buckets of one bot."""

    def __init__(self, config: TelegramConfig, clock: Callable[[], float]) -> None:
        self.chats = RateLimiter(
            per_key=Rate(per_second=config.chat_messages_per_second, burst=config.chat_burst),
            overall=Rate(per_second=config.bot_messages_per_second, burst=config.bot_messages_per_second),
            clock=clock,
        )
        self.groups = RateLimiter(
            per_key=Rate(per_second=config.group_messages_per_minute / 60, burst=config.chat_burst), clock=clock
        )


def _chat_ref(chat_id: str) -> int | str:
    """A chat id as the Bot API takes it: an integer, or a ``@username`` string."""
    try:
        return int(chat_id)
    except ValueError:
        return chat_id


def _is_group(chat_id: str) -> bool:
    """Group, supergroup and channel ids are negative; a private chat's id is its user's."""
    return chat_id.startswith("-")


class TelegramSender:
    """The reply sender (and thread creator) for every configured bot; the reply's ``account_id`` picks the bot."""

    platform = PLATFORM
    idempotent_sends = False  # Telegram has no idempotency key for sendMessage

    def __init__(
        self,
        bots: Mapping[str, BotApi],
        config: TelegramConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._bots = dict(bots)
        self._limits = {name: _Limits(config, clock) for name in bots}
        self._sleep = sleep
        self._progress: PartProgress[str | None] = PartProgress()  # the parts of partly sent replies
        self._migrated: dict[tuple[str, str], str] = {}  # (bot, old group id) -> supergroup id

    def send(self, message: OutboundMessage) -> str | None:
        """Send ``message`` (in parts when long); return the Telegram message id of its first part."""
        api = self._bot(message.account_id)
        if api is None:
            _log.warning(
                "telegram: no bot named %r is configured; a reply to chat %s stays in the transcript",
                message.account_id,
                message.chat_id,
            )
            return None
        if message.chat_id is None:
            _log.info("telegram bot %r: a reply with no chat is not sent", api.name)
            return None
        what = f"telegram bot '{api.name}': a reply to chat {message.chat_id}"
        return send_document(
            message,
            lambda document: self._send_document(api, message, document),
            lambda: self._send_text(api, message),
            what,
        )

    def _send_text(self, api: BotApi, message: OutboundMessage) -> str | None:
        if not message.text.strip():
            _log.info("telegram bot %r: a reply with no text is not sent", api.name)
            return None
        parts = split_message(message.text, MAX_MESSAGE_UTF16, length=utf16_length)
        sent = self._progress.sent(message)
        asked = message.approval if isinstance(message.approval, ApprovalRequest) else None
        for index in range(len(sent), len(parts)):
            markup = approval_markup(asked.id) if asked is not None and index == len(parts) - 1 else None
            sent.append(self._send_part(api, message, parts[index], quote=index == 0, markup=markup))
            if index + 1 < len(parts):
                self._progress.remember(message, sent)
        self._progress.forget(message)
        return sent[0]

    def create_thread(self, chat_id: str, title: str, *, account_id: str = "") -> str:
        """Open a forum topic named ``title`` in ``chat_id``; return its ``message_thread_id``."""
        api = self._bot(account_id)
        if api is None:
            raise SendError(f"telegram: no bot named {account_id!r} is configured to open a topic in chat {chat_id}")
        name = title.strip()[:MAX_TOPIC_NAME] or "Handoff"
        try:
            result = api.call("createForumTopic", {"chat_id": _chat_ref(chat_id), "name": name})
        except BotApiError as exc:
            raise SendError(
                f"telegram bot '{api.name}': cannot open a topic in chat {chat_id} ({exc.description}); topics need a "
                "forum supergroup in which the bot is an admin allowed to manage topics",
                retry_after_s=exc.retry_after_s,
                outcome_unknown=exc.outcome_unknown,
            ) from None
        topic = result_as(result, _ForumTopic, f"telegram bot '{api.name}': createForumTopic")
        if topic is None:
            raise SendError(f"telegram bot '{api.name}': createForumTopic answered without a message_thread_id")
        return str(topic.message_thread_id)

    def _bot(self, account_id: str) -> BotApi | None:
        if not account_id and len(self._bots) == 1:
            return next(iter(self._bots.values()))
        return self._bots.get(account_id)

    def _send_part(
        self, api: BotApi, message: OutboundMessage, text: str, *, quote: bool, markup: dict[str, Any] | None = None
    ) -> str | None:
        assert message.chat_id is not None
        chat_id = self._migrated.get((api.name, message.chat_id), message.chat_id)
        what = f"telegram bot '{api.name}': a reply to chat {chat_id}"
        self._pace(api.name, chat_id, what)
        params: dict[str, Any] = {"chat_id": _chat_ref(chat_id), "text": text}
        if message.thread_id is not None and message.thread_id.isdigit():
            params["message_thread_id"] = int(message.thread_id)
        quoted = _quoted_message(message) if quote and _is_group(chat_id) else None
        if quoted is not None:
            params["reply_parameters"] = {"message_id": quoted, "allow_sending_without_reply": True}
        if markup is not None:
            params["reply_markup"] = markup
        try:
            result = api.call("sendMessage", params)
        except BotApiError as exc:
            if exc.migrate_to is None:
                raise self._send_error(api.name, chat_id, exc, what) from None
            new_id = str(exc.migrate_to)
            _log.info("telegram bot %r: group %s became supergroup %s; sending there", api.name, chat_id, new_id)
            self._migrated[(api.name, message.chat_id)] = new_id
            params["chat_id"] = exc.migrate_to
            params.pop("reply_parameters", None)  # the message ids of the old group do not carry over
            try:
                result = api.call("sendMessage", params)
            except BotApiError as again:
                raise self._send_error(api.name, new_id, again, what) from None
        sent = result_as(result, _SentMessage, f"{what}: sendMessage")
        return None if sent is None else str(sent.message_id)  # it was sent: no id is no reason to send it again

    def _send_document(self, api: BotApi, message: OutboundMessage, document: OutboundDocument) -> str | None:
        assert message.chat_id is not None
        chat_id = self._migrated.get((api.name, message.chat_id), message.chat_id)
        what = f"telegram bot '{api.name}': a document for chat {chat_id}"
        self._pace(api.name, chat_id, what)
        fields = {"chat_id": chat_id, "caption": document.caption[:MAX_CAPTION]}
        if message.thread_id is not None and message.thread_id.isdigit():
            fields["message_thread_id"] = message.thread_id
        quoted = _quoted_message(message) if _is_group(chat_id) else None
        if quoted is not None:
            fields["reply_parameters"] = f'{{"message_id": {quoted}, "allow_sending_without_reply": true}}'
        file = FormFile(field="document", name=document.name, mime_type=document.mime_type, data=document.data)
        try:
            result = api.upload("sendDocument", fields, file)
        except BotApiError as exc:
            raise posting_failed(self._send_error(api.name, chat_id, exc, what)) from None
        sent = result_as(result, _SentMessage, f"{what}: sendDocument")
        return None if sent is None else str(sent.message_id)

    def _pace(self, bot: str, chat_id: str, what: str) -> None:
        limits = self._limits[bot]
        wait = limits.chats.delay(chat_id)
        if _is_group(chat_id):
            wait = max(wait, limits.groups.delay(chat_id))
        if wait > MAX_SLEEP_S:
            raise SendError(f"{what}: held back {wait:.1f} s by the chat's rate limit", retry_after_s=wait)
        if wait > 0:
            self._sleep(wait)

    def _send_error(self, bot: str, chat_id: str, exc: BotApiError, what: str) -> SendError:
        if exc.retry_after_s is not None:
            self._limits[bot].chats.penalise(chat_id, exc.retry_after_s)
        if exc.outcome_unknown:
            text = f"{exc}; it will be retried and flagged as a possible duplicate"
        elif exc.status == 429:
            text = f"{what}: Telegram asked to slow down ({exc.description}); it will be retried"
        elif _permanent(exc):
            text = f"{exc}; no retry can succeed, so the reply is given up"
        else:
            text = f"{exc}; it will be retried"
        return SendError(
            text, retry_after_s=exc.retry_after_s, outcome_unknown=exc.outcome_unknown, permanent=_permanent(exc)
        )


def _permanent(exc: BotApiError) -> bool:
    """403: the bot was blocked, kicked or the user is gone; 400 ... not found: the chat or topic no longer exists."""
    if exc.outcome_unknown:
        return False
    return exc.status == 403 or (exc.status == 400 and "not found" in exc.description.lower())


def _quoted_message(message: OutboundMessage) -> int | None:
    """The Telegram message id a reply answers, when its inbound id (``<chat>:<message>``) is from the same chat."""
    chat, _, number = (message.reply_to or "").rpartition(":")
    return int(number) if chat == message.chat_id and number.isdigit() else None
