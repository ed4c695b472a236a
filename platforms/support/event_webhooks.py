"""Event deliveries POSTed to the operator's webhooks (``events.webhooks``), signed as Standard Webhooks: the outbox's
sender of :data:`~hermes_actors.config.EVENTS_PLATFORM`.

A delivery is an outbox row whose message names the webhook (``account_id``), carries the event's id
(``reply_to``) and its JSON body (``text``, ``{type, timestamp, data}``, the same bytes on every attempt). Each
attempt is signed afresh: ``webhook-id`` is the event's id (stable across retries, so a receiver drops a repeat),
``webhook-timestamp`` the attempt's time, ``webhook-signature`` ``v1,`` and the base64 HMAC-SHA256 of
``{id}.{timestamp}.{body}`` keyed with the secret's bytes. Only the configured URL is ever posted to: nothing in
an event names where it goes. A non-2xx answer or a failed exchange is retried by the outbox with backoff, after
``Retry-After`` when the answer has one; a delivery queued (or replayed) more than ``give_up_after_s`` ago is given
up instead, and the outbox records it as a dead letter.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import msgspec

from hermes_actors.config import EVENTS_PLATFORM, EventsConfig, EventWebhook
from hermes_actors.errors import ConfigError
from hermes_actors.messages import OutboundMessage
from hermes_actors.ports import SendError
from platforms.support import http_client
from platforms.support.http_client import HttpClient, retry_after_seconds, shown
from platforms.support.standard_webhooks import bad_secret, decode_secret, sign

__all__ = ["EventSender", "QueuedAt"]

QueuedAt = Callable[[int], float | None]
"""When the outbox row of a delivery was queued (or last replayed), by its id; ``None`` when it cannot be read."""


class _Hook(msgspec.Struct, frozen=True):
    name: str
    settings: EventWebhook
    key: bytes


def _key(name: str, hook: EventWebhook, environ: Mapping[str, str]) -> bytes:
    path = f"events.webhooks.{name}"
    secret = hook.secret
    if secret is None:
        assert hook.secret_env is not None  # EventsConfig asks for one of them
        secret = environ.get(hook.secret_env)
        if not secret:
            raise ConfigError(
                f"{path}.secret_env", f"the environment variable {hook.secret_env} is not set; export the secret there"
            )
    key = decode_secret(secret.strip())
    if key is None:
        raise bad_secret(f"{path}.{'secret' if hook.secret is not None else 'secret_env'}")
    return key


class EventSender:
    """POSTs event deliveries to their webhook (the delivery's ``account_id``); see the module docstring.

    ``queued_at`` reads when a delivery was queued, for ``give_up_after_s``; ``client`` is the HTTP client (a test's
    :class:`~platforms.support.http_client.MockTransport`), by default the shared one.
    """

    platform = EVENTS_PLATFORM
    idempotent_sends = False  # receivers should drop a repeated webhook-id, but nothing says they do

    def __init__(
        self,
        config: EventsConfig,
        *,
        queued_at: QueuedAt,
        environ: Mapping[str, str],
        clock: Callable[[], float] = time.time,
        client: HttpClient | None = None,
    ) -> None:
        self._hooks = {name: _Hook(name, hook, _key(name, hook, environ)) for name, hook in config.webhooks.items()}
        self._queued_at = queued_at
        self._clock = clock
        self._client = client or http_client.shared_client()

    def send(self, message: OutboundMessage) -> str | None:
        """POST the delivery to its webhook; return the event's id. Raises :class:`SendError` (``permanent`` for a
        webhook no longer configured, or a delivery failing for longer than its ``give_up_after_s``)."""
        hook = self._hooks.get(message.account_id)
        if hook is None:
            raise SendError(
                f"event webhook '{message.account_id}' is no longer configured (events.webhooks); its deliveries are "
                "given up",
                permanent=True,
            )
        event_id = message.reply_to or f"evt_outbox_{message.outbox_id}"
        body = message.text.encode()
        timestamp = str(int(self._clock()))
        headers = {
            "content-type": "application/json",
            "webhook-id": event_id,
            "webhook-timestamp": timestamp,
            "webhook-signature": "v1," + sign(hook.key, event_id, timestamp, body),
        }
        where = f"event webhook '{hook.name}' ({shown(hook.settings.url)})"
        try:
            result = self._client.request(
                "POST", hook.settings.url, body=body, headers=headers, timeout=hook.settings.timeout_s
            )
        except http_client.HttpError as exc:
            unknown = isinstance(exc, http_client.NoAnswer)  # it left: the receiver may have it (same webhook-id)
            raise self._failed(f"{exc.reason} from {where}", hook, message, unknown=unknown) from None
        if result.status >= 300:
            excerpt = f": {result.excerpt()!r}" if result.body else ""
            wait = retry_after_seconds(result.headers.get("retry-after"), self._clock())
            raise self._failed(f"HTTP {result.status} from {where}{excerpt}", hook, message, retry_after_s=wait)
        return event_id

    def _failed(
        self,
        problem: str,
        hook: _Hook,
        message: OutboundMessage,
        *,
        unknown: bool = False,
        retry_after_s: float | None = None,
    ) -> SendError:
        """The :class:`SendError` of a failed attempt: retried (after ``Retry-After`` when the receiver sent one),
        or permanent once the delivery has been queued longer than the webhook gives it."""
        queued = self._queued_at(message.outbox_id) if message.outbox_id is not None else None
        age = None if queued is None else self._clock() - queued
        if age is None or age < hook.settings.give_up_after_s:
            return SendError(f"{problem}; it will be retried", retry_after_s=retry_after_s, outcome_unknown=unknown)
        return SendError(
            f"{problem}; given up after {age:.0f} s (events.webhooks.{hook.name}.give_up_after_s is "
            f"{hook.settings.give_up_after_s:.0f}); send it again with: hermesctl events replay "
            f"{message.outbox_id}",
            permanent=True,
        )
