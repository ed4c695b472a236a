"""Replies to Matrix rooms: ``PUT /rooms/{roomId}/send/m.room.message/{txnId}``, split, paced per room.

Each part of a reply has a transaction id derived from the reply (account, room, thread, session, the messages it
answers, its text) and the part's position. A homeserver treats a repeated ``PUT`` with the same transaction id
from the same access token as the same request and answers with the event it already made, so a retry after an
unknown outcome (a timeout after the request left, a crash between send and confirmation) never shows a part
twice, and a retry after part 2 of 3 failed re-sends part 1 harmlessly: ``idempotent_sends`` is true. Servers
keep transaction ids for a limited time (implementation-defined), far longer than the outbox's retry backoff.

A reply in a thread carries ``m.relates_to`` with ``rel_type: m.thread`` and the root event, replying to the
message it answers; a reply to a group room (not a DM) quotes the message it answers (``m.in_reply_to``) and
mentions its sender, so in a busy room each person sees which answer is theirs. Every reply has ``m.mentions``, so
ids the agent writes out do not ping anyone. Parts are at most ``max_message_bytes`` of JSON-escaped UTF-8 (an
event is at most 64 KiB), cut at paragraphs, lines or sentences.

A reply carrying a document (``/save``) is uploaded (``POST /_matrix/media/v3/upload``) and posted as one
``m.file`` event (``filename``, ``url``, ``info``; the caption is the body) under a transaction id of its own, so a
retry after a lost answer shows it once; a file the homeserver refuses sends the reply's text instead
(:mod:`platforms.support.documents`).

Failures: 429 ``M_LIMIT_EXCEEDED`` comes back with ``retry_after_ms`` for the outbox, and the room stays quiet
until then; a refused access token (401 ``M_UNKNOWN_TOKEN``) says how to fix it and is retried; ``M_FORBIDDEN``
(the bot is not in the room or may not speak), ``M_NOT_FOUND``, 400 and 413 cannot be fixed by retrying, so the
reply is given up with the reason; 5xx and lost connections are retried.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from hermes_actors.messages import OutboundDocument, OutboundMessage
from platforms.base import SendError
from platforms.matrix.client import Homeserver, room_path
from platforms.matrix.config import MatrixConfig
from platforms.matrix.events import PLATFORM
from platforms.matrix.state import Snapshots
from platforms.matrix.wire import ApiError
from platforms.support.documents import before_posting, posting_failed, send_document
from platforms.support.ratelimit import Rate, RateLimiter
from platforms.support.text import split_message

__all__ = ["MAX_SLEEP_S", "MatrixSender", "transaction_id", "wire_length"]

_log = logging.getLogger(__name__)

MAX_SLEEP_S = 1.0  # a pacing wait longer than this goes back to the outbox instead of blocking it
_EVENT_ID = re.compile(r"\$[\x21-\x7e]{1,254}")
_USER_ID = re.compile(r"@[\x21-\x39\x3b-\x7e]{1,253}:[\x21-\x7e]{1,253}")
_PERMANENT = {
    "M_FORBIDDEN": "the bot is not in the room or may not post there",
    "M_NOT_FOUND": "the homeserver does not know the room",
    "M_TOO_LARGE": "the message is too large",
}


class _Sent(msgspec.Struct, frozen=True, kw_only=True):
    event_id: str


def wire_length(text: str) -> int:
    """The bytes ``text`` takes as a JSON string in an event (UTF-8, with escapes), without the quotes."""
    return len(msgspec.json.encode(text)) - 2


def transaction_id(message: OutboundMessage, part: int | str) -> str:
    """The same for every attempt at part ``part`` of ``message``, different between replies and parts."""
    identity = msgspec.json.encode(
        [
            message.account_id,
            message.chat_id,
            message.thread_id,
            message.session_id,
            message.reply_to,
            message.answers,
            message.text,
            message.outbox_id,  # two identical notices to one room are still two replies
        ]
    )
    return f"hermes-{hashlib.sha256(identity).hexdigest()[:40]}-{part}"


class MatrixSender:
    """The reply sender (and thread creator) of every account; a reply's ``account_id`` picks the account."""

    platform = PLATFORM
    idempotent_sends = True  # transaction ids: the homeserver drops a repeated PUT of the same part

    def __init__(
        self,
        homeservers: Mapping[str, Homeserver],
        config: MatrixConfig,
        rooms: Snapshots,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._homeservers = dict(homeservers)
        self._rooms = rooms
        self._limit = config.max_message_bytes
        self._sleep = sleep
        self._limiter = RateLimiter(
            per_key=Rate(per_second=config.room_messages_per_second, burst=config.room_burst), clock=clock
        )

    def send(self, message: OutboundMessage) -> str | None:
        """Send ``message`` (in parts when long) to its room and thread; return the event id of its first part."""
        api = self._account(message.account_id)
        room = message.chat_id
        if not room:
            raise SendError(f"matrix account '{api.name}': a reply without a room id cannot be sent", permanent=True)
        return send_document(
            message,
            lambda document: self._send_file(api, room, message, document),
            lambda: self._send_text(api, room, message),
            f"matrix account '{api.name}': a reply to {room}",
        )

    def _send_text(self, api: Homeserver, room: str, message: OutboundMessage) -> str | None:
        if not message.text.strip():
            _log.info("matrix account %r: an empty reply to %s is not sent", api.name, room)
            return None
        direct = self._rooms.is_direct(api.name, room)
        parts = split_message(message.text, self._limit, length=wire_length)
        first: str | None = None
        for index, part in enumerate(parts):
            content = _content(message, part, first=index == 0, direct=direct)
            event_id = self._put(api, room, transaction_id(message, index), content)
            first = first if first is not None else event_id
        return first

    def _send_file(
        self, api: Homeserver, room: str, message: OutboundMessage, document: OutboundDocument
    ) -> str | None:
        """Upload ``document`` to the media repository, then post it as one ``m.file`` event (its caption the body)."""
        what = f"matrix account '{api.name}': a file for {room}"
        with before_posting(what):
            uri = api.upload(document.name, document.mime_type, document.data, what=what)
        caption = split_message(document.caption, self._limit, length=wire_length)[0] if document.caption else ""
        content = _content(message, caption or document.name, first=True, direct=self._rooms.is_direct(api.name, room))
        info = {"mimetype": document.mime_type, "size": len(document.data)}
        content |= {"msgtype": "m.file", "filename": document.name, "url": uri, "info": info}
        try:
            return self._put(api, room, transaction_id(message, "file"), content)
        except SendError as exc:
            raise posting_failed(exc) from None

    def create_thread(self, chat_id: str, title: str, *, account_id: str = "") -> str:
        """Post ``title`` in room ``chat_id``; its event id is the root of the new thread."""
        api = self._account(account_id)
        text = split_message(title.strip() or "Handoff", self._limit, length=wire_length)[0]
        content = {"msgtype": "m.text", "body": text, "m.mentions": {}}
        event_id = self._put(api, chat_id, f"hermes-thread-{uuid.uuid4().hex}", content)
        if event_id is None:
            raise SendError(f"matrix account '{api.name}': the thread root in {chat_id} came back without an event id")
        return event_id

    def _account(self, account_id: str) -> Homeserver:
        api = self._homeservers.get(account_id)
        if api is None and not account_id and len(self._homeservers) == 1:
            (api,) = self._homeservers.values()
        if api is None:
            raise SendError(
                f"matrix: no account {account_id!r} is configured (add it under platforms.matrix.accounts); "
                "the reply stays in the transcript",
                permanent=True,
            )
        return api

    def _put(self, api: Homeserver, room_id: str, txn_id: str, content: dict[str, Any]) -> str | None:
        what = f"matrix account '{api.name}': a reply to {room_id}"
        key = f"{api.name}:{room_id}"
        wait = self._limiter.delay(key)
        if wait > MAX_SLEEP_S:
            raise SendError(f"{what}: held back {wait:.1f} s by the room's rate limit", retry_after_s=wait)
        if wait > 0:
            self._sleep(wait)
        try:
            body = api.put(room_path(room_id, "send", "m.room.message", txn_id), content, what=what)
        except ApiError as exc:
            raise self._send_error(api.name, key, exc) from None
        try:
            return msgspec.json.decode(body, type=_Sent).event_id
        except (msgspec.DecodeError, msgspec.ValidationError):
            _log.warning("%s: sent, but the answer has no event_id: %.200r", what, body)
            return None  # it was sent (2xx): no reason to send it again

    def _send_error(self, account: str, key: str, exc: ApiError) -> SendError:
        if exc.status == 429 or exc.retry_after_s is not None:
            if exc.retry_after_s is not None:
                self._limiter.penalise(key, exc.retry_after_s)
            return SendError(
                f"{exc}; the homeserver asked to slow down, it will be retried", retry_after_s=exc.retry_after_s
            )
        if exc.status is None:
            if exc.outcome_unknown:
                return SendError(
                    f"{exc}; it will be retried under the same transaction id, so the homeserver keeps one copy",
                    outcome_unknown=True,
                )
            return SendError(f"{exc}; it will be retried")
        if exc.token_refused:
            return SendError(
                f"{exc}; the homeserver does not accept the access token: log the bot in again and put the new token "
                f"in platforms.matrix.accounts.{account}.access_token (or access_token_env); it will be retried"
            )
        if exc.status in (400, 403, 404, 413) or exc.errcode in _PERMANENT:
            why = _PERMANENT.get(exc.errcode, "the homeserver refused the message")
            return SendError(f"{exc}; {why}, so no retry can succeed and the reply is given up", permanent=True)
        return SendError(f"{exc}; it will be retried")


def _content(message: OutboundMessage, text: str, *, first: bool, direct: bool | None) -> dict[str, Any]:
    """The event content of one part: the text, and the thread, quote and mentions it belongs to."""
    content: dict[str, Any] = {"msgtype": "m.text", "body": text, "m.mentions": {}}
    answered = message.reply_to if message.reply_to and _EVENT_ID.fullmatch(message.reply_to) else None
    if message.thread_id:
        content["m.relates_to"] = {
            "rel_type": "m.thread",
            "event_id": message.thread_id,
            # A real reply to the message answered for the first part; for the rest, the fallback other clients need.
            "is_falling_back": not (first and answered),
            "m.in_reply_to": {"event_id": answered or message.thread_id},
        }
    elif first and answered and direct is False:
        content["m.relates_to"] = {"m.in_reply_to": {"event_id": answered}}
        if message.user_id and _USER_ID.fullmatch(message.user_id):
            content["m.mentions"] = {"user_ids": [message.user_id]}
    return content
