"""The WhatsApp entry point: one webhook URL for every configured number, and the reply sender.

Meta calls ``/whatsapp/webhook``: ``GET`` once to verify it (the handshake echoes ``hub.challenge`` as text when
``hub.verify_token`` matches a number's verify token, 403 otherwise), then ``POST`` for every notification. A POST
counts only when ``X-Hub-Signature-256`` matches the raw body under the app secret of the numbers it speaks for;
anything else is 401 and nothing is stored. Messages are answered 200 only after ``inbox.accept_many`` has
committed them all in one transaction; a notification that cannot be stored gets a 503, which Meta retries.
Delivery receipts (``statuses``) are logged, a failed one at warning with its error. The images, audio, video and
documents of a notification's messages are downloaded into the media store before the commit
(:mod:`platforms.whatsapp.files`), so the stored messages carry their attachment records.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec
from aiohttp import web

from hermes_actors.errors import PlatformError
from hermes_actors.messages import InboundMessage
from platforms.base import Capabilities, ChatInbox, ReplySender
from platforms.support.credentials import fetch_json
from platforms.support.http_client import open_session, shown
from platforms.support.http_host import HttpAdapter, Refused, committed
from platforms.whatsapp.config import WhatsappConfig, resolve_numbers
from platforms.whatsapp.events import (
    PLATFORM,
    SIGNATURE_HEADER,
    Parsed,
    answer_handshake,
    parse_notification,
    signed_by,
)
from platforms.whatsapp.files import attach_media
from platforms.whatsapp.sender import RE_ENGAGEMENT, WhatsappSender
from platforms.whatsapp.window import ServiceWindows
from platforms.whatsapp.wire import decode_notification

__all__ = ["WEBHOOK_PATH", "WhatsappAdapter"]

_log = logging.getLogger(__name__)

WEBHOOK_PATH = "/whatsapp/webhook"


class WhatsappAdapter(HttpAdapter[WhatsappConfig]):
    """The WhatsApp Cloud API entry point for the numbers of a :class:`WhatsappConfig`, and their sender.

    Secrets named by ``*_env`` fields are read from ``environ`` (default ``os.environ``) here, so a missing one is
    a :class:`~hermes_actors.errors.ConfigError` before anything starts. ``clock`` is the wall clock the
    24-hour window is measured with.
    """

    _inbox: ChatInbox | None  # the port it is started with (``start``)
    platform = PLATFORM
    server_name = "whatsapp"

    def __init__(
        self,
        config: WhatsappConfig,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(config)
        self._numbers = resolve_numbers(config, os.environ if environ is None else environ)
        self._secrets = {name: number.app_secret for name, number in self._numbers.items()}
        self._verify_tokens = [number.verify_token for number in self._numbers.values()]
        self._clock = clock
        self.windows = ServiceWindows(clock=clock)
        self.capabilities = Capabilities(max_message_chars=config.max_message_chars)
        self.sender = WhatsappSender(self._numbers, config, self.windows, clock=clock)

    def check_credentials(self, *, timeout_s: float) -> list[str]:
        """``GET /{version}/{phone_number_id}`` with every number's access token: one line per number naming its
        display number; :class:`PlatformError` for a token the Graph API refuses."""
        seen = []
        for name, number in self._numbers.items():
            what = f"whatsapp number {name}: GET /{self.config.graph_version}/{name}"
            url = f"{self.config.graph_base}/{self.config.graph_version}/{name}"
            headers = {"Authorization": f"Bearer {number.access_token}"}
            status, body = fetch_json(url, what=what, headers=headers, timeout_s=timeout_s)
            if status != 200 or not isinstance(body, dict) or body.get("id") != name:
                error = body.get("error") if isinstance(body, dict) else None
                said = error.get("message") if isinstance(error, dict) else None
                raise PlatformError(f"{what} answered HTTP {status} ({said or 'no message'}); check the access token")
            seen.append(f"number {name} is {body.get('display_phone_number')} ({body.get('verified_name')})")
        return seen

    def senders(self) -> Sequence[ReplySender]:
        """The Cloud API sender."""
        return [self.sender]

    def start(self, inbox: ChatInbox) -> None:
        """Load the 24-hour windows from the inbox (read again for a chat unknown here: another replica may have
        accepted its message), then serve the webhook (:class:`PlatformError` if it cannot bind)."""
        known = self.windows.attach(functools.partial(inbox.recent_inbound, PLATFORM))
        if known:
            _log.info("whatsapp: %d chats wrote in the last 24 hours (from the inbox)", known)
        self._serve(inbox)

    def _add_routes(self, app: web.Application) -> None:
        """Serve the webhook: ``GET`` for the verification handshake, ``POST`` for notifications."""
        app.router.add_get(WEBHOOK_PATH, self._handshake)
        app.router.add_post(WEBHOOK_PATH, self._receive)

    def describe(self) -> list[str]:
        """One banner line per number: the callback URL, where its secrets come from and where replies go."""
        callback = f"{self.url}{WEBHOOK_PATH}"
        if not self._numbers:
            return [
                f"WhatsApp: {callback} has no numbers; add one under platforms.whatsapp.numbers in config.yaml "
                "(keyed by phone_number_id, with app_secret_env, verify_token_env and access_token_env)"
            ]
        base = f"{self.config.graph_base}/{self.config.graph_version}"
        return [
            f"WhatsApp number {name}: callback URL {callback} (verify token handshake, X-Hub-Signature-256, "
            f"{number.origins}); replies via {shown(f'{base}/{name}/messages')} within the 24-hour window, "
            f"{number.messages_per_second:g}/s; images, audio, video and documents are downloaded as attachments"
            for name, number in self._numbers.items()
        ]

    async def _handshake(self, request: web.Request) -> web.Response:
        try:
            challenge = answer_handshake(request.query, self._verify_tokens)
        except Refused as exc:
            _log.info("whatsapp webhook: refused a verification handshake (%d %s)", exc.status, exc.reason)
            return web.Response(status=exc.status, text=exc.reason, content_type="text/plain")
        _log.info("whatsapp webhook: answered the verification handshake")
        return web.Response(text=challenge, content_type="text/plain")

    async def _receive(self, request: web.Request) -> web.Response:
        try:
            body = await self._read_body(request)
            signed = signed_by(request.headers.get(SIGNATURE_HEADER), body, self._secrets)
            notification = decode_notification(body)
            parsed = parse_notification(notification, numbers=self._numbers.keys(), signed=signed, now=self._clock())
        except Refused as exc:
            _log.info("whatsapp webhook: refused a request (%d %s)", exc.status, exc.reason)
            return web.json_response({"error": exc.reason}, status=exc.status)
        self._log_parsed(parsed)
        if not parsed.inbound:
            return _ok(accepted=0, duplicates=0, routing_keys=[], ignored=parsed.skipped)
        return await self._accept(await self._attach(parsed))

    async def _attach(self, parsed: Parsed) -> Parsed:
        """``parsed`` with each message's media downloaded into the media store as its attachment."""
        inbox = self._inbox
        if not parsed.media or inbox is None:
            return parsed
        inbound: list[InboundMessage] = []
        base, version = self.config.graph_base, self.config.graph_version
        async with open_session() as session:
            for message in parsed.inbound:
                ref = parsed.media.get(message.message_id)
                number = self._numbers.get(message.source.account_id or "")
                if ref is not None and number is not None:
                    message = await attach_media(
                        message,
                        ref,
                        number=number,
                        graph_base=base,
                        graph_version=version,
                        media=inbox.media,
                        session=session,
                        fetch=self.config.fetch_policy,
                        timeout_s=self.config.http_timeout_s,
                    )
                inbound.append(message)
        return msgspec.structs.replace(parsed, inbound=inbound)

    def _log_parsed(self, parsed: Parsed) -> None:
        for reason in parsed.skipped:
            _log.info("whatsapp webhook: skipped %s", reason)
        for number, error in parsed.errors:
            _log.warning("whatsapp number %s: WhatsApp reported an error: %s", number, error)
        for number, status in parsed.statuses:
            if status.status != "failed":
                _log.debug("whatsapp number %s: reply %s is %s", number, status.id[:80], status.status[:20])
                continue
            errors = "; ".join(error.describe() for error in status.errors) or "no error given"
            hint = (
                " (the 24-hour window had closed: a template message is needed)"
                if any(error.code == RE_ENGAGEMENT for error in status.errors)
                else ""
            )
            _log.warning(
                "whatsapp number %s: reply %s to %s was not delivered: %s%s",
                number,
                status.id[:80],
                (status.recipient_id or "?")[:40],
                errors,
                hint,
            )

    async def _accept(self, parsed: Parsed) -> web.Response:
        inbox = self._inbox
        if inbox is None:  # pragma: no cover - the server runs only after start()
            return web.json_response({"error": "the WhatsApp adapter is not started"}, status=503)
        batch: list[InboundMessage] = parsed.inbound
        for inbound in batch:  # before the commit: the reply may be sent before accept_many returns here
            self.windows.note(inbound)
        try:
            results = await committed(inbox.submit_many(batch), inbox.ask_timeout_s)
        except Exception:
            # Not stored: a 5xx makes Meta deliver the notification again.
            ids = ", ".join(inbound.message_id[:80] for inbound in batch)
            _log.exception("whatsapp webhook: could not accept messages %s", ids)
            return web.json_response({"error": "the messages could not be stored; WhatsApp will retry"}, status=503)
        duplicates = [inbound.message_id for inbound, result in zip(batch, results, strict=True) if result.duplicate]
        for message_id in duplicates:
            _log.info("whatsapp webhook: message %s was already stored", message_id[:80])
        return _ok(
            accepted=len(results) - len(duplicates),
            duplicates=len(duplicates),
            routing_keys=[result.routing_key for result in results],
            ignored=parsed.skipped,
        )


def _ok(**fields: Any) -> web.Response:
    return web.json_response({"ok": True, **fields})
