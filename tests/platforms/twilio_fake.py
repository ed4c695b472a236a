"""A local Twilio: the Messages API and MMS media on loopback, and Twilio's side of the incoming-message webhook.

Written from Twilio's documentation, independently of the adapter. :class:`FakeTwilio` serves
``POST /2010-04-01/Accounts/{AccountSid}/Messages.json`` as Twilio does: HTTP basic auth ``AccountSid:AuthToken``
(401, error 20003, otherwise; 404, error 20404, for another account's path), form fields ``To``, ``From`` and
``Body`` (400 with error 21602 for no body, 21617 for one over 1,600 characters, 21606 for a ``From`` that is not
one of the account's numbers, 21211 for a ``To`` that is not a phone number, 21610 for a recipient who replied
STOP), and 201 with the message resource (``sid`` ``SM`` + 32 hex digits). Failures can be scripted
(:meth:`FakeTwilio.fail`, such as 429 error 20429 with ``Retry-After``). Every accepted message is recorded.

Media added with :meth:`FakeTwilio.add_media` live at ``/2010-04-01/Accounts/{sid}/Messages/{MessageSid}/Media/
{MediaSid}``; with ``enforce_media_auth`` that URL wants the account's basic auth (401 otherwise), and it answers
with a 307 redirect to ``/cdn/{key}``, where the bytes are served without credentials. Requests are recorded with
whether they carried credentials.

:func:`incoming` builds the parameters Twilio POSTs for an incoming SMS or MMS, :func:`sign` signs them as Twilio
does (base64 HMAC-SHA1 of the URL followed by each parameter's name and value, sorted by name, keyed with the Auth
Token) and :func:`deliver` POSTs them form-encoded with ``X-Twilio-Signature``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import secrets
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from aiohttp import web

from platforms.support.http_host import HttpHost
from tests.platforms.support import Arrivals

__all__ = ["Answer", "FakeTwilio", "Fetch", "Sent", "deliver", "incoming", "new_sid", "sign"]

MAX_BODY = 1600


def new_sid(prefix: str = "SM") -> str:
    """A fresh Twilio sid: two letters and 32 hex digits."""
    return prefix + secrets.token_hex(16)


def sign(auth_token: str, url: str, params: Sequence[tuple[str, str]]) -> str:
    """``X-Twilio-Signature`` for POSTing ``params`` to ``url``."""
    data = url + "".join(f"{name}{value}" for name, value in sorted(params))
    return base64.b64encode(hmac.new(auth_token.encode(), data.encode(), hashlib.sha1).digest()).decode()


def incoming(
    account_sid: str,
    to: str,
    sender: str,
    body: str,
    *,
    sid: str | None = None,
    media: Sequence[tuple[str, str]] = (),
) -> list[tuple[str, str]]:
    """The parameters of an incoming message from ``sender`` to ``to``; ``media`` is (URL, content type) pairs."""
    message_sid = sid or new_sid("MM" if media else "SM")
    params = [
        ("ToCountry", "US"),
        ("ToState", "CA"),
        ("SmsMessageSid", message_sid),
        ("NumMedia", str(len(media))),
        ("ToCity", "SAN FRANCISCO"),
        ("FromZip", "94105"),
        ("SmsSid", message_sid),
        ("FromState", "CA"),
        ("SmsStatus", "received"),
        ("FromCity", "SAN FRANCISCO"),
        ("Body", body),
        ("FromCountry", "US"),
        ("To", to),
        ("ToZip", "94105"),
        ("NumSegments", "1"),
        ("MessageSid", message_sid),
        ("AccountSid", account_sid),
        ("From", sender),
        ("ApiVersion", "2010-04-01"),
    ]
    for index, (url, content_type) in enumerate(media):
        params += [(f"MediaContentType{index}", content_type), (f"MediaUrl{index}", url)]
    return params


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    text: str


def deliver(
    url: str,
    params: Sequence[tuple[str, str]],
    auth_token: str | None,
    *,
    signed_url: str | None = None,
    signature: str | None = None,
    headers: Mapping[str, str] | None = None,
    body: bytes | None = None,
) -> Answer:
    """POST ``params`` to ``url`` as Twilio does, signed with ``auth_token`` over ``signed_url`` (default ``url``);
    ``signature`` overrides the header, ``auth_token`` ``None`` leaves it out, ``body`` replaces the encoded form."""
    parts = urlsplit(url)
    sent = {"Content-Type": "application/x-www-form-urlencoded", "User-Agent": "TwilioProxy/1.1"}
    if auth_token is not None:
        sent["X-Twilio-Signature"] = signature if signature is not None else sign(auth_token, signed_url or url, params)
    sent |= dict(headers or {})
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=20)
    try:
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        connection.request("POST", path, body=body if body is not None else urlencode(params).encode(), headers=sent)
        response = connection.getresponse()
        return Answer(response.status, response.getheader("Content-Type", ""), response.read().decode())
    finally:
        connection.close()


@dataclass(frozen=True)
class Sent:
    """One accepted message."""

    sid: str
    to: str
    sender: str
    body: str


@dataclass(frozen=True)
class Fetch:
    """One request for media: its path, whether it carried the account's credentials, the status answered."""

    path: str
    authorized: bool
    status: int


@dataclass
class _Failure:
    status: int
    body: dict[str, Any]
    headers: dict[str, str]
    after: int


