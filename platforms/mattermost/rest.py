"""Mattermost's REST API (``/api/v4``) for one bot: ``Authorization: Bearer <token>``, pacing, typed errors.

Mattermost limits requests per user (``RateLimitSettings``: 10 a second with bursts of 100 by default) and says so
on every answer: ``X-Ratelimit-Limit``, ``X-Ratelimit-Remaining`` and ``X-Ratelimit-Reset`` (seconds until the
window refills); a refused request is HTTP 429 with ``Retry-After`` in seconds. Requests are paced at
``requests_per_second``; a 429 keeps the bot quiet for ``Retry-After`` (else ``X-Ratelimit-Reset``, else one second)
and comes back as :class:`RestError` with ``retry_after_s``. A pacing wait up to ``max_sleep_s`` is slept through; a
longer one is raised, so the outbox retries later instead of holding a thread. Errors carry Mattermost's JSON error
``id`` (``api.post.create_post.channel_not_found`` and the like) when it answered one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import quote

import msgspec

from hermes_actors.errors import PlatformError
from platforms.mattermost.wire import Channel, FileInfo, Post, PostList, User
from platforms.support import http_client
from platforms.support.documents import FormFile, form_data
from platforms.support.ratelimit import Rate, RateLimiter

__all__ = ["RestClient", "RestError", "retry_after"]

_log = logging.getLogger(__name__)

_MAX_WAIT_S = 3600.0
_RESET_AS_TIME = 1_000_000_000.0  # a reset past this is a Unix time, not a number of seconds
T = TypeVar("T")


class RestError(PlatformError):
    """A REST call failed: ``status`` and Mattermost's error ``id`` when it answered, else ``None``."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        error_id: str | None = None,
        retry_after_s: float | None = None,
        outcome_unknown: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error_id = error_id
        self.retry_after_s = retry_after_s
        self.outcome_unknown = outcome_unknown


class _Error(msgspec.Struct, frozen=True, kw_only=True):
    id: str = ""
    message: str = ""


class _Team(msgspec.Struct, frozen=True, kw_only=True):
    id: str


class _FileId(msgspec.Struct, frozen=True, kw_only=True):
    id: str


class _Uploaded(msgspec.Struct, frozen=True, kw_only=True):
    file_infos: list[_FileId] = msgspec.field(default_factory=list)


def retry_after(headers: dict[str, str], now: float | None = None) -> float:
    """Seconds a 429 asks to wait: ``Retry-After``, else ``X-Ratelimit-Reset`` (seconds, or a Unix time), else 1."""
    wait = http_client.retry_after_seconds(headers.get("retry-after"))
    if wait is not None:
        return wait
    try:
        reset = float(headers.get("x-ratelimit-reset", ""))
    except ValueError:
        return 1.0
    if reset != reset or reset < 0:  # NaN or negative
        return 1.0
    if reset > _RESET_AS_TIME:
        reset -= time.time() if now is None else now
    return min(max(reset, 0.0), _MAX_WAIT_S)


