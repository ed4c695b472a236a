"""Replies through ``chat.postMessage``: escaped, split at ``max_message_chars``, resumed after the parts already
posted; a handoff's thread anchor. A reply carrying a document (``/save``) is shared as a file
(:mod:`platforms.slack.uploads`), or sent as text when Slack does not take the file. A reply asking for approval
carries Approve and Deny buttons under its last part (:mod:`platforms.slack.actions`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from hermes_actors.messages import ApprovalRequest, OutboundDocument, OutboundMessage
from platforms.base import SendError
from platforms.slack.actions import approval_blocks
from platforms.slack.config import ResolvedApp, SlackConfig
from platforms.slack.events import PLATFORM
from platforms.slack.uploads import share_document
from platforms.support import http_client
from platforms.support.documents import send_document
from platforms.support.progress import PartProgress
from platforms.support.ratelimit import Rate, RateLimiter
from platforms.support.text import split_message

__all__ = ["SlackSender"]

_log = logging.getLogger(__name__)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _escaped_length(text: str) -> int:
    return len(text) + 4 * text.count("&") + 3 * (text.count("<") + text.count(">"))


_HINTS = {
    "invalid_auth": "the bot token is not valid; check the app's bot_token",
    "not_authed": "no bot token was sent; check the app's bot_token",
    "token_revoked": "the bot token was revoked; reinstall the app and update bot_token",
    "account_inactive": "the bot token belongs to a deleted app or user; reinstall the app",
    "missing_scope": "the app lacks the chat:write scope; add it and reinstall the app",
    "channel_not_found": "the channel does not exist or the app cannot see it; invite the app to it",
    "not_in_channel": "the app is not in the channel; invite it with /invite",
    "is_archived": "the channel is archived; unarchive it or send elsewhere",
    "msg_too_long": "the text is too long; lower platforms.slack.max_message_chars",
}


class SlackSender:
    """Posts replies with ``chat.postMessage`` (the app is the reply's ``account_id``) and opens handoff threads.

    Called from the outbox thread (replies) and session threads (``create_thread``): the state here is locked.
    """

    platform = PLATFORM
    idempotent_sends = False  # chat.postMessage has no idempotency key

    def __init__(self, apps: Mapping[str, ResolvedApp], config: SlackConfig) -> None:
        self._apps = apps
        self._base = config.api_base_url.rstrip("/")
        self._url = self._base + "/chat.postMessage"
        self._limit = config.max_message_chars
        self._timeout = config.http_timeout_s
        self._limiter = RateLimiter(per_key=Rate(per_second=config.messages_per_second, burst=3))
        self._progress: PartProgress[str] = PartProgress()  # the parts of partly sent replies

    def send(self, message: OutboundMessage) -> str | None:
        """Post ``message`` (split if long) into its channel and thread; return the ts of its first part."""
        app = self._app(message.account_id)
        channel = message.chat_id
        if not channel:
            raise SendError(f"slack app {app.name!r}: a reply without a channel id cannot be sent")
        return send_document(
            message,
            lambda document: self._share(app, channel, message.thread_id, document),
            lambda: self._send_text(app, channel, message),
            f"slack app '{app.name}': a reply to {channel}",
        )

    def _send_text(self, app: ResolvedApp, channel: str, message: OutboundMessage) -> str | None:
        parts = split_message(message.text, self._limit, length=_escaped_length) if message.text.strip() else []
        if not parts:
            _log.info("slack app %r: an empty reply to %s is not sent", app.name, channel)
            return None
        posted = self._progress.sent(message)
        asked = message.approval if isinstance(message.approval, ApprovalRequest) else None
        for index in range(len(posted), len(parts)):
            part = parts[index]
            blocks = approval_blocks(part, asked.id) if asked is not None and index == len(parts) - 1 else None
            try:
                posted.append(self._post(app, channel, part, message.thread_id, blocks=blocks))
            except SendError:
                if posted:  # a retry resumes after the parts Slack already has
                    self._progress.remember(message, posted)
                raise
        self._progress.forget(message)
        return posted[0]

    def create_thread(self, chat_id: str, title: str, *, account_id: str = "") -> str:
        """Post ``title`` as an anchor message in ``chat_id``; its ts is the new thread's id."""
        app = self._app(account_id)
        anchor = split_message(title.strip() or "Handoff", self._limit, length=_escaped_length)[0]
        return self._post(app, chat_id, anchor, None)

    def _share(self, app: ResolvedApp, channel: str, thread_ts: str | None, document: OutboundDocument) -> str:
        self._limiter.acquire(f"{app.name}:{channel}")
        return share_document(app, self._base, channel, thread_ts, document, self._timeout)

    def _app(self, account_id: str) -> ResolvedApp:
        app = self._apps.get(account_id)
        if app is None and not account_id and len(self._apps) == 1:
            app = next(iter(self._apps.values()))
        if app is None:
            raise SendError(f"slack: no app {account_id!r} is configured; add it under platforms.slack.apps")
        return app

    def _post(
        self,
        app: ResolvedApp,
        channel: str,
        text: str,
        thread_ts: str | None,
        *,
        blocks: list[dict[str, Any]] | None = None,
    ) -> str:
        """One ``chat.postMessage`` call (with ``blocks``: buttons under the text); return the new message's ts or
        raise :class:`SendError`."""
        key = f"{app.name}:{channel}"
        self._limiter.acquire(key)
        body: dict[str, Any] = {"channel": channel, "text": _escape(text)}
        if thread_ts:
            body["thread_ts"] = thread_ts
        if blocks is not None:
            body["blocks"] = blocks
        where = f"slack app '{app.name}': chat.postMessage to {channel}"
        headers = {"authorization": f"Bearer {app.bot_token}"}
        try:
            result = http_client.request("POST", self._url, json_body=body, headers=headers, timeout=self._timeout)
        except http_client.HttpError as exc:
            raise http_client.send_error(exc, where) from exc
        if result.status != 200:
            error = http_client.status_error(result, where)
            if error.retry_after_s is not None:
                self._limiter.penalise(key, error.retry_after_s)
            raise error
        try:
            answer = result.json()
        except http_client.HttpError as exc:
            raise SendError(f"{where}: {exc}; it will be retried", outcome_unknown=True) from exc
        if not isinstance(answer, dict):
            raise SendError(f"{where}: expected a JSON object, got {result.excerpt()!r}", outcome_unknown=True)
        if answer.get("ok") is True and isinstance(answer.get("ts"), str):
            return str(answer["ts"])
        code = str(answer.get("error") or "no error code")[:80]
        if code == "ratelimited":
            wait = http_client.retry_after_seconds(result.headers.get("retry-after")) or 1.0
            self._limiter.penalise(key, wait)
            raise SendError(f"{where}: asked to slow down (ratelimited); it will be retried", retry_after_s=wait)
        hint = _HINTS.get(code, "it will be retried with backoff")
        raise SendError(f"{where}: Slack answered {code!r}: {hint}")
