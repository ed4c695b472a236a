"""Replies through the Bot Connector: ``POST {serviceUrl}/v3/conversations/{id}/activities[/{replyToId}]``, split at
``max_message_chars``, resumed after the parts already posted; channel threads for a handoff.

A reply in a channel thread goes to the conversation ``<channel>;messageid=<root>``, so Teams shows it in the
thread. A 429 carries ``Retry-After``, which the outbox honours (the conversation stays quiet until then); 5xx
and transport failures are retried. 403 (the bot was removed from the conversation, or the user blocked it),
404 (the conversation is gone) and 400/413 (Teams will refuse the same activity again) give the reply up with
the reason. A handoff opens a channel thread with ``POST {serviceUrl}/v3/conversations`` (``isGroup``,
``channelData.channel.id``, the first message as ``activity``); the new thread's root message id is the thread.

A reply carrying a document (``/save``) is sent as its text: a bot may send a file only in a personal chat, after
the user accepts a file consent card, and then uploads it to a OneDrive URL the consent names, which this sender
never sends data to (an upload goes to the platform's configured API only).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import msgspec

from hermes_actors.messages import ApprovalRequest, OutboundMessage
from platforms.base import SendError
from platforms.support import http_client
from platforms.support.http_client import HttpResult
from platforms.support.progress import PartProgress
from platforms.support.ratelimit import Rate, RateLimiter
from platforms.support.text import split_message
from platforms.teams.activity import PLATFORM, split_conversation
from platforms.teams.addresses import Addresses
from platforms.teams.cards import approval_card
from platforms.teams.config import TeamsConfig
from platforms.teams.connector import Connector

__all__ = ["TeamsSender"]

_log = logging.getLogger(__name__)

_PERMANENT = {
    400: "Teams refused the activity as malformed",
    403: "the bot is not in the conversation any more, or the user blocked it",
    404: "the conversation does not exist any more",
    413: "the message is too large for Teams; lower platforms.teams.max_message_chars",
}


class _Resource(msgspec.Struct, frozen=True, kw_only=True):
    id: str | None = None
    activityId: str | None = None


def conversation_of(chat_id: str, thread_id: str | None) -> str:
    """The ``conversation.id`` a reply goes to: the channel thread's, or the chat's."""
    return f"{chat_id};messageid={thread_id}" if thread_id else chat_id


class TeamsSender:
    """Sends every bot's replies (the reply's ``account_id`` picks the bot) and opens channel threads."""

    platform = PLATFORM
    idempotent_sends = False  # the Bot Connector has no idempotency key

    def __init__(self, connectors: Mapping[str, Connector], addresses: Addresses, config: TeamsConfig) -> None:
        self._connectors = dict(connectors)
        self._addresses = addresses
        self._limit = config.max_message_chars
        self._limiter = RateLimiter(per_key=Rate(per_second=config.messages_per_second, burst=3))
        self._progress: PartProgress[str] = PartProgress()

    def send(self, message: OutboundMessage) -> str | None:
        """Post ``message`` (split if long) into its conversation; return the id of its first activity."""
        connector = self._connector(message.account_id)
        if not message.chat_id:
            raise SendError(f"teams bot '{connector.bot.name}': a reply without a conversation id", permanent=True)
        parts = split_message(message.text, self._limit) if message.text.strip() else []
        if not parts:
            _log.info("teams bot %r: an empty reply to %s is not sent", connector.bot.name, message.chat_id)
            return None
        address = self._addresses.find(connector.bot.name, message.chat_id)
        conversation = conversation_of(message.chat_id, message.thread_id)
        reply_to = _reply_to(message.reply_to, conversation)
        posted = self._progress.sent(message)
        asked = message.approval if isinstance(message.approval, ApprovalRequest) else None
        for index in range(len(posted), len(parts)):
            part = parts[index]
            body: dict[str, Any] = {"type": "message", "text": part, "textFormat": "markdown"}
            if reply_to is not None:
                body["replyToId"] = reply_to
            if asked is not None and index == len(parts) - 1:  # the question's buttons, under its last part
                body["attachments"] = [approval_card(part, asked.id)]
            try:
                posted.append(self._post(connector, address.service_url, conversation, body, reply_to))
            except SendError:
                if posted:
                    self._progress.remember(message, posted)
                raise
        self._progress.forget(message)
        return posted[0]

    def create_thread(self, chat_id: str, title: str, *, account_id: str = "") -> str:
        """Post ``title`` as a new thread in the channel ``chat_id``; its root message id is the thread's id."""
        connector = self._connector(account_id)
        channel, _ = split_conversation(chat_id)
        address = self._addresses.find(connector.bot.name, channel)
        text = split_message(title.strip() or "Handoff", self._limit)[0]
        body: dict[str, Any] = {
            "isGroup": True,
            "bot": {"id": f"28:{connector.bot.app_id}"},
            "channelData": {"channel": {"id": channel}},
            "activity": {"type": "message", "text": text},
        }
        if address.tenant_id:
            body["tenantId"] = address.tenant_id
            body["channelData"]["tenant"] = {"id": address.tenant_id}
        url = f"{address.service_url.rstrip('/')}/v3/conversations"
        where = f"teams bot '{connector.bot.name}': opening a thread in {channel[:80]}"
        self._limiter.acquire(f"{connector.bot.name}:{channel}")
        result = connector.call("POST", url, body, where=where)
        resource = self._resource(result, where)
        _, thread = split_conversation(resource.id or "")
        thread = thread or resource.activityId
        if not thread:
            raise SendError(f"{where}: the Bot Connector answered without the new thread's id", outcome_unknown=True)
        return thread

    def _connector(self, account_id: str) -> Connector:
        connector = self._connectors.get(account_id)
        if connector is None and not account_id and len(self._connectors) == 1:
            connector = next(iter(self._connectors.values()))
        if connector is None:
            raise SendError(f"teams: no bot {account_id!r} is configured; add it under platforms.teams.bots")
        return connector

    def _post(
        self, connector: Connector, service_url: str, conversation: str, body: object, reply_to: str | None
    ) -> str:
        """One activity into ``conversation``; return its id or raise :class:`SendError`."""
        key = f"{connector.bot.name}:{conversation}"
        self._limiter.acquire(key)
        url = f"{service_url.rstrip('/')}/v3/conversations/{quote(conversation, safe='')}/activities"
        if reply_to is not None:
            url += f"/{quote(reply_to, safe='')}"
        where = f"teams bot '{connector.bot.name}': a reply to {conversation[:80]}"
        result = connector.call("POST", url, body, where=where)
        if result.status == 429:
            error = http_client.status_error(result, where)
            self._limiter.penalise(key, error.retry_after_s or 1.0)
            raise error
        return self._resource(result, where).id or ""

    @staticmethod
    def _resource(result: HttpResult, where: str) -> _Resource:
        if result.status in _PERMANENT:
            raise SendError(
                f"{where}: HTTP {result.status}: {_PERMANENT[result.status]} ({result.excerpt()[:200]!r}); "
                "the reply is given up",
                permanent=True,
            )
        if not 200 <= result.status < 300:
            raise http_client.status_error(result, where)
        try:
            return msgspec.json.decode(result.body or b"{}", type=_Resource)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return _Resource()  # it was posted: an unreadable answer is no reason to post it again


def _reply_to(inbound_id: str | None, conversation: str) -> str | None:
    """The activity id a reply answers, when its inbound id (``<conversation.id>:<activity id>``) is from the same
    conversation or channel thread."""
    if not inbound_id:
        return None
    source, _, activity = inbound_id.rpartition(":")
    return activity if source == conversation and activity else None