class RestClient:
    """Blocking REST calls for bot ``name`` (outbox threads call it; the websocket loop calls it in a thread)."""

    def __init__(
        self,
        name: str,
        token: str,
        base_url: str,
        *,
        timeout_s: float = 15.0,
        requests_per_second: float = 10.0,
        max_sleep_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.name = name
        self.token = token
        self.base = base_url.rstrip("/")
        self._timeout = timeout_s
        self._max_sleep = max_sleep_s
        self._sleep = sleep
        self._pace = RateLimiter(overall=Rate(per_second=requests_per_second, burst=requests_per_second), clock=clock)

    @property
    def auth(self) -> dict[str, str]:
        """The header that signs a request in as the bot."""
        return {"authorization": f"Bearer {self.token}"}

    def me(self) -> User:
        """``GET /users/me``: the bot's own user (its id tells its own posts apart)."""
        return self._decode(self.call("GET", "/users/me"), User, "GET /users/me")

    def channel(self, channel_id: str) -> Channel:
        """``GET /channels/{id}``: the channel's type, team and name."""
        path = f"/channels/{quote(channel_id)}"
        return self._decode(self.call("GET", path), Channel, f"GET {path}")

    def my_channels(self) -> list[Channel]:
        """Every channel the bot belongs to: ``GET /users/me/teams``, then each team's ``/users/me/teams/{id}/channels``
        (which lists direct and group channels too), without repeats."""
        teams = self._decode(self.call("GET", "/users/me/teams"), list[_Team], "GET /users/me/teams")
        found: dict[str, Channel] = {}
        for team in teams:
            path = f"/users/me/teams/{quote(team.id)}/channels"
            for channel in self._decode(self.call("GET", path), list[Channel], f"GET {path}"):
                found.setdefault(channel.id, channel)
        return list(found.values())

    def posts_since(self, channel_id: str, since_ms: int) -> list[Post]:
        """``GET /channels/{id}/posts?since=``: posts created or changed at or after ``since_ms``, oldest first (the
        server answers those changed strictly after the time asked, so one millisecond earlier is asked)."""
        path = f"/channels/{quote(channel_id)}/posts?since={max(since_ms - 1, 1)}"
        listed = self._decode(self.call("GET", path), PostList, f"GET {path}")
        return sorted(listed.posts.values(), key=lambda post: (post.create_at, post.id))

    def create_post(self, body: dict[str, Any]) -> Post:
        """``POST /posts``; return the created post."""
        return self._decode(self.call("POST", "/posts", body), Post, "POST /posts")

    def upload_file(self, channel_id: str, file: FormFile) -> str:
        """``POST /files`` (``multipart/form-data``: ``channel_id`` and the file as ``files``); return the file's id,
        which a post then names in ``file_ids``."""
        form = form_data({"channel_id": channel_id}, [file])
        answer = self._decode(self.call("POST", "/files", form=form), _Uploaded, "POST /files")
        if not answer.file_infos:
            raise RestError(f"mattermost bot '{self.name}': POST /files answered no file_infos", status=201)
        return answer.file_infos[0].id

    def file_info(self, file_id: str) -> FileInfo:
        """``GET /files/{id}/info``: name, size and type of a post's file."""
        path = f"/files/{quote(file_id)}/info"
        return self._decode(self.call("GET", path), FileInfo, f"GET {path}")

    def call(self, method: str, path: str, body: object = None, *, form: tuple[bytes, str] | None = None) -> bytes:
        """One request with a JSON ``body`` or a ``form`` (its bytes and content type); return the 2xx body or raise
        :class:`RestError`."""
        where = f"mattermost bot '{self.name}': {method} {path.split('?', 1)[0]}"
        wait = self._pace.delay(self.name)
        if wait > self._max_sleep:
            raise RestError(f"{where}: held back {wait:.1f} s by the request rate limit", retry_after_s=wait)
        if wait > 0:
            self._sleep(wait)
        headers, raw = self.auth, None
        if form is not None:
            raw, content_type = form
            headers = headers | {"content-type": content_type}
        try:
            result = http_client.request(
                method, self.base + path, body=raw, json_body=body, headers=headers, timeout=self._timeout
            )
        except http_client.NoAnswer as exc:
            raise RestError(f"{where}: {exc}", outcome_unknown=True) from None
        except http_client.HttpError as exc:
            raise RestError(f"{where}: {exc}") from None
        if 200 <= result.status < 300:
            return result.body
        raise self._failure(result, where)

    def _failure(self, result: http_client.HttpResult, where: str) -> RestError:
        try:
            error = msgspec.json.decode(result.body, type=_Error)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            error = _Error(message=result.excerpt())
        if result.status == 429:
            wait = retry_after(result.headers)
            self._pace.penalise(self.name, wait)
            _log.info("%s: rate limited for %.2f s", where, wait)
            return RestError(f"{where}: rate limited for {wait:.2f} s", status=429, retry_after_s=wait)
        said = f"{error.message[:200]!r}" + (f" ({error.id[:100]})" if error.id else "")
        return RestError(f"{where}: HTTP {result.status} {said}", status=result.status, error_id=error.id or None)

    def _decode(self, body: bytes, kind: type[T], what: str) -> T:
        try:
            return msgspec.json.decode(body, type=kind)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
            raise RestError(f"mattermost bot '{self.name}': {what}: unexpected answer ({exc})", status=200) from None
