"""Access tokens of the QQ OpenAPI: fetched with the AppID and AppSecret, kept until shortly before they expire.

``POST {token_url}`` with ``{"appId", "clientSecret"}`` answers ``{"access_token", "expires_in"}`` (seconds, which
QQ sends as a string); each API call then carries ``Authorization: QQBot <access_token>``. A token is reused until
:data:`RENEW_BEFORE_S` before it expires, and dropped at once when the API answers 401 with it. Called from the
outbox threads, so one lock per bot keeps them from fetching it twice at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import msgspec

from hermes_actors.ports import SendError
from platforms.support import http_client

__all__ = ["RENEW_BEFORE_S", "AccessTokens"]

RENEW_BEFORE_S = 60.0


class _Answer(msgspec.Struct, frozen=True, kw_only=True):
    access_token: str = ""
    expires_in: str | int = 0
    code: int | None = None
    message: str = ""


class AccessTokens:
    """The current access token of one bot."""

    def __init__(
        self,
        app_id: str,
        secret: str,
        *,
        token_url: str,
        timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app_id = app_id
        self._secret = secret
        self._url = token_url
        self._timeout = timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._token: str | None = None
        self._until = 0.0

    def header(self) -> dict[str, str]:
        """``Authorization: QQBot <token>``, fetching a token first when none is valid; :class:`SendError` if QQ
        gives none."""
        with self._lock:
            if self._token is None or self._clock() >= self._until:
                self._token, lifetime = self._fetch()
                self._until = self._clock() + max(lifetime - RENEW_BEFORE_S, lifetime / 2)
            return {"Authorization": f"QQBot {self._token}"}

    def forget(self) -> None:
        """The API refused the token: fetch a new one next time."""
        with self._lock:
            self._token = None

    def _fetch(self) -> tuple[str, float]:
        where = f"qqbot app {self.app_id}: access token"
        body = {"appId": self.app_id, "clientSecret": self._secret}
        try:
            result = http_client.request("POST", self._url, json_body=body, timeout=self._timeout)
        except http_client.HttpError as exc:
            raise SendError(f"{where}: {exc}; it will be retried") from exc
        try:
            answer = msgspec.json.decode(result.body, type=_Answer)
            lifetime = float(answer.expires_in)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError, RecursionError):
            answer, lifetime = _Answer(message=result.excerpt()), 0.0
        if result.status == 200 and answer.access_token and lifetime > 0:
            return answer.access_token, lifetime
        said = f"HTTP {result.status}" + (f", code {answer.code}" if answer.code is not None else "")
        raise SendError(
            f"{where}: refused ({said}: {answer.message[:200]!r}); check platforms.qqbot app_id and secret; "
            "it will be retried"
        )
