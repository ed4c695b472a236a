"""Replies to WeChat: ``sendmessage`` with the peer's latest ``context_token``, split at the length limit.

iLink routes a bot's message by the ``context_token`` of the conversation it answers, and each inbound message
brings a fresh one, so the adapter keeps the latest per (account, chat) in :class:`ContextTokens`: in memory, and
durably in the store, written before the turn that will need it is committed, so a reply replayed after a restart
still has it. (They live as extra poll-cursor rows under :data:`TOKEN_PLATFORM`, the one durable key-value write
an adapter has; see the adapter docs.)

A long reply leaves as several messages. Each part has a ``client_id`` derived from the reply (its outbox id
included, so it is the same after a restart) and its index, and the sender remembers how many parts of a reply
went out, so a retry after part 3 failed starts at part 3.

A reply carrying a document (``/save``) is sent as its text: iLink takes files only through Weixin's CDN (an
encrypted upload to a host the API names), not through the configured API.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING

import msgspec

from hermes_actors.messages import OutboundMessage
from hermes_actors.ports import PollCursor
from platforms.base import SendError
from platforms.support import http_client
from platforms.support.ratelimit import Rate, RateLimiter
from platforms.support.text import split_message
from platforms.wechat.wire import (
    BASE_INFO,
    RATE_LIMITED,
    SESSION_EXPIRED,
    Malformed,
    decode_send_answer,
    error_code,
    request_headers,
)

if TYPE_CHECKING:
    from hermes_actors.ports import ChatInbox

__all__ = ["TOKEN_PLATFORM", "AccountAuth", "ContextTokens", "WechatSender"]

_log = logging.getLogger(__name__)

TOKEN_PLATFORM = "wechat:context_token"
_PLATFORM = "wechat"
_MESSAGE_TYPE_BOT = 2
_MESSAGE_STATE_FINISH = 2
_TEXT = 1
_PROGRESS_LIMIT = 1000  # partly sent replies remembered


class AccountAuth(msgspec.Struct, frozen=True, kw_only=True):
    """What calling the API as one account takes."""

    name: str
    token: str
    base_url: str

    def url(self, method: str) -> str:
        return f"{self.base_url.rstrip('/')}/ilink/bot/{method}"


def _token_key(account: str, chat_id: str) -> str:
    return msgspec.json.encode([account, chat_id]).decode()


class ContextTokens:
    """The latest ``context_token`` per (account, chat), in memory and in the store."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: dict[tuple[str, str], str] = {}
        self._inbox: ChatInbox | None = None

    def attach(self, inbox: ChatInbox) -> None:
        """Store tokens through ``inbox`` from now on."""
        self._inbox = inbox

    def remember(self, account: str, chat_id: str, token: str) -> None:
        """Make ``token`` the latest for the chat; it is durable when this returns (or it raises)."""
        with self._lock:
            if self._latest.get((account, chat_id)) == token:
                return
        inbox = self._inbox
        if inbox is not None:
            cursor = PollCursor(platform=TOKEN_PLATFORM, cursor=token, account_id=_token_key(account, chat_id))
            inbox.accept_many([], cursor=cursor)
        with self._lock:
            self._latest[(account, chat_id)] = token

    def latest(self, account: str, chat_id: str) -> str | None:
        """The latest token for the chat, from memory or else the store; ``None`` when it never wrote."""
        with self._lock:
            token = self._latest.get((account, chat_id))
        if token is not None:
            return token
        inbox = self._inbox
        if inbox is None:
            raise SendError("the WeChat adapter has not started yet, so the chat's context_token is not loaded")
        token = inbox.poll_cursor(TOKEN_PLATFORM, _token_key(account, chat_id))
        if token is not None:
            with self._lock:
                self._latest.setdefault((account, chat_id), token)
        return token


def _reply_id(message: OutboundMessage) -> str:
    """The same for every attempt at one reply (in any process: the outbox id is the row's), different between
    replies."""
    identity = msgspec.json.encode(
        [message.outbox_id, message.session_id, message.reply_to, message.answers, message.text]
    )
    return "hermes-" + hashlib.sha256(identity).hexdigest()[:24]


