"""Discord's REST API for one bot: ``Authorization: Bot <token>``, per-route rate-limit buckets, typed errors.

Discord limits each route per "major parameter" (the channel of ``POST /channels/{id}/messages``) and announces
the limit on every answer: ``X-RateLimit-Bucket`` names the bucket a route shares, ``X-RateLimit-Remaining`` how
many requests are left in it and ``X-RateLimit-Reset-After`` when it refills. :class:`Buckets` remembers that per
(bucket, channel) and holds a request back until its bucket has room, so replies to a busy channel wait without a
429 and other channels are not held up. A 429 still happens (other clients share a limit, the ``shared`` scope):
its JSON ``retry_after`` (seconds, a float) keeps the bucket, or with ``"global": true`` every route of the bot,
quiet until then. A wait up to ``max_sleep_s`` is slept through; a longer one is raised as :class:`RestError`
with ``retry_after_s``, so the outbox retries the reply later instead of blocking other chats.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
from yarl import URL

from hermes_actors.errors import PlatformError
from platforms.discord.config import DiscordConfig
from platforms.discord.events import Channel, ChannelCache, Message
from platforms.discord.resume import ProtocolBroken
from platforms.support import http_client
from platforms.support.connections import Fatal
from platforms.support.documents import FormFile, form_data
from platforms.support.ratelimit import Rate, RateLimiter

__all__ = [
    "MESSAGES_ROUTE",
    "THREADS_ROUTE",
    "Buckets",
    "GatewayBot",
    "RestClient",
    "RestError",
    "find_channel",
    "gateway_url",
    "versioned",
]

_log = logging.getLogger(__name__)

MESSAGES_ROUTE = "POST /channels/{channel_id}/messages"
THREADS_ROUTE = "POST /channels/{channel_id}/threads"
CHANNEL_ROUTE = "GET /channels/{channel_id}"
GATEWAY_ROUTE = "GET /gateway/bot"
_USER_AGENT = "DiscordBot (hermes-actors, 0.1)"  # Discord asks bots to name themselves this way
_MAX_WAIT_S = 3600.0
_LOOKUPS = 3  # attempts at GET /channels/{id} for a channel not in the cache

T = TypeVar("T")


class RestError(PlatformError):
    """A REST call failed: ``status`` and Discord's JSON error ``code`` when it answered, else ``None``."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: int | None = None,
        retry_after_s: float | None = None,
        outcome_unknown: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.retry_after_s = retry_after_s
        self.outcome_unknown = outcome_unknown


class _SessionStartLimit(msgspec.Struct, frozen=True, kw_only=True):
    remaining: int = 1
    reset_after: int = 0  # milliseconds


