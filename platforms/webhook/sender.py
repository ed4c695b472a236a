"""Replies POSTed to a route's ``callback_url``, signed when the route has a ``callback_secret``."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from urllib.parse import SplitResult

import msgspec

from hermes_actors.messages import OutboundMessage
from platforms.base import SendError
from platforms.support import http_client
from platforms.support.http_client import shown
from platforms.support.standard_webhooks import sign
from platforms.webhook.config import ResolvedRoute
from platforms.webhook.payload import PLATFORM

__all__ = ["CallbackSender", "WebhookReply"]

_log = logging.getLogger(__name__)

_MAX_RETRY_AFTER_S = 3600.0  # a callback asking for longer is tried again after an hour anyway


class WebhookReply(msgspec.Struct, frozen=True, kw_only=True):
    """The JSON body POSTed to a route's ``callback_url``; ``in_reply_to`` and ``answers`` are webhook-ids."""

    route: str
    session_id: str | None
    chat_id: str | None
    thread_id: str | None
    user_id: str | None
    text: str
    in_reply_to: str | None
    answers: tuple[str, ...]
    possible_duplicate: bool


def _callback_id(message: OutboundMessage) -> str:
    """A ``webhook-id`` that is the same for every attempt at one reply (after a restart too: it includes the outbox
    row id) and differs between replies, even two with the same text, so the receiver can drop a resend."""
    identity = msgspec.json.encode(
        [message.outbox_id, message.session_id, message.reply_to, message.answers, message.text]
    )
    return "msg_" + hashlib.sha256(identity).hexdigest()[:32]


class CallbackSender:
    """POSTs replies to their route's ``callback_url`` (the route is the reply's ``account_id``)."""

    platform = PLATFORM
    idempotent_sends = False  # receivers may dedupe on webhook-id, but nothing says they do

    def __init__(self, routes: Mapping[str, ResolvedRoute], *, clock: Callable[[], float], timeout_s: float) -> None:
        self._routes = routes
        self._clock = clock
        self._timeout = timeout_s
        self._told: set[str] = set()  # routes already logged as having no callback; one outbox thread calls send

    def send(self, message: OutboundMessage) -> str | None:
        """POST ``message`` to its callback; return the reply's ``webhook-id``, or ``None`` with no callback."""
        route = self._routes.get(message.account_id)
        if route is None or route.callback is None:
            if message.account_id not in self._told:
                self._told.add(message.account_id)
                why = "has no callback_url" if route is not None else "is no longer configured"
                _log.info("webhook route %r %s: its replies stay in the transcript", message.account_id, why)
            return None
        webhook_id = _callback_id(message)
        body = msgspec.json.encode(
            WebhookReply(
                route=route.name,
                session_id=message.session_id,
                chat_id=message.chat_id,
                thread_id=message.thread_id,
                user_id=message.user_id,
                text=message.text,
                in_reply_to=message.reply_to,
                answers=message.answers,
                possible_duplicate=message.possible_duplicate,
            )
        )
        timestamp = str(int(self._clock()))
        headers = {"content-type": "application/json", "webhook-id": webhook_id, "webhook-timestamp": timestamp}
        if route.callback_key is not None:
            headers["webhook-signature"] = "v1," + sign(route.callback_key, webhook_id, timestamp, body)
        self._post(route.name, route.callback, body, headers)
        return webhook_id

    def _post(self, name: str, url: SplitResult, body: bytes, headers: dict[str, str]) -> None:
        """Send one POST; raise :class:`SendError` unless the callback answers 2xx."""
        where = f"webhook route '{name}': callback {shown(url)}"
        try:
            result = http_client.request("POST", url.geturl(), body=body, headers=headers, timeout=self._timeout)
        except http_client.HttpError as exc:
            raise http_client.send_error(exc, where) from exc
        if result.status >= 300:
            hint = "; check callback_url and the receiver" if 400 <= result.status < 500 else ""
            error = http_client.status_error(result, where, now=self._clock())
            raise SendError(str(error) + hint, retry_after_s=error.retry_after_s) from None