class WechatSender:
    """Sends replies through the account that received the conversation (``OutboundMessage.account_id``)."""

    platform = _PLATFORM
    idempotent_sends = False  # nothing says iLink drops a repeated client_id

    def __init__(
        self,
        accounts: Mapping[str, AccountAuth],
        tokens: ContextTokens,
        *,
        max_chars: int,
        timeout_s: float,
        rate_limit_backoff_s: float,
        session_expired_backoff_s: float,
        per_chat: Rate,
    ) -> None:
        self._accounts = accounts
        self._tokens = tokens
        self._max_chars = max_chars
        self._timeout = timeout_s
        self._rate_limit_backoff = rate_limit_backoff_s
        self._session_expired_backoff = session_expired_backoff_s
        self._limiter = RateLimiter(per_key=per_chat)
        self._lock = threading.Lock()
        self._progress: OrderedDict[str, int] = OrderedDict()  # reply id -> parts already sent
        self._told: set[str] = set()

    def send(self, message: OutboundMessage) -> str | None:
        """Send ``message`` (in parts when long); return the ``client_id`` of its last part."""
        account = self._accounts.get(message.account_id)
        if account is None or not message.chat_id:
            if message.account_id not in self._told:
                self._told.add(message.account_id)
                why = "has no chat to answer" if account is not None else "is not configured any more"
                _log.warning("wechat account %r %s: its replies stay in the transcript", message.account_id, why)
            return None
        if not message.text.strip():
            return None
        chat_id = message.chat_id
        parts = split_message(message.text, self._max_chars)
        reply_id = _reply_id(message)
        with self._lock:
            start = self._progress.get(reply_id, 0)
        token = self._tokens.latest(account.name, chat_id)
        for index in range(start, len(parts)):
            try:
                self._send_part(account, chat_id, parts[index], token, f"{reply_id}-{index}")
            except SendError:
                self._note_progress(reply_id, index)
                raise
        self._note_progress(reply_id, None)
        return f"{reply_id}-{len(parts) - 1}"

    def _note_progress(self, reply_id: str, sent: int | None) -> None:
        with self._lock:
            self._progress.pop(reply_id, None)
            if sent:
                self._progress[reply_id] = sent
                while len(self._progress) > _PROGRESS_LIMIT:
                    self._progress.popitem(last=False)

    def _send_part(self, account: AccountAuth, chat_id: str, text: str, token: str | None, client_id: str) -> None:
        self._limiter.acquire(_token_key(account.name, chat_id))
        what = f"wechat account {account.name!r}: a reply to {chat_id}"
        msg: dict[str, object] = {
            "from_user_id": "",
            "to_user_id": chat_id,
            "client_id": client_id,
            "message_type": _MESSAGE_TYPE_BOT,
            "message_state": _MESSAGE_STATE_FINISH,
            "item_list": [{"type": _TEXT, "text_item": {"text": text}}],
        }
        if token:
            msg["context_token"] = token
        try:
            result = http_client.request(
                "POST",
                account.url("sendmessage"),
                json_body={"msg": msg, "base_info": BASE_INFO},
                headers=request_headers(account.token),
                timeout=self._timeout,
            )
        except http_client.HttpError as exc:
            raise http_client.send_error(exc, what) from exc
        if result.status >= 300:
            raise http_client.status_error(result, what)
        try:
            answer = decode_send_answer(result.body)
        except Malformed as exc:
            raise SendError(
                f"{what}: {exc}; it will be retried and flagged as a possible duplicate", outcome_unknown=True
            ) from None
        code = error_code(answer)
        if code == 0:
            return
        detail = f"ret={answer.ret} errcode={answer.errcode} errmsg={answer.errmsg!r}"
        if code == RATE_LIMITED:  # the outbox holds this chat's later replies behind this one until then
            raise SendError(
                f"{what}: rate limited by iLink ({detail}); it will be retried", retry_after_s=self._rate_limit_backoff
            )
        if code == SESSION_EXPIRED:
            raise SendError(
                f"{what}: the bot's iLink session has expired ({detail}); log the bot in again (QR login) and put the "
                f"new bot token in platforms.wechat.accounts.{account.name}; it will be retried",
                retry_after_s=self._session_expired_backoff,
            )
        raise SendError(f"{what}: refused by iLink ({detail}); it will be retried with backoff")
