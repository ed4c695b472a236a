"""Slack: the Events API over HTTP in, ``chat.postMessage`` out, for several apps and workspaces at once.

Each configured app (the account) has its own Request URL, ``POST /slack/events/<app>``, and its own signing
secret: a request counts only if ``X-Slack-Signature`` is ``v0=`` plus the hex HMAC-SHA256 of
``v0:<X-Slack-Request-Timestamp>:<raw body>`` and the timestamp is within five minutes of our clock (an old
request replayed later is refused). The ``url_verification`` challenge is answered; an event is answered 200 only
after ``gateway.accept`` has committed it (a few milliseconds, well inside Slack's 3 s, plus the time to fetch its
files when it has some), so an acknowledged event is never lost, and an event that could not be stored gets a 503
that Slack retries.

Slack redelivers an event it thinks was missed (``X-Slack-Retry-Num``, same ``event_id``) and delivers one user
message twice when the app subscribes to both ``message.*`` and ``app_mention`` (two ``event_id``s, one channel
and ``ts``). The inbound message id is ``<team>:<channel>:<ts>``, the same for all of these, so the durable
inbox drops every copy but the first and one message runs one turn.

The workspace (``team_id``) is the key's scope and the app its account: ``agent:main:slack.T1~app:dm:D1``. A DM
(``channel_type`` ``im``) is ``dm``; public and private channels and group DMs are ``group``, which a message
event and an ``app_mention`` for the same message (which has no ``channel_type``) agree on. ``thread_ts`` is the
thread; with ``reply_in_thread`` a top-level channel message is answered in a thread under it and that thread is
its session. Bots' messages (ours included) and subtypes that are not new user text (edits, deletions, joins)
are logged and skipped. Files keep a stand-in such as ``[image: plot.png]`` in the text and are downloaded with
the app's bot token into the media store before the event is accepted (:mod:`platforms.slack.files`), so the
stored message carries their attachment records; a file over ``media.max_bytes`` (Slack says its size) is refused
without being fetched. A copy of an event that arrives while the first copy's files are still downloading (Slack's
retry after 3 s, or the ``app_mention`` twin) waits for it rather than fetching them again.

Replies go through ``chat.postMessage`` with the app's bot token, into the thread, split at
``max_message_chars`` counted after escaping ``&``, ``<`` and ``>`` (Slack renders the agent's text literally,
not as mention or link markup). The default 3,900 stays under the about 4,000 characters Slack recommends for
one readable message (it truncates at 40,000). A reply whose later parts fail resumes after the parts already
posted. HTTP 429 and ``{"ok": false, "error": "ratelimited"}`` carry ``Retry-After``, which the outbox honours;
sends are paced per channel. A handoff opens a thread by posting an anchor message and using its ``ts``.

Socket Mode is not built: it needs an app-level token and a websocket session, and this transport covers the
same events.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import msgspec
from aiohttp import web

from hermes_actors.errors import ConfigError
from hermes_actors.messages import InboundMessage, OutboundMessage
from hermes_actors.routing import SessionSource
from platforms.base import Capabilities, ReplySender, SendError
from platforms.slack.files import SlackFile, attach_files, downloadable
from platforms.support import http_client, json_guard
from platforms.support.http_client import shown
from platforms.support.http_host import HttpAdapter, Refused
from platforms.support.ratelimit import Rate, RateLimiter
from platforms.support.text import split_message

__all__ = ["MAX_TEXT_CHARS", "REPLAY_WINDOW_S", "SlackAdapter", "SlackApp", "SlackConfig", "SlackSender"]

_log = logging.getLogger(__name__)

REPLAY_WINDOW_S = 300  # how far X-Slack-Request-Timestamp may be from our clock, either way
MAX_TEXT_CHARS = 40_000  # Slack truncates longer message text
_PLATFORM = "slack"
_APP_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SLACK_ID = re.compile(r"[A-Z0-9]{1,32}")  # team, channel and user ids: T0123, C0123, U0123, W0123
_TS = re.compile(r"[0-9]{1,12}\.[0-9]{1,9}")
_TIMESTAMP = re.compile(r"[0-9]{1,15}")
_USER_TEXT_SUBTYPES = frozenset({"thread_broadcast", "file_share", "me_message"})
_EDITS = frozenset({"message_changed", "message_deleted"})
_PROGRESS_KEPT = 1_000  # partly sent replies remembered for a resumed retry


class SlackApp(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One Slack app (``platforms.slack.adapter.apps.<name>``); the name is the account in session keys.

    ``signing_secret`` and ``bot_token`` (``xoxb-...``) come from the app's settings page, or from the
    environment variables named by ``signing_secret_env`` and ``bot_token_env``. ``team_id`` limits the app to one
    workspace: events from any other are refused, since its bot token could not answer them.
    """

    signing_secret: str | None = None
    signing_secret_env: str | None = None
    bot_token: str | None = None
    bot_token_env: str | None = None
    team_id: str | None = None


class SlackConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``platforms.slack.adapter`` section; Slack posts events to ``http://host:port/slack/events/<app>``."""

    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = 8647
    api_base_url: str = "https://slack.com/api"
    reply_in_thread: bool = True
    max_message_chars: int = 3_900
    messages_per_second: float = 1.0  # per channel; Slack allows about one, with short bursts
    max_body_bytes: int = 1024 * 1024
    http_timeout_s: float = 10.0
    apps: dict[str, SlackApp] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        field = "platforms.slack.adapter"
        if not self.host.strip():
            raise ConfigError(f"{field}.host", "must not be empty; use 127.0.0.1 behind a reverse proxy")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"{field}.port", f"{self.port} is not a TCP port; use 0..65535 (0 picks a free one)")
        parts = urlsplit(self.api_base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"{field}.api_base_url", "must be an http(s) URL such as https://slack.com/api")
        if not 100 <= self.max_message_chars <= MAX_TEXT_CHARS:
            raise ConfigError(
                f"{field}.max_message_chars", f"must be between 100 and {MAX_TEXT_CHARS} (Slack truncates longer text)"
            )
        if self.messages_per_second <= 0:
            raise ConfigError(f"{field}.messages_per_second", "must be a positive rate; Slack allows about 1")
        if self.max_body_bytes < 1024:
            raise ConfigError(f"{field}.max_body_bytes", "must be at least 1024 bytes; the default is 1 MiB")
        if self.http_timeout_s <= 0:
            raise ConfigError(f"{field}.http_timeout_s", "must be a positive number of seconds")
        for name, app in self.apps.items():
            _check_app(name, app)


def _check_app(name: str, app: SlackApp) -> None:
    path = f"platforms.slack.adapter.apps.{name}"
    if not _APP_NAME.fullmatch(name):
        raise ConfigError(path, "an app name is 1 to 64 letters, digits, '_' or '-' (the URL is /slack/events/<name>)")
    for what, value, env in (
        ("signing_secret", app.signing_secret, app.signing_secret_env),
        ("bot_token", app.bot_token, app.bot_token_env),
    ):
        if value is None and env is None:
            raise ConfigError(
                f"{path}.{what}",
                f"is required; copy it from the app's settings at api.slack.com/apps, or name an environment "
                f"variable holding it in {what}_env",
            )
        if value is not None and env is not None:
            raise ConfigError(f"{path}.{what}_env", f"set either {what} or {what}_env, not both")
        if value is not None and (not value or value != value.strip()):
            raise ConfigError(f"{path}.{what}", "must not be empty or have spaces around it")
        if env is not None and not _ENV_NAME.fullmatch(env):
            raise ConfigError(f"{path}.{what}_env", "must be an environment variable name such as SLACK_BOT_TOKEN")
    if app.team_id is not None and not _SLACK_ID.fullmatch(app.team_id):
        raise ConfigError(f"{path}.team_id", "must be a Slack workspace id such as T0123ABCD")


class _App(msgspec.Struct, frozen=True, kw_only=True):
    """An app with its secrets read."""

    name: str
    signing_key: bytes
    bot_token: str
    team_id: str | None
    origin: str  # for the banner: where the secrets come from


def _secret(name: str, what: str, value: str | None, env: str | None, environ: Mapping[str, str]) -> str:
    if env is None:
        return value or ""
    found = environ.get(env, "").strip()
    if not found:
        raise ConfigError(f"platforms.slack.adapter.apps.{name}.{what}_env", f"environment variable {env} is not set")
    return found


