"""Replies to Mattermost: ``POST /api/v4/posts`` split at the message limit, into the thread they belong to.

A reply goes to its chat (``channel_id``) and, when it has a thread, into it (``root_id``: the thread's root post).
Longer replies leave as several posts cut at paragraph, line or sentence boundaries; if part 3 of 4 fails, the retry
resumes after the parts already posted (:mod:`platforms.support.progress`, keyed by the outbox id).

Each part carries a ``pending_post_id`` derived from the outbox id, the reply and the part: Mattermost answers a
repeat within its dedupe window (about 30 s) with the post it already made, so a retry after a lost answer does not
post twice. Beyond that window a retry can duplicate, so sends do not count as idempotent.

A reply carrying a document (``/save``) uploads it (``POST /api/v4/files``) and makes one post naming it in
``file_ids``, its caption the message, under a ``pending_post_id`` of its own; a file the server refuses (uploads
off, too large) sends the reply's text instead (:mod:`platforms.support.documents`).

A ``/handoff`` thread is a root post naming it (:meth:`MattermostSender.create_thread`); its id is the thread id.
A 429 comes back as ``SendError(retry_after_s=...)``; refusals no retry can fix (the channel is gone, the bot may not
post there, a root post that does not exist, a body the server rejects: HTTP 400, 403 and 404) are permanent, so the
outbox gives that reply up, recording why, and goes on with the chat. A refused token (401) is retried with a hint.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Mapping
from typing import Any

from hermes_actors.messages import OutboundDocument, OutboundMessage
from platforms.base import SendError
from platforms.mattermost.events import PLATFORM
from platforms.mattermost.rest import RestClient, RestError
from platforms.support.documents import FormFile, before_posting, posting_failed, send_document
from platforms.support.progress import PartProgress, reply_identity
from platforms.support.text import split_message

__all__ = ["MattermostSender", "pending_post_id"]

_log = logging.getLogger(__name__)

_ID = re.compile(r"[a-z0-9]{26}")
_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
_MAX_THREAD_TITLE = 200


def pending_post_id(identity: str, index: int | str) -> str:
    """A 26-character id, the same on every attempt at part ``index`` of the reply ``identity``."""
    number = int.from_bytes(hashlib.sha256(f"{identity}:{index}".encode()).digest()[:17])
    letters = []
    for _ in range(26):
        number, digit = divmod(number, len(_ALPHABET))
        letters.append(_ALPHABET[digit])
    return "".join(letters)


class MattermostSender:
    """The reply sender (and thread creator) of every configured bot; the reply's ``account_id`` picks the bot."""

    platform = PLATFORM
    idempotent_sends = False  # pending_post_id covers seconds, not the outbox's whole retry horizon

    def __init__(self, bots: Mapping[str, RestClient], *, max_message_chars: int) -> None:
        self._bots = dict(bots)
        self._limit = max_message_chars
        self._progress: PartProgress[str] = PartProgress()

    def send(self, message: OutboundMessage) -> str | None:
        """Post ``message`` (in parts when long) to its channel or thread; return the id of its first part."""
        rest = self._bot(message.account_id)
        channel = message.chat_id
        if not channel or not _ID.fullmatch(channel):
            raise SendError(
                f"mattermost bot {rest.name!r}: {channel!r} is not a channel id; the reply is given up", permanent=True
            )
        root = message.thread_id if message.thread_id and _ID.fullmatch(message.thread_id) else ""
        return send_document(
            message,
            lambda document: self._post_file(rest, channel, root, message, document),
            lambda: self._send_text(rest, channel, root, message),
            f"mattermost bot '{rest.name}': a reply to channel {channel}",
        )

    def _send_text(self, rest: RestClient, channel: str, root: str, message: OutboundMessage) -> str | None:
        parts = split_message(message.text, self._limit) if message.text.strip() else []
        if not parts:
            _log.info("mattermost bot %r: an empty reply to channel %s is not sent", rest.name, channel)
            return None
        identity = reply_identity(message)
        sent = self._progress.sent(message)
        for index in range(len(sent), len(parts)):
            body: dict[str, Any] = {"channel_id": channel, "message": parts[index]}
            if root:
                body["root_id"] = root
            body["pending_post_id"] = pending_post_id(identity, index)
            try:
                sent.append(self._post(rest, body))
            except SendError:
                if sent:
                    self._progress.remember(message, sent)
                raise
        self._progress.forget(message)
        return sent[0]

    def _post_file(
        self, rest: RestClient, channel: str, root: str, message: OutboundMessage, document: OutboundDocument
    ) -> str:
        """Upload ``document`` to the channel, then one post naming it in ``file_ids``, its caption the message."""
        with before_posting(f"mattermost bot '{rest.name}': a file for channel {channel}"):
            file = FormFile(field="files", name=document.name, mime_type=document.mime_type, data=document.data)
            file_id = rest.upload_file(channel, file)
        body: dict[str, Any] = {
            "channel_id": channel,
            "message": document.caption[: self._limit],
            "file_ids": [file_id],
        }
        if root:
            body["root_id"] = root
        body["pending_post_id"] = pending_post_id(reply_identity(message), "file")
        try:
            return self._post(rest, body)
        except SendError as exc:
            raise posting_failed(exc) from None

    def create_thread(self, chat_id: str, title: str, *, account_id: str = "") -> str:
        """Start a thread in channel ``chat_id`` with a root post saying ``title``; return the root post's id."""
        rest = self._bot(account_id)
        text = title.strip()[:_MAX_THREAD_TITLE] or "Handoff"
        return self._post(rest, {"channel_id": chat_id, "message": text})

    def _bot(self, account_id: str) -> RestClient:
        rest = self._bots.get(account_id)
        if rest is None and not account_id and len(self._bots) == 1:
            rest = next(iter(self._bots.values()))
        if rest is None:
            raise SendError(
                f"mattermost: no bot named {account_id!r} is configured; add it under platforms.mattermost.bots",
                permanent=True,
            )
        return rest

    def _post(self, rest: RestClient, body: dict[str, Any]) -> str:
        try:
            return rest.create_post(body).id
        except RestError as exc:
            raise _send_error(exc) from None


def _send_error(exc: RestError) -> SendError:
    if exc.retry_after_s is not None:
        return SendError(f"{exc}; it will be retried then", retry_after_s=exc.retry_after_s)
    if exc.outcome_unknown:
        return SendError(f"{exc}; it will be retried (Mattermost drops a quick repeat of it)", outcome_unknown=True)
    if exc.status == 401:
        return SendError(f"{exc}: Mattermost refused the bot's token; set a new one (the reply is retried meanwhile)")
    if exc.status in (400, 403, 404):
        return SendError(
            f"{exc}: Mattermost refuses this post, so no retry can succeed; the reply is given up", permanent=True
        )
    if exc.status == 200:  # posted, but the answer was not a post: sending again would duplicate it
        _log.warning("%s; the post was made", exc)
        return SendError(f"{exc}; the post was probably made", outcome_unknown=True)
    return SendError(f"{exc}; it will be retried with backoff")