@dataclass
class FakeTwilio:
    """The Messages API of one account (``account_sid``, ``auth_token``) owning ``numbers``."""

    account_sid: str
    auth_token: str
    numbers: Sequence[str]
    enforce_media_auth: bool = True
    unsubscribed: set[str] = field(default_factory=set)
    sent: list[Sent] = field(default_factory=list)
    fetches: list[Fetch] = field(default_factory=list)
    _arrivals: Arrivals[Sent] = field(default_factory=lambda: Arrivals("sent", "the fake Twilio"))
    _script: deque[_Failure] = field(default_factory=deque)
    _media: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    _cdn: dict[str, str] = field(default_factory=dict)  # key -> media path
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        app = web.Application()
        app.router.add_post("/2010-04-01/Accounts/{account}/Messages.json", self._messages)
        app.router.add_get("/2010-04-01/Accounts/{account}/Messages/{message}/Media/{media}", self._media_url)
        app.router.add_get("/cdn/{key}", self._cdn_file)
        self.host = HttpHost(app, name="fake-twilio")

    @property
    def base_url(self) -> str:
        """What ``platforms.sms.api_base_url`` should be."""
        return self.host.url

    def start(self) -> FakeTwilio:
        self.host.start()
        return self

    def stop(self) -> None:
        self.host.stop(5)

    def add_media(self, message_sid: str, data: bytes, content_type: str) -> str:
        """A file of an incoming MMS; return its ``MediaUrl``."""
        path = f"/2010-04-01/Accounts/{self.account_sid}/Messages/{message_sid}/Media/{new_sid('ME')}"
        with self._lock:
            self._media[path] = (data, content_type)
        return self.base_url + path

    def fail(
        self, status: int, code: int, message: str, *, headers: Mapping[str, str] | None = None, after: int = 0
    ) -> None:
        """Answer a Messages request, after ``after`` answered as usual, with ``status`` and Twilio's error ``code``."""
        body = {
            "code": code,
            "message": message,
            "more_info": f"https://www.twilio.com/docs/errors/{code}",
            "status": status,
        }
        with self._lock:
            self._script.append(_Failure(status, body, dict(headers or {}), after))

    def take(self, timeout: float = 10.0) -> Sent:
        """The next accepted message, waiting up to ``timeout``."""
        return self._arrivals.take(timeout)

    def nothing_more(self, wait: float = 0.2) -> bool:
        return self._arrivals.nothing_more(wait)

    def _authorized(self, request: web.Request) -> bool:
        pair = f"{self.account_sid}:{self.auth_token}".encode()
        expected = "Basic " + base64.b64encode(pair).decode()
        return hmac.compare_digest(request.headers.get("Authorization", "").encode(), expected.encode())

    async def _messages(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _error(401, 20003, "Authenticate")
        if request.match_info["account"] != self.account_sid:
            return _error(404, 20404, "The requested resource was not found")
        form = dict(parse_qsl((await request.read()).decode(), keep_blank_values=True))
        with self._lock:
            failure = None
            if self._script and self._script[0].after > 0:
                self._script[0].after -= 1
            elif self._script:
                failure = self._script.popleft()
        if failure is not None:
            return web.json_response(failure.body, status=failure.status, headers=failure.headers)
        to, sender, body = form.get("To", ""), form.get("From", ""), form.get("Body", "")
        if not body:
            return _error(400, 21602, "Message body is required.")
        if len(body) > MAX_BODY:
            return _error(400, 21617, "The concatenated message body exceeds the 1600 character limit.")
        if sender not in self.numbers:
            return _error(
                400, 21606, f"The From phone number {sender} is not a valid, SMS-capable inbound phone number"
            )
        if not (to.startswith("+") and to[1:].isdigit() and 8 <= len(to) <= 16):
            return _error(400, 21211, f"The 'To' number {to} is not a valid phone number.")
        if to in self.unsubscribed:
            return _error(400, 21610, "Attempt to send to unsubscribed recipient")
        sent = Sent(sid=new_sid(), to=to, sender=sender, body=body)
        with self._lock:
            self.sent.append(sent)
        self._arrivals.put(sent)
        resource = {
            "sid": sent.sid,
            "account_sid": self.account_sid,
            "to": to,
            "from": sender,
            "body": body,
            "status": "queued",
            "num_segments": "1",
            "direction": "outbound-api",
            "api_version": "2010-04-01",
            "uri": f"/2010-04-01/Accounts/{self.account_sid}/Messages/{sent.sid}.json",
        }
        return web.json_response(resource, status=201)

    async def _media_url(self, request: web.Request) -> web.Response:
        authorized = self._authorized(request)
        with self._lock:
            found = self._media.get(request.path)
        if self.enforce_media_auth and not authorized:
            status = 401
        elif found is None:
            status = 404
        else:
            status = 307
        with self._lock:
            self.fetches.append(Fetch(request.path, authorized, status))
        if status == 307:
            key = secrets.token_urlsafe(16)
            with self._lock:
                self._cdn[key] = request.path
            raise web.HTTPTemporaryRedirect(f"/cdn/{key}")
        if status == 401:
            return _error(401, 20003, "Authenticate")
        return _error(404, 20404, "The requested resource was not found")

    async def _cdn_file(self, request: web.Request) -> web.Response:
        with self._lock:
            path = self._cdn.get(request.match_info["key"])
            found = self._media.get(path) if path is not None else None
            self.fetches.append(Fetch(request.path, self._authorized(request), 200 if found else 404))
        if found is None:
            return web.Response(status=404, text="not found")
        return web.Response(body=found[0], content_type=found[1])


def _error(status: int, code: int, message: str) -> web.Response:
    body = {
        "code": code,
        "message": message,
        "more_info": f"https://www.twilio.com/docs/errors/{code}",
        "status": status,
    }
    return web.json_response(body, status=status)
