"""Replies to Discord: ``POST /channels/{id}/messages`` split at 2,000 characters, and threads for handoffs.

A reply goes to its thread when it has one (a thread is a channel of its own), else to its chat. Longer replies
leave as several messages cut at paragraph, line or sentence boundaries; if part 3 of 4 fails, the retry resumes
after the parts already posted (remembered in memory). In a guild the first part replies to (quotes) the message it
answers, so in a busy channel each member sees which answer is theirs. Mentions in the agent's text never ping
anyone (``allowed_mentions`` is empty): a user cannot make the bot ping ``@everyone``.

A reply from the outbox (or one that answers messages) carries a ``nonce`` derived from its outbox id, the reply
and the part, with ``enforce_nonce``: Discord answers a repeat within a few minutes with the message it already
created, so a retry after a lost answer, or after a crash between the send and its confirmation, does not post
twice (the outbox id is the row's, the same after a restart). Beyond that window a retry can duplicate, so sends
do not count as idempotent.

A reply carrying a document (``/save``) is one message with the file as ``files[0]`` of a ``multipart/form-data``
body and its caption as the content, under a nonce of its own; a file Discord refuses (too large, no Attach Files
permission) sends the reply's text instead (:mod:`platforms.support.documents`).

Pacing is :mod:`platforms.discord.rest`'s buckets; a 429 comes back as ``SendError(retry_after_s=...)``. Refusals
no retry can fix (unknown channel, missing access or permissions, a user who takes no DMs, a body Discord rejects)
are permanent, so the outbox gives that reply up and goes on with the chat.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Mapping
from typing import Any

import msgspec

from hermes_actors.messages import OutboundDocument, OutboundMessage
from platforms.base import SendError
from platforms.discord.events import PLATFORM, ChannelCache
from platforms.discord.rest import RestClient, RestError
from platforms.support.documents import FormFile, UploadFailed, posting_failed, send_document
from platforms.support.progress import PartProgress, reply_identity
from platforms.support.text import split_message

__all__ = ["MAX_FILE_BYTES", "MAX_THREAD_NAME", "DiscordSender"]

_log = logging.getLogger(__name__)

MAX_THREAD_NAME = 100
MAX_FILE_BYTES = 10 * 1024 * 1024  # what a bot may upload to a server without boosts
_FORUM_TYPES = frozenset({15, 16})  # forum and media channels: a thread there starts with a message
_SNOWFLAKE = re.compile(r"[0-9]{1,20}")
_HINTS = {
    10003: "the channel no longer exists",
    10008: "the message it answers no longer exists",
    50001: "the bot cannot see the channel; invite it or grant it View Channel",
    50007: "the user does not accept direct messages from the bot",
    50013: "the bot lacks permission to send here (Send Messages, or Send Messages in Threads)",
    50024: "this kind of channel cannot take the request",
    50035: "Discord rejected the request body",
    50083: "the thread is archived",
}


class DiscordSender:
    """The reply sender (and thread creator) of every configured bot; the reply's ``account_id`` picks the bot."""

    platform = PLATFORM
    idempotent_sends = False  # the nonce covers minutes, not the outbox's whole retry horizon

    def __init__(self, bots: Mapping[str, RestClient], cache: ChannelCache, *, max_message_chars: int) -> None:
        self._bots = dict(bots)
        self._cache = cache
        self._limit = max_message_chars
        self._progress: PartProgress[str | None] = PartProgress()  # the parts of partly sent replies

    def send(self, message: OutboundMessage) -> str | None:
        """Post ``message`` (in parts when long) to its thread or chat; return the id of its first part."""
        rest = self._bot(message.account_id)
        channel = message.thread_id or message.chat_id
        if not channel:
            _log.info("discord bot %r: a reply without a channel is not sent", rest.name)
            return None
        return send_document(
            message,
            lambda document: self._post_file(rest, channel, message, document),
            lambda: self._send_text(rest, channel, message),
            f"discord bot '{rest.name}': a reply to channel {channel}",
        )

    def _send_text(self, rest: RestClient, channel: str, message: OutboundMessage) -> str | None:
        parts = split_message(message.text, self._limit) if message.text.strip() else []
        if not parts:
            _log.info("discord bot %r: an empty reply to channel %s is not sent", rest.name, channel)
            return None
        identity = reply_identity(message)
        sent = self._progress.sent(message)
        for index in range(len(sent), len(parts)):
            try:
                sent.append(self._post(rest, channel, message, parts[index], index, identity))
            except SendError:
                if sent:
                    self._progress.remember(message, sent)
                raise
        self._progress.forget(message)
        return sent[0]

    def create_thread(self, chat_id: str, title: str, *, account_id: str = "") -> str:
        """Open a public thread in channel ``chat_id`` (a post in a forum) named ``title``; return its id."""
        rest = self._bot(account_id)
        name = title.strip()[:MAX_THREAD_NAME] or "Handoff"
        body: dict[str, Any] = {"name": name, "auto_archive_duration": 1440}
        parent = self._cache.get(chat_id)
        if parent is not None and parent.type in _FORUM_TYPES:
            body["message"] = {"content": name, "allowed_mentions": {"parse": []}}
        else:
            body["type"] = 11  # PUBLIC_THREAD
        try:
            thread = rest.start_thread(chat_id, body)
        except RestError as exc:
            raise SendError(
                f"{exc}: cannot open a thread there; threads need a guild text or forum channel in which the bot "
                "may create public threads",
                retry_after_s=exc.retry_after_s,
                outcome_unknown=exc.outcome_unknown,
            ) from None
        guild = thread.guild_id or (parent.guild_id if parent is not None else None)
        self._cache.put([msgspec.structs.replace(thread, parent_id=thread.parent_id or chat_id, guild_id=guild)])
        return thread.id

    def _bot(self, account_id: str) -> RestClient:
        rest = self._bots.get(account_id)
        if rest is None and not account_id and len(self._bots) == 1:
            rest = next(iter(self._bots.values()))
        if rest is None:
            raise SendError(
                f"discord: no bot named {account_id!r} is configured; add it under platforms.discord.bots",
                permanent=True,
            )
        return rest

    def _post(
        self, rest: RestClient, channel: str, message: OutboundMessage, text: str, index: int | str, identity: str
    ) -> str | None:
        body = self._body(channel, message, text, index, identity)
        try:
            return rest.create_message(channel, body)
        except RestError as exc:
            if exc.status is not None and 200 <= exc.status < 300:
                _log.warning("%s; the message was posted", exc)
                return None  # it went out: sending it again would duplicate it
            raise _send_error(exc) from None

    def _post_file(
        self, rest: RestClient, channel: str, message: OutboundMessage, document: OutboundDocument
    ) -> str | None:
        """The document as ``files[0]`` of one message, its caption as the content (one request, one message)."""
        if len(document.data) > MAX_FILE_BYTES:
            raise UploadFailed(f"the file is {len(document.data):,} bytes, more than a bot may upload")
        body = self._body(channel, message, document.caption[: self._limit], "file", reply_identity(message))
        body["attachments"] = [{"id": 0, "filename": document.name}]
        file = FormFile(field="files[0]", name=document.name, mime_type=document.mime_type, data=document.data)
        try:
            return rest.create_message(channel, body, file=file)
        except RestError as exc:
            if exc.status is not None and 200 <= exc.status < 300:
                _log.warning("%s; the message was posted", exc)
                return None
            raise posting_failed(_send_error(exc)) from None

    def _body(
        self, channel: str, message: OutboundMessage, text: str, index: int | str, identity: str
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"content": text, "allowed_mentions": {"parse": []}}
        if message.answers or message.outbox_id is not None:  # unique replies; a bare notice may repeat on purpose
            body["nonce"] = hashlib.sha256(f"{identity}:{index}".encode()).hexdigest()[:25]
            body["enforce_nonce"] = True
        if index in (0, "file") and self._quotes(channel, message.reply_to):
            body["message_reference"] = {"message_id": message.reply_to, "fail_if_not_exists": False}
        return body

    def _quotes(self, channel: str, reply_to: str | None) -> bool:
        if reply_to is None or not _SNOWFLAKE.fullmatch(reply_to):
            return False
        known = self._cache.get(channel)
        return known is None or not known.is_dm


def _send_error(exc: RestError) -> SendError:
    if exc.retry_after_s is not None:
        return SendError(f"{exc}; it will be retried then", retry_after_s=exc.retry_after_s)
    if exc.outcome_unknown:
        return SendError(f"{exc}; it will be retried (Discord drops a repeat of the same nonce)", outcome_unknown=True)
    if exc.status == 401:
        return SendError(f"{exc}: Discord refused the bot token; fix it in platforms.discord.bots (it will be retried)")
    if exc.status in (400, 403, 404):
        hint = _HINTS.get(exc.code or 0, "Discord refuses this request")
        return SendError(f"{exc}: {hint}; no retry can succeed, so the reply is given up", permanent=True)
    return SendError(f"{exc}; it will be retried with backoff")