def _resolve(name: str, app: SlackApp, environ: Mapping[str, str]) -> _App:
    secret = _secret(name, "signing_secret", app.signing_secret, app.signing_secret_env, environ)
    token = _secret(name, "bot_token", app.bot_token, app.bot_token_env, environ)
    origin = ", ".join(
        f"{what} from ${env}" if env is not None else f"{what} in config.yaml"
        for what, env in (("signing secret", app.signing_secret_env), ("bot token", app.bot_token_env))
    )
    return _App(name=name, signing_key=secret.encode(), bot_token=token, team_id=app.team_id, origin=origin)


# -- receiving ---------------------------------------------------------------------------------------------------


def _verify(key: bytes, headers: Mapping[str, str], body: bytes, now: float) -> None:
    """Check ``X-Slack-Signature`` and the replay window, or raise :class:`Refused` (401)."""
    timestamp = headers.get("X-Slack-Request-Timestamp")
    offered = headers.get("X-Slack-Signature")
    if timestamp is None or offered is None:
        raise Refused(401, "unsigned request: X-Slack-Request-Timestamp and X-Slack-Signature are required")
    if not _TIMESTAMP.fullmatch(timestamp):
        raise Refused(401, "X-Slack-Request-Timestamp must be an integer number of Unix seconds")
    skew = now - int(timestamp)
    if abs(skew) > REPLAY_WINDOW_S:
        when = f"{skew:.0f} s old" if skew > 0 else f"{-skew:.0f} s in the future"
        raise Refused(401, f"X-Slack-Request-Timestamp is {when}, outside the {REPLAY_WINDOW_S} s window")
    digest = hmac.new(key, b"v0:" + timestamp.encode() + b":" + body, hashlib.sha256).hexdigest()
    if not (offered.isascii() and hmac.compare_digest(offered.encode(), f"v0={digest}".encode())):
        raise Refused(401, "X-Slack-Signature does not match the body and the app's signing secret")


class _Authorization(msgspec.Struct, frozen=True, kw_only=True):
    user_id: str | None = None
    is_bot: bool = False


class _Envelope(msgspec.Struct, frozen=True, kw_only=True):
    """The outer Events API body; ``event`` stays raw until its type is known to be a message."""

    type: str
    challenge: str | None = None
    team_id: str | None = None
    event_id: str | None = None
    event: dict[str, Any] | None = None
    authorizations: list[_Authorization] = msgspec.field(default_factory=list)


class _Profile(msgspec.Struct, frozen=True, kw_only=True):
    display_name: str | None = None
    real_name: str | None = None


class _MessageEvent(msgspec.Struct, frozen=True, kw_only=True):
    """A ``message`` or ``app_mention`` event (the fields used)."""

    channel: str
    ts: str
    user: str | None = None
    text: str | None = None
    channel_type: str | None = None
    thread_ts: str | None = None
    team: str | None = None
    files: list[SlackFile] = msgspec.field(default_factory=list)
    user_profile: _Profile | None = None


_decode_envelope = msgspec.json.Decoder(_Envelope)


def _decode(body: bytes) -> _Envelope:
    try:
        return json_guard.decode(_decode_envelope, body)
    except msgspec.ValidationError as exc:
        raise Refused(400, f"the body is not an Events API payload ({exc})") from None
    except msgspec.DecodeError as exc:
        raise Refused(400, f"the body is not valid JSON ({exc})") from None


def _checked_id(value: str | None, pattern: re.Pattern[str], field: str) -> str:
    if value is None:
        raise Refused(400, f"{field} is missing")
    if not pattern.fullmatch(value):
        what = "a Slack ts such as 1764460800.000100" if pattern is _TS else "a Slack id such as C0123ABCD"
        raise Refused(400, f"{field} {value[:40]!r} is not {what}")
    return value