class GatewayBot(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /gateway/bot``: where to connect and how many new sessions may still start today."""

    url: str
    session_start_limit: _SessionStartLimit = msgspec.field(default_factory=_SessionStartLimit)


class _Error(msgspec.Struct, frozen=True, kw_only=True):
    message: str = ""
    code: int | None = None
    retry_after: float | None = None
    is_global: bool = msgspec.field(default=False, name="global")


class _Created(msgspec.Struct, frozen=True, kw_only=True):
    id: str


class _State:
    __slots__ = ("remaining", "reset_at")

    def __init__(self, remaining: int, reset_at: float) -> None:
        self.remaining = remaining
        self.reset_at = reset_at


def _number(headers: dict[str, str], name: str) -> float | None:
    try:
        value = float(headers[name])
    except (KeyError, ValueError):
        return None
    return value if 0 <= value < float("inf") else None


class Buckets:
    """What the server said about each route's bucket, per major parameter, and the bot's global hold."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._bucket_of: dict[str, str] = {}  # route -> X-RateLimit-Bucket
        self._states: dict[str, _State] = {}  # "<bucket>:<major>" -> state
        self._global_until = 0.0

    def _key(self, route: str, major: str) -> str:
        return f"{self._bucket_of.get(route, route)}:{major}"

    def reserve(self, route: str, major: str) -> float:
        """Take a request from the bucket; return how long to wait before sending it (0: now)."""
        with self._lock:
            now = self._clock()
            wait = max(0.0, self._global_until - now)
            state = self._states.get(self._key(route, major))
            if state is not None:
                if state.reset_at <= now:
                    del self._states[self._key(route, major)]
                elif state.remaining > 0:
                    state.remaining -= 1
                else:
                    wait = max(wait, state.reset_at - now)
            return wait

    def update(self, route: str, major: str, headers: dict[str, str]) -> None:
        """Learn from an answer's ``X-RateLimit-*`` headers."""
        bucket = headers.get("x-ratelimit-bucket")
        remaining = _number(headers, "x-ratelimit-remaining")
        reset_after = _number(headers, "x-ratelimit-reset-after")
        with self._lock:
            if bucket:
                self._bucket_of[route] = bucket[:64]
            if remaining is not None and reset_after is not None:
                reset_at = self._clock() + min(reset_after, _MAX_WAIT_S)
                self._states[self._key(route, major)] = _State(int(remaining), reset_at)

    def hold(self, route: str, major: str, seconds: float, *, everywhere: bool) -> None:
        """A 429: keep the bucket (or, ``everywhere``, every route of the bot) quiet for ``seconds``."""
        with self._lock:
            until = self._clock() + min(seconds, _MAX_WAIT_S)
            if everywhere:
                self._global_until = max(self._global_until, until)
            else:
                self._states[self._key(route, major)] = _State(0, until)


class RestClient:
    """Blocking REST calls for bot ``name`` (outbox threads call it; the gateway loop calls it in a thread)."""

    def __init__(
        self,
        name: str,
        token: str,
        base_url: str,
        *,
        timeout_s: float = 15.0,
        requests_per_second: float = 50.0,
        max_sleep_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.name = name
        self._token = token
        self._base = base_url.rstrip("/")
        self._timeout = timeout_s
        self._max_sleep = max_sleep_s
        self._sleep = sleep
        self.buckets = Buckets(clock)
        self._overall = RateLimiter(
            overall=Rate(per_second=requests_per_second, burst=requests_per_second), clock=clock
        )

    def gateway_bot(self) -> GatewayBot:
        """``GET /gateway/bot``."""
        return self._decode(self.call("GET", "/gateway/bot", GATEWAY_ROUTE, ""), GatewayBot, "GET /gateway/bot")

    def get_channel(self, channel_id: str) -> Channel:
        """``GET /channels/{id}``: the channel's type, guild and parent."""
        answer = self.call("GET", f"/channels/{channel_id}", CHANNEL_ROUTE, channel_id)
        return self._decode(answer, Channel, f"GET /channels/{channel_id}")

    def create_message(self, channel_id: str, body: dict[str, Any], *, file: FormFile | None = None) -> str:
        """``POST /channels/{id}/messages``; return the new message's id. With ``file`` the body goes as
        ``multipart/form-data``: ``payload_json`` and the file as ``files[0]`` (``body`` names it in
        ``attachments``)."""
        path = f"/channels/{channel_id}/messages"
        if file is None:
            answer = self.call("POST", path, MESSAGES_ROUTE, channel_id, body)
        else:
            form = form_data({"payload_json": msgspec.json.encode(body).decode()}, [file])
            answer = self.call("POST", path, MESSAGES_ROUTE, channel_id, form=form)
        return self._decode(answer, _Created, f"a message to channel {channel_id}").id

    def start_thread(self, channel_id: str, body: dict[str, Any]) -> Channel:
        """``POST /channels/{id}/threads``; return the new thread."""
        answer = self.call("POST", f"/channels/{channel_id}/threads", THREADS_ROUTE, channel_id, body)
        return self._decode(answer, Channel, f"a thread in channel {channel_id}")

    def call(
        self,
        method: str,
        path: str,
        route: str,
        major: str,
        body: object = None,
        *,
        form: tuple[bytes, str] | None = None,
    ) -> bytes:
        """One request on ``route`` (``major`` is its channel) with a JSON ``body`` or a ``form`` (its bytes and
        content type); return the 2xx body or raise :class:`RestError`."""
        where = f"discord bot '{self.name}': {method} {path}"
        self._pace(route, major, where)
        headers = {"authorization": f"Bot {self._token}", "user-agent": _USER_AGENT}
        raw = None
        if form is not None:
            raw, headers["content-type"] = form
        try:
            result = http_client.request(
                method, self._base + path, body=raw, json_body=body, headers=headers, timeout=self._timeout
            )
        except http_client.NoAnswer as exc:
            raise RestError(f"{where}: {exc}", outcome_unknown=True) from None
        except http_client.HttpError as exc:
            raise RestError(f"{where}: {exc}") from None
        self.buckets.update(route, major, result.headers)
        if 200 <= result.status < 300:
            return result.body
        raise self._failure(route, major, result, where)

    def _pace(self, route: str, major: str, where: str) -> None:
        wait = max(self.buckets.reserve(route, major), self._overall.delay(""))
        if wait > self._max_sleep:
            raise RestError(f"{where}: held back {wait:.1f} s by Discord's rate limit", retry_after_s=wait)
        if wait > 0:
            self._sleep(wait)

    def _failure(self, route: str, major: str, result: http_client.HttpResult, where: str) -> RestError:
        try:
            error = msgspec.json.decode(result.body, type=_Error)
        except (msgspec.DecodeError, msgspec.ValidationError):
            error = _Error(message=result.excerpt())
        if result.status == 429:
            header = http_client.retry_after_seconds(result.headers.get("retry-after"))
            wait = error.retry_after if error.retry_after is not None and error.retry_after >= 0 else header
            wait = min(wait if wait is not None else 1.0, _MAX_WAIT_S)
            everywhere = error.is_global or result.headers.get("x-ratelimit-global", "").lower() == "true"
            self.buckets.hold(route, major, wait, everywhere=everywhere)
            scope = "every route of the bot (global)" if everywhere else "this route"
            _log.info("%s: rate limited on %s for %.2f s", where, scope, wait)
            return RestError(f"{where}: rate limited for {wait:.2f} s", status=429, retry_after_s=wait)
        detail = f"{error.message[:200]!r}" + (f" (code {error.code})" if error.code is not None else "")
        return RestError(f"{where}: HTTP {result.status} {detail}", status=result.status, code=error.code)

    def _decode(self, body: bytes, kind: type[T], what: str) -> T:
        try:
            return msgspec.json.decode(body, type=kind)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise RestError(f"discord bot '{self.name}': {what}: unexpected answer ({exc})", status=200) from None


async def find_channel(rest: RestClient, cache: ChannelCache, message: Message, *, bot: str) -> Channel | None:
    """The channel ``message`` was posted in: from ``cache``, else asked of the API (a few tries) and cached; ``None``
    when it cannot be told (the message is then keyed as a channel, not a thread)."""
    found = cache.get(message.channel_id)
    if found is not None:
        return found
    for attempt in range(_LOOKUPS):
        try:
            channel = await asyncio.to_thread(rest.get_channel, message.channel_id)
        except RestError as exc:
            if exc.status in (401, 403, 404) or attempt + 1 == _LOOKUPS:
                _log.warning(
                    "discord bot %r: cannot tell what channel %s is (%s); its message is keyed as a channel, "
                    "not a thread",
                    bot,
                    message.channel_id,
                    exc,
                )
                return None
            await asyncio.sleep(min(exc.retry_after_s or 0.25 * 2**attempt, 5.0))
        else:
            cache.put([channel], message.guild_id)
            return cache.get(channel.id)
    return None  # pragma: no cover - the loop returns


async def gateway_url(rest: RestClient, config: DiscordConfig, *, bot: str) -> str:
    """The websocket URL a new session connects to: ``gateway_url`` from the config, else ``GET /gateway/bot``
    (waiting out a spent daily session-start budget); :class:`Fatal` for a refused token."""
    if config.gateway_url is not None:
        return config.gateway_url
    try:
        found = await asyncio.to_thread(rest.gateway_bot)
    except RestError as exc:
        if exc.status == 401:
            raise Fatal(f"{exc}: Discord refused the token; copy it again from the Developer Portal") from None
        raise
    limit = found.session_start_limit
    if limit.remaining <= 0:
        wait = min(limit.reset_after / 1000, 86_400.0)
        _log.warning("discord bot %r: no session starts left today; waiting %.0f s", bot, wait)
        await asyncio.sleep(wait)
    if URL(found.url).scheme not in ("ws", "wss"):
        raise ProtocolBroken(f"GET /gateway/bot answered {found.url[:100]!r}, which is not a ws(s):// URL")
    return found.url


def versioned(url: str) -> str:
    """``url`` of a gateway with the version and encoding this adapter speaks (v10, JSON)."""
    return str(URL(url).update_query(v="10", encoding="json"))
