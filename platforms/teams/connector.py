"""Calls to the Bot Connector as a bot: a client-credentials token, cached until it expires, on every call.

The token comes from ``{login_url}/{tenant}/oauth2/v2.0/token`` (``grant_type=client_credentials``, the bot's app
id and password, scope ``https://api.botframework.com/.default``) and is kept until a minute before its
``expires_in``. A call answered 401 gets a fresh token and is tried once more (the token may have been revoked
before it expired). Blocking: called from outbox threads (and off the loop for inline-image downloads).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from urllib.parse import urlencode

import msgspec

from platforms.base import SendError
from platforms.support import http_client
from platforms.support.http_client import HttpResult
from platforms.teams.config import ResolvedBot

__all__ = ["SCOPE", "Connector", "TokenError"]

_log = logging.getLogger(__name__)

SCOPE = "https://api.botframework.com/.default"
_EARLY_S = 60.0  # a token is renewed this long before it expires


class TokenError(SendError):
    """No token could be had for a bot (a wrong password, the login service unreachable)."""


class _Token(msgspec.Struct, frozen=True, kw_only=True):
    access_token: str
    expires_in: float = 3600.0
    token_type: str = "Bearer"


class _TokenRefusal(msgspec.Struct, frozen=True, kw_only=True):
    error: str | None = None
    error_description: str | None = None


_HINTS = {
    "invalid_client": "the app password is wrong or expired; create a new client secret and update app_password",
    "unauthorized_client": "the app id is not known in that tenant; check app_id and tenant_id",
    "invalid_request": "the tenant is wrong; a single-tenant bot needs its tenant_id",
}


class Connector:
    """One bot's token and its authorised calls (safe to use from several threads)."""

    def __init__(
        self,
        bot: ResolvedBot,
        login_url: str,
        *,
        timeout_s: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bot = bot
        self._url = f"{login_url.rstrip('/')}/{bot.login_tenant}/oauth2/v2.0/token"
        self._timeout = timeout_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._token: tuple[str, float] | None = None  # (token, monotonic expiry)

    def token(self, *, fresh: bool = False) -> str:
        """A valid access token (a new one when ``fresh`` or the cached one is near its end)."""
        with self._lock:
            if not fresh and self._token is not None and self._monotonic() < self._token[1]:
                return self._token[0]
            token, lifetime = self._fetch()
            self._token = (token, self._monotonic() + max(0.0, lifetime - _EARLY_S))
            return token

    def _fetch(self) -> tuple[str, float]:
        where = f"teams bot '{self.bot.name}': the token request to {http_client.shown(self._url)}"
        form = urlencode(
            {
                "grant_type": "client_credentials",
                "client_id": self.bot.app_id,
                "client_secret": self.bot.password,
                "scope": SCOPE,
            }
        ).encode()
        headers = {"content-type": "application/x-www-form-urlencoded"}
        try:
            result = http_client.request("POST", self._url, body=form, headers=headers, timeout=self._timeout)
        except http_client.HttpError as exc:
            raise TokenError(f"{where} failed ({exc}); it will be retried") from None
        if result.status == 200:
            try:
                answer = msgspec.json.decode(result.body, type=_Token)
            except (msgspec.DecodeError, msgspec.ValidationError):
                raise TokenError(f"{where} answered without an access_token; it will be retried") from None
            _log.info("teams bot %r: got a Bot Connector token for %.0f s", self.bot.name, answer.expires_in)
            return answer.access_token, answer.expires_in
        if result.status == 429 or result.status >= 500:
            raise TokenError(
                f"{where} failed with HTTP {result.status}; it will be retried",
                retry_after_s=http_client.retry_after_seconds(result.headers.get("retry-after")),
            )
        try:
            code = msgspec.json.decode(result.body, type=_TokenRefusal).error or "no error code"
        except (msgspec.DecodeError, msgspec.ValidationError):
            code = "no error code"
        hint = _HINTS.get(code, "check the bot's app_id, app_password and tenant_id")
        raise TokenError(f"{where} was refused (HTTP {result.status}, {code[:60]}): {hint}")

    def call(self, method: str, url: str, body: object, *, where: str) -> HttpResult:
        """``method url`` with ``body`` as JSON and the bot's token; a 401 renews the token and tries once more."""
        result = self._call(method, url, body, self.token(), where)
        if result.status == 401:
            _log.info("teams bot %r: the Bot Connector refused the token (401); renewing it", self.bot.name)
            result = self._call(method, url, body, self.token(fresh=True), where)
        return result

    def _call(self, method: str, url: str, body: object, token: str, where: str) -> HttpResult:
        headers = {"authorization": f"Bearer {token}"}
        try:
            return http_client.request(method, url, json_body=body, headers=headers, timeout=self._timeout)
        except http_client.HttpError as exc:
            raise http_client.send_error(exc, where) from exc
