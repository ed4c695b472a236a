"""The SMS entry point: Twilio's webhook for incoming messages, answered with empty TwiML after the commit.

Twilio POSTs each incoming SMS or MMS to ``/sms/twilio`` (form-encoded, signed in ``X-Twilio-Signature``). A request
counts only when the signature matches the URL Twilio called (``public_url`` plus the query string, or the address
this server was reached at) and its parameters under the account's Auth Token: a missing or forged one is a 403 and
nothing is read further. The message's media are downloaded into the media store, the message is committed to the
inbox, and only then is Twilio answered 200 with an empty ``<Response/>`` (``text/xml``): the reply is sent later
through the Messages API, not as TwiML. The same ``MessageSid`` again (a replayed request) is answered the same way
without a second turn, for as long as the inbox keeps the row (``runtime.queue_retention_days``; Twilio's signature
has no timestamp, so a request replayed later than that cannot be told from a new one). A message that cannot be
stored is answered 503; Twilio does not retry an SMS webhook by itself, but calls the number's Fallback URL if one
is set, so point that at this endpoint too.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from urllib.parse import parse_qsl

from aiohttp import web

from hermes_actors.messages import InboundMessage
from platforms.base import Capabilities, ReplySender
from platforms.sms.config import SmsConfig, resolve_keys
from platforms.sms.events import PLATFORM, MediaRef, inbound_of, parse_form, skip_reason
from platforms.sms.files import attach_media
from platforms.sms.sender import SmsSender
from platforms.sms.signature import SIGNATURE_HEADER, signed
from platforms.support.http_client import shown
from platforms.support.http_host import HttpAdapter, Refused

__all__ = ["EMPTY_TWIML", "WEBHOOK_PATH", "SmsAdapter"]

_log = logging.getLogger(__name__)

WEBHOOK_PATH = "/sms/twilio"
EMPTY_TWIML = '<?xml version="1.0" encoding="UTF-8"?><Response></Response>'
_FORM = "application/x-www-form-urlencoded"
_MAX_FIELDS = 200  # Twilio sends about 20, and 2 per media file


class SmsAdapter(HttpAdapter[SmsConfig]):
    """The Twilio webhook for the numbers of an :class:`SmsConfig`, and their sender.

    The auth token named by ``auth_token_env`` is read from ``environ`` (default ``os.environ``) here, so a missing
    one is a :class:`~hermes_actors.errors.ConfigError` before anything starts. ``clock`` stamps received messages.
    """

    platform = PLATFORM
    server_name = "sms"

    def __init__(
        self, config: SmsConfig, *, environ: Mapping[str, str] | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        super().__init__(config)
        self._keys = resolve_keys(config, os.environ if environ is None else environ)
        self._numbers = frozenset(config.numbers)
        self._clock = clock
        self.capabilities = Capabilities(max_message_chars=config.max_message_chars)
        self.sender = SmsSender(self._keys, config, numbers=config.numbers)

    def senders(self) -> Sequence[ReplySender]:
        """The Messages API sender."""
        return [self.sender]

    def _add_routes(self, app: web.Application) -> None:
        app.router.add_post(WEBHOOK_PATH, self._receive)

    def describe(self) -> list[str]:
        """One banner line: the webhook URL to enter on the numbers, and where replies go."""
        public = self.config.public_url or f"{self.url}{WEBHOOK_PATH}"
        return [
            f'SMS (Twilio) numbers {", ".join(self.config.numbers)}: "A message comes in" webhook {public} '
            f"(HTTP POST, X-Twilio-Signature with the {self._keys.origin}); served at {self.url}{WEBHOOK_PATH}; "
            f"replies via {shown(self.config.api_base)} Messages API in parts of {self.config.max_message_chars} "
            "characters; MMS media are downloaded into the media store"
        ]

    def _signed_url(self, request: web.Request) -> str:
        """The URL Twilio signed: ``public_url`` with the request's query string, else the address called."""
        raw = request.raw_path
        if self.config.public_url is None:
            return f"{request.scheme}://{request.host}{raw}"
        query = raw.partition("?")[2]
        return self.config.public_url + (f"?{query}" if query else "")

    async def _params(self, request: web.Request) -> list[tuple[str, str]]:
        body = await self._read_body(request)
        if request.content_type != _FORM:
            raise Refused(415, f"expected {_FORM}, as Twilio sends, not {request.content_type[:60]!r}")
        try:
            return parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=_MAX_FIELDS, errors="strict")
        except UnicodeDecodeError:
            raise Refused(400, "the form is not UTF-8") from None
        except ValueError as exc:
            raise Refused(400, f"the form cannot be read ({str(exc)[:100]})") from None

    async def _receive(self, request: web.Request) -> web.Response:
        try:
            params = await self._params(request)
            header = request.headers.get(SIGNATURE_HEADER)
            if not header:
                raise Refused(403, f"unsigned request: the {SIGNATURE_HEADER} header is required")
            if not signed(header, self._keys.auth_token, self._signed_url(request), params):
                raise Refused(
                    403,
                    f"{SIGNATURE_HEADER} does not match the URL and parameters under the account's Auth Token "
                    "(behind a proxy, set platforms.sms.public_url to the webhook URL as entered on the number)",
                )
            incoming = parse_form(params)
            if incoming.account_sid != self._keys.account_sid:
                raise Refused(403, "the message belongs to another Twilio account")
        except Refused as exc:
            _log.info("sms webhook: refused a request (%d %s)", exc.status, exc.reason)
            return web.Response(status=exc.status, text=exc.reason, content_type="text/plain")
        skipped = skip_reason(incoming, self._numbers)
        if skipped is not None:
            _log.info("sms webhook: skipped message %s: %s", incoming.message_sid, skipped)
            return _twiml()
        inbound = inbound_of(incoming, received_at=self._clock())
        if incoming.media:
            inbound = await self._attach(inbound, incoming.media)
        result = await self._accept_inbound(inbound, _log, "sms number %s: could not store message %s")
        if result is None:
            return web.Response(status=503, text="the message could not be stored", content_type="text/plain")
        if result.duplicate:
            _log.info("sms webhook: message %s was already stored (a replayed request)", incoming.message_sid)
        return _twiml()

    async def _attach(self, inbound: InboundMessage, refs: Sequence[MediaRef]) -> InboundMessage:
        inbox = self._inbox
        if inbox is None:  # pragma: no cover - the server runs only after start()
            return inbound
        return await attach_media(
            inbound,
            refs,
            keys=self._keys,
            api_base=self.config.api_base,
            media=inbox.media,
            fetch=self.config.fetch_policy,
            timeout_s=self.config.http_timeout_s,
        )


def _twiml() -> web.Response:
    return web.Response(text=EMPTY_TWIML, content_type="text/xml")