def _unescape(text: str) -> str:
    """Slack sends ``&``, ``<`` and ``>`` as entities; the agent should see what the user typed."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _stand_in(file: SlackFile) -> str:
    kind = (file.mimetype or "").partition("/")[0]
    label = kind if kind in ("image", "audio", "video") else "file"
    name = (file.name or "").replace("]", ")")[:80]
    return f"[{label}: {name}]" if name else f"[{label}]"


def _text_of(event: _MessageEvent, bot_user: str | None) -> str:
    """The message text as the agent should read it: entities decoded, our own @-mention removed, files named."""
    text = event.text or ""
    if bot_user is not None:
        stripped = re.sub(rf"<@{re.escape(bot_user)}(?:\|[^>]*)?>", "", text).strip()
        text = stripped or ("" if event.files else text)  # a bare mention still expects an answer
    parts = [_unescape(text).strip(), *(_stand_in(file) for file in event.files)]
    return "\n".join(part for part in parts if part)


class _Skipped(msgspec.Struct, frozen=True, kw_only=True):
    """An event that starts no turn, and why; ``quiet`` ones (bots' messages, our own replies) log at debug."""

    reason: str
    quiet: bool = False


def _to_inbound(
    app: _App, envelope: _Envelope, *, reply_in_thread: bool, received_at: float
) -> tuple[InboundMessage, list[SlackFile]] | _Skipped:
    """Map an ``event_callback`` to an inbound message and its files, or a :class:`_Skipped`; :class:`Refused`
    if broken."""
    raw = envelope.event
    if raw is None:
        raise Refused(400, "$.event is missing from an event_callback")
    kind, subtype = raw.get("type"), raw.get("subtype")
    if not isinstance(kind, str) or not isinstance(subtype, str | None):
        raise Refused(400, "$.event.type must be a string (and $.event.subtype a string when present)")
    if kind not in ("message", "app_mention"):
        return _Skipped(reason=f"a {kind[:40]!r} event is not a message")
    if subtype in _EDITS:
        return _Skipped(reason=f"a {subtype} event (edits and deletions do not start turns)")
    if raw.get("bot_id") is not None or subtype == "bot_message":
        return _Skipped(reason="a bot's message (ours or another app's)", quiet=True)
    if subtype is not None and subtype not in _USER_TEXT_SUBTYPES:
        return _Skipped(reason=f"a {subtype[:40]!r} message is not user text")
    try:
        event = msgspec.convert(raw, _MessageEvent)
    except msgspec.ValidationError as exc:
        raise Refused(400, f"$.event is not a message event ({exc})") from None
    team = _checked_id(envelope.team_id or event.team, _SLACK_ID, "$.team_id")
    if app.team_id is not None and team != app.team_id:
        raise Refused(403, f"app {app.name!r} accepts workspace {app.team_id} only, not {team}")
    channel = _checked_id(event.channel, _SLACK_ID, "$.event.channel")
    user = _checked_id(event.user, _SLACK_ID, "$.event.user")
    ts = _checked_id(event.ts, _TS, "$.event.ts")
    thread_ts = _checked_id(event.thread_ts, _TS, "$.event.thread_ts") if event.thread_ts is not None else None
    bot_user = next((a.user_id for a in envelope.authorizations if a.is_bot and a.user_id), None)
    if user == bot_user:
        return _Skipped(reason="our own message", quiet=True)
    text = _text_of(event, bot_user)
    if not text:
        return _Skipped(reason="a message without text or files")
    # app_mention has no channel_type; only DMs have D ids, so both copies of a message agree on the chat type.
    is_dm = event.channel_type == "im" or (event.channel_type is None and channel.startswith("D"))
    if thread_ts is None and reply_in_thread and not is_dm:
        thread_ts = ts  # the reply opens a thread under this message, and that thread is the session
    profile = event.user_profile
    source = SessionSource(
        platform=_PLATFORM,
        account_id=app.name,
        scope_id=team,
        chat_type="dm" if is_dm else "group",
        chat_id=channel,
        thread_id=thread_ts,
        user_id=user,
        user_name=(profile.display_name or profile.real_name or None) if profile is not None else None,
        message_id=ts,
    )
    inbound = InboundMessage(source=source, text=text, message_id=f"{team}:{channel}:{ts}", received_at=received_at)
    return inbound, event.files


def _answer(status: int, body: Mapping[str, Any], *, no_retry: bool = False) -> web.Response:
    # X-Slack-No-Retry: a payload we refused once will be refused again; Slack need not resend it.
    headers = {"X-Slack-No-Retry": "1"} if no_retry else None
    return web.json_response(dict(body), status=status, headers=headers)


class SlackAdapter(HttpAdapter[SlackConfig]):
    """The Slack entry point: an Events API server for the apps of a :class:`SlackConfig`, and their sender.

    Secrets named by ``*_env`` fields are read from ``environ`` (default ``os.environ``) here, so a missing one is
    a :class:`ConfigError` before anything starts. ``clock`` checks request timestamps.
    """

    platform = _PLATFORM
    server_name = "slack"

    def __init__(
        self,
        config: SlackConfig,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(config)
        env = os.environ if environ is None else environ
        self._apps = {name: _resolve(name, app, env) for name, app in config.apps.items()}
        self._clock = clock
        self.capabilities = Capabilities(threads=True, max_message_chars=config.max_message_chars)
        self.sender = SlackSender(self._apps, config)
        # Messages whose files are being fetched -> whether that copy was then stored (on the server's loop only).
        self._fetching: dict[tuple[str, str], asyncio.Future[bool]] = {}

    def senders(self) -> Sequence[ReplySender]:
        """The ``chat.postMessage`` sender (it also opens handoff threads)."""
        return [self.sender]

    def _add_routes(self, app: web.Application) -> None:
        """Serve ``POST /slack/events/<app>``."""
        app.router.add_post("/slack/events/{app}", self._receive)

    def describe(self) -> list[str]:
        """One banner line per app: its Request URL, where its secrets come from and where replies go."""
        if not self._apps:
            return [
                f"Slack: {self.url} has no apps; add one under platforms.slack.adapter.apps in config.yaml "
                "(signing_secret and bot_token from api.slack.com/apps)"
            ]
        api = shown(self.config.api_base_url.rstrip("/") + "/chat.postMessage")
        threads = "top-level channel messages answered in a thread" if self.config.reply_in_thread else "no threads"
        return [
            f"Slack app '{app.name}': Events API Request URL POST {self.url}/slack/events/{app.name} "
            f"(signed, {app.origin}); replies via {api} ({threads}); files are downloaded with the bot token "
            "(files:read scope) as attachments"
            for app in self._apps.values()
        ]

    async def _receive(self, request: web.Request) -> web.Response:
        name = request.match_info["app"]
        retry = request.headers.get("X-Slack-Retry-Num")
        try:
            app = self._apps.get(name)
            if app is None:
                raise Refused(404, f"no Slack app {name!r}; add it under platforms.slack.adapter.apps")
            body = await self._read_body(request)
            _verify(app.signing_key, request.headers, body, self._clock())
            envelope = _decode(body)
            if envelope.type == "url_verification":
                _log.info("slack app %r: answered the url_verification challenge", name)
                return web.json_response({"challenge": envelope.challenge or ""})
            if envelope.type == "app_rate_limited":
                _log.warning("slack app %r: Slack dropped events over the Events API rate limit", name)
            if envelope.type != "event_callback":
                _log.info("slack app %r: ignored a %r request", name, envelope.type[:40])
                return _answer(200, {"ok": True, "ignored": envelope.type[:40]})
            read = _to_inbound(app, envelope, reply_in_thread=self.config.reply_in_thread, received_at=self._clock())
        except Refused as exc:
            _log.info("slack app %r: refused a request (%d %s)", name, exc.status, exc.reason)
            return _answer(exc.status, {"error": exc.reason}, no_retry=exc.status != 401)
        event_id = (envelope.event_id or "without id")[:40]
        if isinstance(read, _Skipped):
            level = logging.DEBUG if read.quiet else logging.INFO
            _log.log(level, "slack app %r: skipped event %s: %s", name, event_id, read.reason)
            return _answer(200, {"ok": True, "ignored": read.reason})
        if retry is not None:
            reason = request.headers.get("X-Slack-Retry-Reason", "unknown")
            _log.info("slack app %r: event %s is Slack's retry %s (%s)", name, event_id, retry[:8], reason[:40])
        inbound, files = read
        if not any(downloadable(file) for file in files):
            return await self._accept(inbound)
        return await self._accept_with_files(app, inbound, files)

    async def _accept_with_files(self, app: _App, inbound: InboundMessage, files: list[SlackFile]) -> web.Response:
        """Download ``files`` as attachments, then accept; a copy arriving meanwhile waits for this one."""
        key = (app.name, inbound.message_id)
        first = self._fetching.get(key)
        if first is not None:
            _log.info("slack app %r: message %s is being fetched already; waiting for it", app.name, inbound.message_id)
            if await asyncio.shield(first):
                return await self._accept(inbound)  # stored by the first copy: recognised as a duplicate
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._fetching[key] = done
        stored = False
        try:
            inbound = await self._attach(app, inbound, files)
            answer = await self._accept(inbound)
            stored = answer.status == 200
            return answer
        finally:
            if self._fetching.get(key) is done:
                del self._fetching[key]
            done.set_result(stored)

    async def _attach(self, app: _App, inbound: InboundMessage, files: list[SlackFile]) -> InboundMessage:
        inbox = self._inbox
        if inbox is None:  # pragma: no cover - the server runs only after start()
            return inbound
        async with aiohttp.ClientSession() as session:
            return await attach_files(
                inbound,
                files,
                app_name=app.name,
                bot_token=app.bot_token,
                api_base_url=self.config.api_base_url,
                media=inbox.media,
                session=session,
                timeout_s=self.config.http_timeout_s,
            )

    async def _accept(self, inbound: InboundMessage) -> web.Response:
        result = await self._accept_inbound(inbound, _log, "slack app %r: could not accept message %s")
        if result is None:  # not stored: a 5xx makes Slack deliver the event again
            return _answer(503, {"error": "the event could not be stored; Slack will retry it"})
        if result.duplicate:
            _log.info("slack app %r: message %s was already stored", inbound.source.account_id, inbound.message_id)
        return _answer(200, {"ok": True, "duplicate": result.duplicate, "routing_key": result.routing_key})


# -- sending -----------------------------------------------------------------------------------------------------


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
    "msg_too_long": "the text is too long; lower platforms.slack.adapter.max_message_chars",
}


class SlackSender:
    """Posts replies with ``chat.postMessage`` (the app is the reply's ``account_id``) and opens handoff threads.

    Called from the outbox thread (replies) and session threads (``create_thread``): the state here is locked.
    """

    platform = _PLATFORM
    idempotent_sends = False  # chat.postMessage has no idempotency key

    def __init__(self, apps: Mapping[str, _App], config: SlackConfig) -> None:
        self._apps = apps
        self._url = config.api_base_url.rstrip("/") + "/chat.postMessage"
        self._limit = config.max_message_chars
        self._timeout = config.http_timeout_s
        self._limiter = RateLimiter(per_key=Rate(per_second=config.messages_per_second, burst=3))
        self._lock = threading.Lock()
        self._progress: OrderedDict[str, list[str]] = OrderedDict()  # reply identity -> ts of the parts posted

    def send(self, message: OutboundMessage) -> str | None:
        """Post ``message`` (split if long) into its channel and thread; return the ts of its first part."""
        app = self._app(message.account_id)
        if not message.chat_id:
            raise SendError(f"slack app {app.name!r}: a reply without a channel id cannot be sent")
        parts = split_message(message.text, self._limit, length=_escaped_length) if message.text.strip() else []
        if not parts:
            _log.info("slack app %r: an empty reply to %s is not sent", app.name, message.chat_id)
            return None
        identity = _identity(message)
        with self._lock:
            posted = list(self._progress.get(identity, ()))
        for part in parts[len(posted) :]:
            try:
                posted.append(self._post(app, message.chat_id, part, message.thread_id))
            except SendError:
                with self._lock:
                    if posted:  # a retry resumes after the parts Slack already has
                        self._progress[identity] = posted
                        self._progress.move_to_end(identity)
                        while len(self._progress) > _PROGRESS_KEPT:
                            self._progress.popitem(last=False)
                raise
        with self._lock:
            self._progress.pop(identity, None)
        return posted[0]

    def create_thread(self, chat_id: str, title: str, *, account_id: str = "") -> str:
        """Post ``title`` as an anchor message in ``chat_id``; its ts is the new thread's id."""
        app = self._app(account_id)
        anchor = split_message(title.strip() or "Handoff", self._limit, length=_escaped_length)[0]
        return self._post(app, chat_id, anchor, None)

    def _app(self, account_id: str) -> _App:
        app = self._apps.get(account_id)
        if app is None and not account_id and len(self._apps) == 1:
            app = next(iter(self._apps.values()))
        if app is None:
            raise SendError(f"slack: no app {account_id!r} is configured; add it under platforms.slack.adapter.apps")
        return app

    def _post(self, app: _App, channel: str, text: str, thread_ts: str | None) -> str:
        """One ``chat.postMessage`` call; return the new message's ts or raise :class:`SendError`."""
        key = f"{app.name}:{channel}"
        self._limiter.acquire(key)
        body: dict[str, str] = {"channel": channel, "text": _escape(text)}
        if thread_ts:
            body["thread_ts"] = thread_ts
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


def _identity(message: OutboundMessage) -> str:
    """The same for every attempt at one reply, different between replies."""
    identity = msgspec.json.encode(
        [message.account_id, message.chat_id, message.thread_id, message.session_id, message.answers, message.text]
    )
    return hashlib.sha256(identity).hexdigest()
