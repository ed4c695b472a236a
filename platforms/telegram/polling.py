"""``getUpdates`` long polls, one task per bot on one background event loop.

Telegram forgets an update only when a later ``getUpdates`` asks for a higher ``offset``. So each batch is
committed to the inbox with ``inbox.accept_many(..., cursor=next offset)``: the inbox rows and the stored offset
land in one transaction. A crash before that commit leaves the old offset stored, Telegram still holds the
updates and sends them again; a crash after it stores the new offset, which the next poll (after a restart too)
sends, confirming the batch. Nothing is lost and nothing is processed twice; the inbox's dedupe on
``<chat>:<message>`` catches the rest.

Photos and documents are downloaded into the media store (:mod:`platforms.telegram.files`) before their batch is
committed, so the inbox rows hold attachment records and a crash before the commit only downloads them again (the
media store writes the same bytes once).

An update that does not decode is logged and stepped over (its ``update_id`` still moves the offset), so one bad
update cannot stall a bot. Failed polls back off (``poll_retry_s`` doubling to ``poll_retry_max_s``, or
Telegram's ``retry_after``); a refused token or a webhook still set (409) is logged with the fix. ``stop()``
cancels the polls in flight, so it returns at once rather than after the long-poll timeout.

Each bot's poll is a :class:`~platforms.support.connections.Connection`: an answered poll says in its links that it
is up, a failed one says why (with the fix, for a refused token) until a poll is answered again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import aiohttp
import msgspec

from hermes_actors.messages import InboundMessage
from hermes_actors.ports import PollCursor, accept_many_async
from platforms.support.connections import Connection, Ended, doubling
from platforms.support.links import Links
from platforms.telegram.api import BotApi, BotApiError, read_answer, result_as
from platforms.telegram.config import TelegramConfig
from platforms.telegram.files import attach_files
from platforms.telegram.updates import (
    ALLOWED_UPDATES,
    PLATFORM,
    TelegramFile,
    UpdateError,
    callback_query_id,
    decode_update,
    files_of,
    inbound_from_update,
    update_id_of,
)

if TYPE_CHECKING:
    from hermes_actors.ports import ChatInbox

__all__ = ["BotPoll", "answer_presses", "read_offset"]

_log = logging.getLogger(__name__)

_GRACE_S = 15.0  # beyond the long-poll timeout, how long an answer may take before the poll counts as failed
_MAX_BATCH = 100  # getUpdates' own upper bound


async def answer_presses(session: aiohttp.ClientSession, bot: BotApi, messages: list[InboundMessage]) -> None:
    """Answer the button presses among ``messages`` once they are stored (``answerCallbackQuery``: the button stops
    spinning); best effort, a failure is logged."""
    for message in messages:
        query = callback_query_id(message)
        if query is None:
            continue
        try:
            async with session.post(bot.url("answerCallbackQuery"), json={"callback_query_id": query}) as answer:
                await answer.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            _log.info("telegram bot %r: could not answer a button press (%s)", bot.name, bot.redact(str(exc)))


def read_offset(inbox: ChatInbox, bot: str) -> int | None:
    """The stored ``getUpdates`` offset of ``bot``, or ``None`` (first start, or a value that is not a number)."""
    stored = inbox.poll_cursor(PLATFORM, bot)
    if stored is None:
        return None
    try:
        return int(stored)
    except ValueError:
        _log.warning("telegram bot %r: stored offset %r is not a number; polling from Telegram's oldest", bot, stored)
        return None


class _Batch(msgspec.Struct, frozen=True, kw_only=True):
    """What one poll brought: the messages to accept and the offset that confirms all of it."""

    messages: list[InboundMessage]
    next_offset: int | None
    files: list[tuple[int, list[TelegramFile]]] = msgspec.field(default_factory=list)  # message index -> to fetch


class BotPoll(Connection):
    """The ``getUpdates`` long poll of one bot, feeding its messages to ``inbox``: an attempt polls until a poll
    fails, and the count of failures restarts with each answered poll."""

    def __init__(
        self, bot: BotApi, inbox: ChatInbox, config: TelegramConfig, links: Links, *, clock: Callable[[], float]
    ) -> None:
        super().__init__(bot.name, inbox, who=f"telegram bot {bot.name!r}", links=links, log=_log)
        self.bot = bot
        self._config = config
        self._clock = clock
        self._offset = read_offset(inbox, bot.name)

    async def attempt(self, http: aiohttp.ClientSession) -> Ended:
        bot = self.bot
        while True:
            batch = await self._fetch(http, bot, self._offset)
            self.connected()
            if batch.messages or (batch.next_offset is not None and batch.next_offset != self._offset):
                await self._commit(bot, batch)
                self._offset = batch.next_offset
                await answer_presses(http, bot, batch.messages)

    async def _fetch(self, session: aiohttp.ClientSession, bot: BotApi, offset: int | None) -> _Batch:
        params: dict[str, Any] = {
            "timeout": self._config.poll_timeout_s,
            "limit": _MAX_BATCH,
            "allowed_updates": list(ALLOWED_UPDATES),
        }
        if offset is not None:
            params["offset"] = offset
        where = f"telegram bot '{bot.name}': getUpdates"
        timeout = aiohttp.ClientTimeout(total=self._config.poll_timeout_s + _GRACE_S)
        try:
            async with session.post(bot.url("getUpdates"), json=params, timeout=timeout) as response:
                body = await response.read()
                headers = {k.lower(): v for k, v in response.headers.items()}
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise BotApiError(f"{where}: {bot.redact(str(exc) or type(exc).__name__)}") from None
        items = result_as(read_answer(status, headers, body, where), list[msgspec.Raw], where)
        if items is None:
            raise BotApiError(f"{where}: the result is not a list of updates")
        return await self._download(session, bot, self._read_batch(bot, items, offset, where))

    async def _download(self, session: aiohttp.ClientSession, bot: BotApi, batch: _Batch) -> _Batch:
        """The batch with its messages' photos and documents saved into the media store as attachments."""
        if not batch.files:
            return batch
        messages = list(batch.messages)
        for index, files in batch.files:
            messages[index] = await attach_files(
                messages[index],
                files,
                bot=bot,
                media=self.inbox.media,
                session=session,
                timeout_s=self._config.request_timeout_s,
            )
        return _Batch(messages=messages, next_offset=batch.next_offset)

    def _read_batch(self, bot: BotApi, items: list[msgspec.Raw], offset: int | None, where: str) -> _Batch:
        messages: list[InboundMessage] = []
        files: list[tuple[int, list[TelegramFile]]] = []
        highest = None if offset is None else offset - 1
        numbered = 0
        for raw in items:
            update_id = update_id_of(raw)
            if update_id is None:
                _log.warning("telegram bot %r: skipped an update without an update_id: %.200r", bot.name, bytes(raw))
                continue
            numbered += 1
            highest = update_id if highest is None else max(highest, update_id)
            try:
                update = decode_update(raw)
                inbound = inbound_from_update(update, bot.name, received_at=self._clock())
            except UpdateError as exc:
                _log.warning("telegram bot %r: skipped update %d: %s", bot.name, update_id, exc)
                continue
            if inbound is not None:
                wanted = files_of(update)
                if wanted:
                    files.append((len(messages), wanted))
                messages.append(inbound)
        if items and not numbered:  # nothing to step over: polling again at once would get the same answer
            raise BotApiError(f"{where}: no update in the answer has an update_id")
        return _Batch(messages=messages, next_offset=None if highest is None else highest + 1, files=files)

    async def _commit(self, bot: BotApi, batch: _Batch) -> None:
        cursor = None
        if batch.next_offset is not None:
            cursor = PollCursor(platform=PLATFORM, cursor=str(batch.next_offset), account_id=bot.name)
        await accept_many_async(self.inbox, batch.messages, cursor=cursor)  # a cancelled poll still finishes it

    def failure(self, exc: Exception) -> Ended:
        """A failed poll: the Bot API's error (with the fix, for a refused token) and the wait it asks for."""
        if not isinstance(exc, BotApiError):
            return Ended(f"the poll failed ({str(exc) or type(exc).__name__})", error=exc)
        error = str(exc).removeprefix(f"{self.who}: ")
        wait = exc.retry_after_s
        if exc.status in (401, 404):
            error = (
                f"Telegram refused the token ({exc.description}); check platforms.telegram.bots.{self.name}.token or "
                "the variable named by token_env"
            )
            wait = self._config.poll_retry_max_s if wait is None else wait
        return Ended(error, wait, error=exc)

    def retrying(self, ended: Ended, wait: float) -> None:
        exc, name = ended.error, self.name
        if not isinstance(exc, BotApiError):
            _log.error("telegram bot %r: the poll failed; polling again in %.1f s", name, wait, exc_info=exc)
        elif exc.retry_after_s is not None:
            _log.warning("telegram bot %r: Telegram asked to wait %.0f s before polling again", name, wait)
        elif exc.status in (401, 404):
            _log.error(
                "telegram bot %r: Telegram refused the token (%s); check platforms.telegram.bots.%s.token or the "
                "variable named by token_env; trying again in %.0f s",
                name,
                exc.description,
                name,
                wait,
            )
        elif exc.status == 409:
            _log.error(
                "telegram bot %r: %s; another program polls with this token, or a webhook is set for it (remove it "
                "with deleteWebhook, or set mode: webhook); trying again in %.1f s",
                name,
                exc.description,
                wait,
            )
        else:
            _log.warning("telegram bot %r: the poll failed (%s); polling again in %.1f s", name, exc, wait)

    def backoff(self, failures: int) -> float:
        return doubling(failures, self._config.poll_retry_s, self._config.poll_retry_max_s)
