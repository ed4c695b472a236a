"""A local Discord for tests: the gateway websocket and the REST API on 127.0.0.1, speaking Discord's JSON.

The gateway (``/gateway``, and ``/resume-gateway`` as READY's ``resume_gateway_url``) sends Hello, acknowledges
heartbeats, checks Identify (token, intents; 4004 and 4014 as Discord closes), starts sessions with READY and a
GUILD_CREATE per guild, keeps every dispatch of a session in a log and replays it on Resume (after the client's
sequence, optionally overlapping already-seen events to provoke duplicates), then sends RESUMED. Tests can drop a
connection without a close frame, send op 7 or op 9, stop acknowledging heartbeats (a zombie), and push raw frames.
Events dispatched while a session has no connection wait in its log; after an invalidation they are lost, as on
Discord (see :attr:`DiscordFake.lost`).

The REST API (``/api/v10``) answers ``GET /gateway/bot``, ``GET /channels/{id}``, ``POST /channels/{id}/messages``
(2,000 characters, ``enforce_nonce``, echoing the bot's own message over the gateway as Discord does; as JSON, or
as ``multipart/form-data`` with ``payload_json`` and files ``files[n]`` named in its ``attachments``) and
``POST /channels/{id}/threads``, with ``Authorization: Bot <token>``, ``X-RateLimit-*`` headers per channel bucket,
429 with JSON ``retry_after`` (per bucket or ``global``), and Discord's JSON error codes. Failures can be
scripted, including an answer lost after the message was created.

The CDN (``/attachments/{channel_id}/{attachment_id}/{filename}``) serves the files of :meth:`DiscordFake.attachment`
as Discord's does: only at the signed URL of the attachment object (``ex`` expiry, ``is`` issue time, ``hm``
signature; anything else is a 404, "This content is no longer available."), without asking for credentials. Every
download is recorded with its headers (:meth:`DiscordFake.downloads`); failed and slow answers can be scripted.
In short::

    with DiscordFake() as fake:
        fake.add_bot(TOKEN, "900")
        fake.add_guild("1", "Guild", bots=[TOKEN])
        fake.add_channel("10", "1", "general")
        fake.wait_ready(TOKEN)
        fake.post("10", ALICE, "hi")
        fake.wait_for(lambda: fake.sent(TOKEN))
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import itertools
import json
import math
import threading
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote

from aiohttp import WSMsgType, web

from platforms.support.http_host import HttpHost
from tests.platforms.form_data import Upload, is_form, parse_form
from tests.platforms.support import wait_on

__all__ = [
    "API_PREFIX",
    "CDN_PREFIX",
    "MESSAGES_BUCKET",
    "Call",
    "DiscordFake",
    "Download",
    "FormBody",
    "Sent",
    "user",
]

T = TypeVar("T")

API_PREFIX = "/api/v10"
CDN_PREFIX = "/attachments"
_GONE = "This content is no longer available."
MESSAGES_BUCKET = "80c17d2f203122d936070c88c8d10f33"  # what Discord names the messages route's bucket
_OTHER_BUCKET = "41f9cd5d28af77da04563bcb1d67fdfd"
_MESSAGE_CONTENT = 1 << 15
_DM_TYPES = (1, 3)
_TEXT_TYPES = (0, 5)
_FORUM_TYPES = (15, 16)
_snowflakes = itertools.count(1_300_000_000_000_000_000)


def _snowflake() -> str:
    return str(next(_snowflakes))


def user(user_id: str, username: str = "ann", *, global_name: str | None = None, bot: bool = False) -> dict[str, Any]:
    """A ``User`` object."""
    found: dict[str, Any] = {"id": user_id, "username": username, "discriminator": "0", "global_name": global_name}
    if bot:
        found["bot"] = True
    return found


@dataclass(frozen=True)
class Call:
    """One REST request: the bot (``None`` when the token was refused), route, JSON body, status and when."""

    token: str | None
    method: str
    path: str
    body: Any
    status: int
    at: float


@dataclass(frozen=True)
class FormBody:
    """A ``multipart/form-data`` request: its ``payload_json`` decoded, and its files."""

    payload: Any
    files: list[Upload]


@dataclass(frozen=True)
class Sent:
    """A message the REST API created: who sent it, the request body (``payload_json`` of a form), the message
    object answered, and the files uploaded with it."""

    token: str
    channel_id: str
    body: dict[str, Any]
    message: dict[str, Any]
    files: tuple[Upload, ...] = ()


@dataclass(frozen=True)
class Download:
    """One request to the CDN: its path, query, headers (lower-cased names) and the status answered."""

    path: str
    query: dict[str, str]
    headers: dict[str, str]
    status: int


@dataclass
class _File:
    data: bytes
    content_type: str | None
    delay_s: float = 0.0
    failures: deque[int] = field(default_factory=deque)  # statuses to answer before the file


@dataclass
class _Failure:
    status: int
    body: Any
    headers: dict[str, str]
    after: int
    lose_answer: bool


@dataclass(eq=False)
class _Connection:
    ws: web.WebSocketResponse
    request: web.Request
    path: str
    query: dict[str, str]
    send_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    session: _Session | None = None
    ack: bool = True
    close_code: int | None = None  # the code the side that closed first sent
    closed_by_server: bool = False


@dataclass(eq=False)
class _Session:
    id: str
    token: str
    log: list[tuple[int, str, str]] = field(default_factory=list)  # (seq, event, frame)
    seq: int = 0
    live: _Connection | None = None
    resumable: bool = True


@dataclass(eq=False)
class _Bot:
    token: str
    user: dict[str, Any]
    message_content: bool
    session: _Session | None = None
    established: int = 0  # sessions started or resumed, once caught up


class DiscordFake:
    """The fake Discord; see the module docstring.

    ``bucket_limit`` messages per ``bucket_window_s`` per channel; ``resume_overlap`` replays that many events the
    client already had on each resume; ``guild_creates`` false leaves channel types to ``GET /channels/{id}``.
    """

    def __init__(
        self,
        *,
        heartbeat_interval_ms: int = 1000,
        bucket_limit: int = 100,
        bucket_window_s: float = 1.0,
        resume_overlap: int = 0,
        guild_creates: bool = True,
    ) -> None:
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.bucket_limit = bucket_limit
        self.bucket_window_s = bucket_window_s
        self.resume_overlap = resume_overlap
        self.guild_creates = guild_creates
        self.session_starts_left = 1000
        self.refusing = False  # set: gateway connections are answered 503 (an outage) until it is cleared
        self.lost: list[tuple[str, str]] = []  # (token, event) dispatched while no session could take it
        self._lock = threading.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._bots: dict[str, _Bot] = {}
        self._guilds: dict[str, dict[str, Any]] = {}
        self._guild_bots: defaultdict[str, set[str]] = defaultdict(set)
        self._channels: dict[str, dict[str, Any]] = {}
        self._dm_owner: dict[str, str] = {}  # DM channel -> the bot's token
        self._dms: dict[tuple[str, str], str] = {}  # (token, user id) -> DM channel
        self._connections: list[_Connection] = []
        self._identifies: list[tuple[str, dict[str, Any]]] = []
        self._resumes: list[tuple[str, dict[str, Any]]] = []
        self._heartbeats: list[tuple[str, Any, float]] = []
        self._calls: list[Call] = []
        self._sent: list[Sent] = []
        self._nonces: dict[tuple[str, str], dict[str, Any]] = {}
        self._buckets: dict[str, tuple[float, int]] = {}  # channel -> (window start, count)
        self._failures: defaultdict[str, deque[_Failure]] = defaultdict(deque)
        self._global_until = 0.0
        self._closing = False
        self._files: dict[str, _File] = {}  # CDN path -> file
        self._downloads: list[Download] = []
        self._cdn_key = uuid.uuid4().bytes  # signs attachment URLs
        app = web.Application()
        app.on_startup.append(self._remember_loop)
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/resume-gateway", self._gateway)
        app.router.add_get(API_PREFIX + "/gateway/bot", self._gateway_bot)
        app.router.add_get(API_PREFIX + "/channels/{channel_id}", self._get_channel)
        app.router.add_get(API_PREFIX + "/users/@me", self._get_me)
        app.router.add_post(API_PREFIX + "/channels/{channel_id}/messages", self._create_message)
        app.router.add_post(API_PREFIX + "/channels/{channel_id}/threads", self._start_thread)
        app.router.add_get(CDN_PREFIX + "/{channel_id}/{attachment_id}/{filename}", self._cdn)
        self._host = HttpHost(app, name="discord-fake")

    # -- lifecycle

    async def _remember_loop(self, app: web.Application) -> None:
        self._loop = asyncio.get_running_loop()

    def start(self) -> DiscordFake:
        self._host.start()
        return self

    def stop(self) -> None:
        """Refuse new connections, close the open websockets (going away), then stop the server."""
        self._closing = True
        if self._loop is not None:
            self._run(self._close_all())
        self._host.stop(5)

    def __enter__(self) -> DiscordFake:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def api_base(self) -> str:
        """What ``platforms.discord.api_base_url`` should be."""
        return self._host.url + API_PREFIX

    @property
    def gateway_url(self) -> str:
        """What ``GET /gateway/bot`` answers (and ``platforms.discord.gateway_url`` may be)."""
        return self._host.url.replace("http://", "ws://") + "/gateway"

    @property
    def resume_url(self) -> str:
        return self._host.url.replace("http://", "ws://") + "/resume-gateway"

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        assert self._loop is not None, "start the fake first"
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)

    # -- setting up

    def add_bot(self, token: str, user_id: str, username: str = "hermes", *, message_content: bool = True) -> None:
        """Accept ``token`` as bot user ``user_id``; ``message_content`` false refuses that privileged intent."""
        with self._lock:
            bot_user = user(user_id, username, bot=True)
            self._bots[token] = _Bot(token=token, user=bot_user, message_content=message_content)

    def add_guild(self, guild_id: str, name: str, *, bots: Iterable[str]) -> None:
        """A guild with the bots (tokens) that are members of it."""
        with self._lock:
            self._guilds[guild_id] = {"id": guild_id, "name": name}
            self._guild_bots[guild_id].update(bots)

    def add_channel(
        self, channel_id: str, guild_id: str, name: str, *, type: int = 0, parent_id: str | None = None
    ) -> dict[str, Any]:
        """A guild channel; a thread is type 10, 11 or 12 with ``parent_id``."""
        channel: dict[str, Any] = {"id": channel_id, "type": type, "guild_id": guild_id, "name": name}
        if parent_id is not None:
            channel["parent_id"] = parent_id
        with self._lock:
            self._channels[channel_id] = channel
        return channel

    def dm_channel(self, token: str, person: dict[str, Any]) -> str:
        """The DM channel between the bot and ``person`` (made on first use)."""
        with self._lock:
            key = (token, person["id"])
            if key not in self._dms:
                channel_id = _snowflake()
                self._dms[key] = channel_id
                self._dm_owner[channel_id] = token
                self._channels[channel_id] = {"id": channel_id, "type": 1, "recipients": [person]}
            return self._dms[key]

    def fail(
        self,
        route: str,
        status: int,
        body: Any = None,
        *,
        times: int = 1,
        after: int = 0,
        headers: dict[str, str] | None = None,
        lose_answer: bool = False,
    ) -> None:
        """Answer ``times`` requests of ``route`` (``"POST /channels/{channel_id}/messages"``), after ``after``.

        ``lose_answer`` does the request's work, then drops the connection without answering.
        """
        with self._lock:
            for number in range(times):
                failure = _Failure(status, body, dict(headers or {}), after if number == 0 else 0, lose_answer)
                self._failures[route].append(failure)

    def rate_limit_globally(self, seconds: float) -> None:
        """Answer every REST request with a global 429 for ``seconds``."""
        with self._lock:
            self._global_until = time.monotonic() + seconds

    def attachment(
        self,
        channel_id: str,
        filename: str,
        data: bytes,
        *,
        content_type: str | None = "image/png",
        size: int | None = None,
        expires_in_s: float = 86_400.0,
        delay_s: float = 0.0,
    ) -> dict[str, Any]:
        """Upload ``data`` to the CDN; return the attachment object for a message's ``attachments``.

        ``size`` is what the object claims (default: the real size); ``content_type`` ``None`` leaves the field out,
        as Discord does for types it does not know. The URL's signature expires after ``expires_in_s``; the CDN
        waits ``delay_s`` before it answers.
        """
        attachment_id = _snowflake()
        path = f"{CDN_PREFIX}/{channel_id}/{attachment_id}/{quote(filename)}"
        issued = int(time.time())
        expires = int(issued + expires_in_s)
        query = f"ex={expires:x}&is={issued:x}&hm={self._signature(path, expires, issued)}&"
        with self._lock:
            self._files[path] = _File(data=data, content_type=content_type, delay_s=delay_s)
        found: dict[str, Any] = {
            "id": attachment_id,
            "filename": filename,
            "size": len(data) if size is None else size,
            "url": f"{self._host.url}{path}?{query}",
            "proxy_url": f"{self._host.url}{path}?{query}",
        }
        if content_type is not None:
            found["content_type"] = content_type
        return found

    def fail_download(self, attachment: dict[str, Any], status: int, *, times: int = 1) -> None:
        """Answer the next ``times`` downloads of ``attachment`` (an object from :meth:`attachment`) with ``status``."""
        path = attachment["url"].removeprefix(self._host.url).partition("?")[0]
        with self._lock:
            self._files[path].failures.extend([status] * times)

    # -- events

    def post(self, channel_id: str, author: dict[str, Any], content: str = "", **fields: Any) -> str:
        """A user posts in ``channel_id``: every bot that sees it gets MESSAGE_CREATE; return the message id."""
        with self._lock:
            channel = self._channels[channel_id]
        message: dict[str, Any] = {
            "id": fields.pop("id", None) or _snowflake(),
            "channel_id": channel_id,
            "author": author,
            "content": content,
            "timestamp": "2026-01-01T00:00:00.000000+00:00",
            "edited_timestamp": None,
            "type": 0,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "pinned": False,
            "flags": 0,
        }
        if "guild_id" in channel:
            message["guild_id"] = channel["guild_id"]
            message["member"] = {"roles": [], "joined_at": "2025-01-01T00:00:00.000000+00:00", "nick": None}
        message.update(fields)
        self._run(self._deliver(channel, "MESSAGE_CREATE", message))
        return str(message["id"])

    def dispatch(self, token: str, event: str, data: Any) -> int | None:
        """Dispatch ``event`` to the bot's session; return its sequence number (``None``: lost, no session)."""
        return self._run(self._dispatch(self._bots[token], event, json.dumps(data)))

    def dispatch_raw(self, token: str, event: str, raw_data: str) -> int | None:
        """Dispatch ``event`` with ``raw_data`` as its ``d`` (any JSON text, well-formed or not)."""
        return self._run(self._dispatch(self._bots[token], event, raw_data))

    def send_raw(self, token: str, data: str | bytes) -> None:
        """Send one frame as it is (text, or binary for bytes) on the bot's live connection."""
        self._run(self._send_raw(self._bots[token], data))

    def drop(self, token: str) -> None:
        """Cut the bot's connection without a close frame (its session stays resumable)."""
        self._run(self._drop(self._bots[token]))

    def reconnect(self, token: str) -> None:
        """Send op 7 Reconnect."""
        self._run(self._send_raw(self._bots[token], json.dumps({"op": 7, "d": None, "s": None, "t": None})))

    def invalidate(self, token: str, *, resumable: bool) -> None:
        """Send op 9 Invalid Session; unless ``resumable``, the session is over and later events are lost."""
        self._run(self._invalidate(self._bots[token], resumable))

    def close(self, token: str, code: int, reason: str = "") -> None:
        """Close the bot's live connection with ``code``."""
        self._run(self._close(self._bots[token], code, reason))

    def stop_acking(self, token: str) -> None:
        """The live connection stops acknowledging heartbeats (later connections acknowledge again)."""
        with self._lock:
            session = self._bots[token].session
            live = session.live if session is not None else None
            assert live is not None, "the bot has no live connection"
            live.ack = False

    def request_heartbeat(self, token: str) -> None:
        """Send op 1: the client must heartbeat at once."""
        self._run(self._send_raw(self._bots[token], json.dumps({"op": 1, "d": None, "s": None, "t": None})))

    # -- reading what happened

    def wait_for(self, check: Callable[[], T], timeout: float = 10.0) -> T:
        """Wait until ``check()`` is truthy (it is re-checked on every change); return it."""
        return wait_on(
            self._lock,
            check,
            timeout,
            lambda: f"timed out after {timeout} s; REST calls: {[c.path for c in self._calls]}",
        )

    def wait_ready(self, token: str, count: int = 1, timeout: float = 10.0) -> None:
        """Wait until the bot has started or resumed ``count`` sessions and is connected."""
        bot = self._bots[token]

        def ready() -> bool:
            with self._lock:
                return bot.established >= count and bot.session is not None and bot.session.live is not None

        self.wait_for(ready, timeout)

    def session_id(self, token: str) -> str | None:
        with self._lock:
            session = self._bots[token].session
            return None if session is None else session.id

    def identifies(self, token: str | None = None) -> list[dict[str, Any]]:
        """The ``d`` of every Identify (with the token that sent it, if known)."""
        with self._lock:
            return [d for t, d in self._identifies if token is None or t == token]

    def resumes(self, token: str | None = None) -> list[dict[str, Any]]:
        """The ``d`` of every Resume."""
        with self._lock:
            return [d for t, d in self._resumes if token is None or t == token]

    def heartbeats(self, token: str) -> list[tuple[Any, float]]:
        """``(d, monotonic time)`` of every heartbeat of the bot."""
        with self._lock:
            return [(d, at) for t, d, at in self._heartbeats if t == token]

    def connections(self) -> list[tuple[str, dict[str, str], int | None]]:
        """``(path, query, close code)`` of every websocket, oldest first."""
        with self._lock:
            return [(c.path, dict(c.query), c.close_code) for c in self._connections]

    def calls(self, route: str | None = None) -> list[Call]:
        """Every REST request (whose ``METHOD path`` starts with ``route``), oldest first."""
        with self._lock:
            return [c for c in self._calls if route is None or f"{c.method} {c.path}".startswith(route)]

    def sent(self, token: str | None = None, channel_id: str | None = None) -> list[Sent]:
        """Every message the REST API created (not counting nonce repeats)."""
        with self._lock:
            return [
                s
                for s in self._sent
                if (token is None or s.token == token) and (channel_id is None or s.channel_id == channel_id)
            ]

    def downloads(self) -> list[Download]:
        """Every request to the CDN, oldest first."""
        with self._lock:
            return list(self._downloads)

    def texts(self, token: str | None = None) -> list[str]:
        return [s.body["content"] for s in self.sent(token)]

    def channel(self, channel_id: str) -> dict[str, Any] | None:
        with self._lock:
            return self._channels.get(channel_id)

    def _changed(self) -> None:
        with self._lock:
            self._lock.notify_all()

    # -- the gateway

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        if self._closing:  # stopping: no new connections
            return web.Response(status=503, text="the fake is stopping")
        if self.refusing:
            return web.Response(status=503, text="the gateway is unavailable")
        ws = web.WebSocketResponse(autoping=True, max_msg_size=1024 * 1024)
        await ws.prepare(request)
        conn = _Connection(ws=ws, request=request, path=request.path, query=dict(request.query))
        with self._lock:
            self._connections.append(conn)
            self._lock.notify_all()
        try:
            if request.query.get("v") != "10":
                await self._server_close(conn, 4012, "Invalid API version.")
                return ws
            if request.query.get("encoding") != "json":
                await self._server_close(conn, 4002, "Error while decoding payload.")
                return ws
            await self._send(conn, {"op": 10, "d": {"heartbeat_interval": self.heartbeat_interval_ms}})
            async for message in ws:
                if not await self._receive(conn, message.type, message.data):
                    break
        finally:
            with self._lock:
                if not conn.closed_by_server:
                    conn.close_code = ws.close_code
                session = conn.session
                if session is not None and session.live is conn:
                    session.live = None
                if session is not None and not conn.closed_by_server and ws.close_code in (1000, 1001):
                    session.resumable = False  # the client closed cleanly: the session ends, as on Discord
                self._lock.notify_all()
        return ws

    async def _receive(self, conn: _Connection, kind: WSMsgType, data: Any) -> bool:
        try:
            payload = json.loads(data) if kind is WSMsgType.TEXT else None
            op = payload["op"] if isinstance(payload, dict) else None
        except (ValueError, KeyError):
            op = None
        if op is None or not isinstance(payload, dict):
            await self._server_close(conn, 4002, "Error while decoding payload.")
            return False
        d = payload.get("d")
        if op == 1:
            with self._lock:
                token = conn.session.token if conn.session is not None else ""
                self._heartbeats.append((token, d, time.monotonic()))
                self._lock.notify_all()
            if conn.ack:
                await self._send(conn, {"op": 11})
        elif op == 2:
            await self._identify(conn, d if isinstance(d, dict) else {})
        elif op == 6:
            await self._resume(conn, d if isinstance(d, dict) else {})
        else:
            await self._server_close(conn, 4001, "Unknown opcode.")
            return False
        return True

    async def _identify(self, conn: _Connection, d: dict[str, Any]) -> None:
        token = d.get("token")
        with self._lock:
            bot = self._bots.get(token) if isinstance(token, str) else None
            self._identifies.append((token if isinstance(token, str) else "", d))
        if bot is None:
            await self._server_close(conn, 4004, "Authentication failed.")
            return
        if conn.session is not None:
            await self._server_close(conn, 4005, "Already authenticated.")
            return
        intents = d.get("intents")
        if not isinstance(intents, int) or intents < 0 or intents >= 1 << 26:
            await self._server_close(conn, 4013, "Invalid intent(s).")
            return
        if intents & _MESSAGE_CONTENT and not bot.message_content:
            await self._server_close(conn, 4014, "Disallowed intent(s).")
            return
        with self._lock:
            if bot.session is not None:
                bot.session.resumable = False
            session = _Session(id=uuid.uuid4().hex, token=bot.token)
            bot.session = conn.session = session
            guilds = [g for g, bots in self._guild_bots.items() if bot.token in bots]
        ready = {
            "v": 10,
            "user": bot.user,
            "guilds": [{"id": g, "unavailable": True} for g in guilds],
            "session_id": session.id,
            "resume_gateway_url": self.resume_url,
            "application": {"id": bot.user["id"], "flags": 0},
        }
        self._append(session, "READY", json.dumps(ready))
        if self.guild_creates:
            for guild in guilds:
                self._append(session, "GUILD_CREATE", json.dumps(self._guild_create(guild)))
        await self._attach(conn, session, 0, bot)

    def _guild_create(self, guild_id: str) -> dict[str, Any]:
        with self._lock:
            mine = [c for c in self._channels.values() if c.get("guild_id") == guild_id]
            name = self._guilds[guild_id]["name"]
        channels = [{k: v for k, v in c.items() if k != "guild_id"} for c in mine if c["type"] not in (10, 11, 12)]
        threads = [c for c in mine if c["type"] in (10, 11, 12)]
        return {"id": guild_id, "name": name, "unavailable": False, "channels": channels, "threads": threads}

    async def _resume(self, conn: _Connection, d: dict[str, Any]) -> None:
        token = d.get("token")
        with self._lock:
            bot = self._bots.get(token) if isinstance(token, str) else None
            self._resumes.append((token if isinstance(token, str) else "", d))
            session = bot.session if bot is not None else None
        if bot is None:
            await self._server_close(conn, 4004, "Authentication failed.")
            return
        if session is None or session.id != d.get("session_id") or not session.resumable:
            await self._send(conn, {"op": 9, "d": False})
            return
        seq = d.get("seq")
        if seq is not None and (not isinstance(seq, int) or seq > session.seq):
            await self._server_close(conn, 4007, "Invalid seq.")
            return
        with self._lock:
            old, session.live = session.live, None
            conn.session = session
            after = (seq or 0) - self.resume_overlap
            start = next((i for i, (s, _, _) in enumerate(session.log) if s > after), len(session.log))
        if old is not None and old is not conn:
            await self._server_close(old, 4000, "Resumed elsewhere.")
        await self._attach(conn, session, start, bot, resumed=True)

    async def _attach(
        self, conn: _Connection, session: _Session, start: int, bot: _Bot, *, resumed: bool = False
    ) -> None:
        """Send the session's log from ``start`` on, then make ``conn`` the session's live connection."""
        index = start
        while True:
            with self._lock:
                if index >= len(session.log):
                    if resumed:
                        session.seq += 1
                        frame = json.dumps({"op": 0, "t": "RESUMED", "s": session.seq, "d": {}})
                        session.log.append((session.seq, "RESUMED", frame))
                        resumed = False
                        continue
                    session.live = conn
                    bot.established += 1
                    self._lock.notify_all()
                    return
                _, event, frame = session.log[index]
            index += 1
            if not (resumed and event == "READY"):  # an overlapping replay never repeats READY
                await self._send_text(conn, frame)

    def _append(self, session: _Session, event: str, raw: str) -> str:
        with self._lock:
            session.seq += 1
            frame = f'{{"op": 0, "t": {json.dumps(event)}, "s": {session.seq}, "d": {raw}}}'
            session.log.append((session.seq, event, frame))
            return frame

    async def _dispatch(self, bot: _Bot, event: str, raw: str) -> int | None:
        with self._lock:
            session = bot.session
            if session is None or not session.resumable:
                self.lost.append((bot.token, event))
                self._lock.notify_all()
                return None
        frame = self._append(session, event, raw)
        with self._lock:
            seq, live = session.seq, session.live
        if live is not None:
            await self._send_text(live, frame)
        return seq

    async def _deliver(self, channel: dict[str, Any], event: str, data: dict[str, Any]) -> None:
        """Dispatch ``event`` to every bot that can see ``channel``."""
        raw = json.dumps(data)
        for bot in self._viewers(channel):
            await self._dispatch(bot, event, raw)

    def _viewers(self, channel: dict[str, Any]) -> list[_Bot]:
        with self._lock:
            if "guild_id" in channel:
                return [self._bots[t] for t in sorted(self._guild_bots[channel["guild_id"]]) if t in self._bots]
            owner = self._dm_owner.get(channel["id"])
            return [self._bots[owner]] if owner in self._bots else []

    async def _send(self, conn: _Connection, payload: dict[str, Any]) -> None:
        await self._send_text(conn, json.dumps({"s": None, "t": None, "d": None} | payload))

    async def _send_text(self, conn: _Connection, frame: str) -> None:
        async with conn.send_lock:
            if not conn.ws.closed:
                with contextlib.suppress(ConnectionError):
                    await conn.ws.send_str(frame)

    async def _send_raw(self, bot: _Bot, data: str | bytes) -> None:
        live = bot.session.live if bot.session is not None else None
        assert live is not None, "the bot has no live connection"
        if isinstance(data, bytes):
            async with live.send_lock:
                await live.ws.send_bytes(data)
        else:
            await self._send_text(live, data)

    async def _drop(self, bot: _Bot) -> None:
        with self._lock:
            live = bot.session.live if bot.session is not None else None
            assert live is not None, "the bot has no live connection"
            bot.session.live = None  # type: ignore[union-attr]
        transport = live.request.transport
        if transport is not None:
            transport.abort()

    async def _invalidate(self, bot: _Bot, resumable: bool) -> None:
        with self._lock:
            session = bot.session
            live = session.live if session is not None else None
            assert session is not None, "the bot has no session"
            assert live is not None, "the bot has no live connection"
            if not resumable:
                session.resumable = False
                session.live = None
        await self._send(live, {"op": 9, "d": resumable})

    async def _close(self, bot: _Bot, code: int, reason: str) -> None:
        with self._lock:
            live = bot.session.live if bot.session is not None else None
        assert live is not None, "the bot has no live connection"
        await self._server_close(live, code, reason)

    async def _close_all(self) -> None:
        with self._lock:
            open_ones = [c for c in self._connections if not c.ws.closed]
        for conn in open_ones:
            await self._server_close(conn, 1001, "Going away.")

    async def _server_close(self, conn: _Connection, code: int, reason: str) -> None:
        with self._lock:
            conn.closed_by_server = True
            conn.close_code = code
        await conn.ws.close(code=code, message=reason.encode())

    # -- the CDN

    def _signature(self, path: str, expires: int, issued: int) -> str:
        return hmac.new(self._cdn_key, f"{path}|{expires:x}|{issued:x}".encode(), hashlib.sha256).hexdigest()

    def _signed(self, request: web.Request) -> bool:
        """Whether the request carries a valid, unexpired signature for its path."""
        try:
            expires, issued = int(request.query["ex"], 16), int(request.query["is"], 16)
        except (KeyError, ValueError):
            return False
        expected = self._signature(request.rel_url.raw_path, expires, issued)
        return hmac.compare_digest(request.query.get("hm", ""), expected) and time.time() < expires

    async def _cdn(self, request: web.Request) -> web.StreamResponse:
        with self._lock:
            file = self._files.get(request.rel_url.raw_path) if self._signed(request) else None
            failure = file.failures.popleft() if file is not None and file.failures else None
        if file is not None and file.delay_s > 0:
            await asyncio.sleep(file.delay_s)
        if file is None:
            response = web.Response(status=404, text=_GONE)
        elif failure is not None:
            response = web.Response(status=failure, text=f"HTTP {failure}")
        else:
            response = web.Response(body=file.data, content_type=file.content_type or "application/octet-stream")
        with self._lock:
            headers = {name.lower(): value for name, value in request.headers.items()}
            self._downloads.append(Download(request.rel_url.raw_path, dict(request.query), headers, response.status))
            self._lock.notify_all()
        return response

    # -- the REST API

    async def _rest(
        self,
        request: web.Request,
        route: str,
        handle: Callable[[_Bot, dict[str, str], Any], Coroutine[Any, Any, tuple[int, Any, dict[str, str]]]],
    ) -> web.StreamResponse:
        auth = request.headers.get("Authorization", "")
        body: Any = None
        raw = await request.read()
        with self._lock:
            bot = self._bots.get(auth.removeprefix("Bot ")) if auth.startswith("Bot ") else None
        if raw and is_form(request.headers.get("Content-Type", "")):
            try:
                fields, files = parse_form(request.headers["Content-Type"], raw)
                body = FormBody(json.loads(fields.get("payload_json", "{}")), files)
            except ValueError:
                return self._record(request, bot, None, 400, {"message": "Invalid Form Body", "code": 50035})
        elif raw:
            try:
                body = json.loads(raw)
            except ValueError:
                return self._record(
                    request, bot, None, 400, {"message": "The request body contains invalid JSON.", "code": 50109}
                )
        if bot is None:
            return self._record(request, None, body, 401, {"message": "401: Unauthorized", "code": 0})
        now = time.monotonic()
        with self._lock:
            global_wait = self._global_until - now
            failure = None
            queue = self._failures[route]
            if queue:
                if queue[0].after > 0:
                    queue[0].after -= 1
                else:
                    failure = queue.popleft()
        if global_wait > 0:
            headers = {
                "Retry-After": str(math.ceil(global_wait)),
                "X-RateLimit-Global": "true",
                "X-RateLimit-Scope": "global",
            }
            answer = {"message": "You are being rate limited.", "retry_after": round(global_wait, 3), "global": True}
            return self._record(request, bot, body, 429, answer, headers)
        if failure is not None and not failure.lose_answer:
            return self._record(request, bot, body, failure.status, failure.body, failure.headers)
        status, answer, headers = await handle(bot, dict(request.match_info), body)
        if failure is not None:  # lose_answer: the work is done, the answer never arrives
            self._record(request, bot, body, status, answer, headers)
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=status)
        return self._record(request, bot, body, status, answer, headers)

    def _record(
        self,
        request: web.Request,
        bot: _Bot | None,
        body: Any,
        status: int,
        answer: Any,
        headers: dict[str, str] | None = None,
    ) -> web.Response:
        with self._lock:
            token = bot.token if bot is not None else None
            self._calls.append(
                Call(token, request.method, request.path.removeprefix(API_PREFIX), body, status, time.monotonic())
            )
            self._lock.notify_all()
        if isinstance(answer, (bytes, str)):
            return web.Response(status=status, body=answer, headers=headers, content_type="text/html")
        return web.json_response(answer, status=status, headers=headers)

    def _visible(self, bot: _Bot, channel_id: str) -> tuple[int, Any] | dict[str, Any]:
        with self._lock:
            channel = self._channels.get(channel_id)
            if channel is None:
                return 404, {"message": "Unknown Channel", "code": 10003}
            if "guild_id" in channel:
                seen = bot.token in self._guild_bots[channel["guild_id"]]
            else:
                seen = self._dm_owner.get(channel_id) == bot.token
            if not seen:
                return 403, {"message": "Missing Access", "code": 50001}
            return channel

    async def _gateway_bot(self, request: web.Request) -> web.StreamResponse:
        async def handle(bot: _Bot, match: dict[str, str], body: Any) -> tuple[int, Any, dict[str, str]]:
            limit = {"total": 1000, "remaining": self.session_starts_left, "reset_after": 0, "max_concurrency": 1}
            return 200, {"url": self.gateway_url, "shards": 1, "session_start_limit": limit}, {}

        return await self._rest(request, "GET /gateway/bot", handle)

    async def _get_me(self, request: web.Request) -> web.StreamResponse:
        async def handle(bot: _Bot, match: dict[str, str], body: Any) -> tuple[int, Any, dict[str, str]]:
            return 200, bot.user, {}

        return await self._rest(request, "GET /users/@me", handle)

    async def _get_channel(self, request: web.Request) -> web.StreamResponse:
        async def handle(bot: _Bot, match: dict[str, str], body: Any) -> tuple[int, Any, dict[str, str]]:
            found = self._visible(bot, match["channel_id"])
            if isinstance(found, tuple):
                return found[0], found[1], {}
            return 200, found, _bucket_headers(_OTHER_BUCKET, 50, 49, 1.0)

        return await self._rest(request, "GET /channels/{channel_id}", handle)

    async def _create_message(self, request: web.Request) -> web.StreamResponse:
        return await self._rest(request, "POST /channels/{channel_id}/messages", self._new_message)

    async def _new_message(self, bot: _Bot, match: dict[str, str], body: Any) -> tuple[int, Any, dict[str, str]]:
        channel_id = match["channel_id"]
        found = self._visible(bot, channel_id)
        if isinstance(found, tuple):
            return found[0], found[1], {}
        files: list[Upload] = []
        if isinstance(body, FormBody):
            body, files = body.payload, body.files
        if not isinstance(body, dict):
            return 400, {"message": "Invalid Form Body", "code": 50035}, {}
        attachments = _attachments(body, files)
        if isinstance(attachments, tuple):
            return attachments[0], attachments[1], {}
        content, nonce = body.get("content"), body.get("nonce")
        if (content is None or content == "") and not files:
            return 400, {"message": "Cannot send an empty message", "code": 50006}, {}
        content = content or ""
        if not isinstance(content, str) or len(content) > 2000:
            errors = {
                "content": {
                    "_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}]
                }
            }
            return 400, {"message": "Invalid Form Body", "code": 50035, "errors": errors}, {}
        if nonce is not None and not (isinstance(nonce, int) or (isinstance(nonce, str) and len(nonce) <= 25)):
            return 400, {"message": "Invalid Form Body", "code": 50035, "errors": {"nonce": {}}}, {}
        with self._lock:
            if body.get("enforce_nonce") and nonce is not None and (bot.token, str(nonce)) in self._nonces:
                return 200, self._nonces[(bot.token, str(nonce))], {}
            now = time.monotonic()
            start, count = self._buckets.get(channel_id, (now, 0))
            if now >= start + self.bucket_window_s:
                start, count = now, 0
            reset_after = start + self.bucket_window_s - now
            if count >= self.bucket_limit:
                headers = _bucket_headers(MESSAGES_BUCKET, self.bucket_limit, 0, reset_after)
                headers |= {"Retry-After": str(math.ceil(reset_after)), "X-RateLimit-Scope": "user"}
                answer = {
                    "message": "You are being rate limited.",
                    "retry_after": round(reset_after, 3),
                    "global": False,
                }
                return 429, answer, headers
            self._buckets[channel_id] = (start, count + 1)
            headers = _bucket_headers(MESSAGES_BUCKET, self.bucket_limit, self.bucket_limit - count - 1, reset_after)
            message: dict[str, Any] = {
                "id": _snowflake(),
                "channel_id": channel_id,
                "author": bot.user,
                "content": content,
                "timestamp": "2026-01-01T00:00:00.000000+00:00",
                "type": 19 if body.get("message_reference") else 0,
                "attachments": attachments,
                "embeds": [],
                "mentions": [],
            }
            if "guild_id" in found:
                message["guild_id"] = found["guild_id"]
            if nonce is not None:
                message["nonce"] = nonce
                self._nonces[(bot.token, str(nonce))] = message
            self._sent.append(Sent(bot.token, channel_id, body, message, tuple(files)))
        await self._deliver(found, "MESSAGE_CREATE", message)  # bots see their own messages, as on Discord
        return 200, message, headers

    async def _start_thread(self, request: web.Request) -> web.StreamResponse:
        return await self._rest(request, "POST /channels/{channel_id}/threads", self._new_thread)

    async def _new_thread(self, bot: _Bot, match: dict[str, str], body: Any) -> tuple[int, Any, dict[str, str]]:
        found = self._visible(bot, match["channel_id"])
        if isinstance(found, tuple):
            return found[0], found[1], {}
        if found["type"] not in (*_TEXT_TYPES, *_FORUM_TYPES):
            return 400, {"message": "Cannot execute action on this channel type", "code": 50024}, {}
        name = body.get("name") if isinstance(body, dict) else None
        if not isinstance(name, str) or not 1 <= len(name) <= 100:
            return 400, {"message": "Invalid Form Body", "code": 50035, "errors": {"name": {}}}, {}
        if found["type"] in _FORUM_TYPES:
            if not isinstance(body.get("message"), dict):
                return 400, {"message": "Invalid Form Body", "code": 50035, "errors": {"message": {}}}, {}
            kind = 11
        else:
            kind = body.get("type", 12)  # Discord's default for a thread without a message is private
        thread = self.add_channel(_snowflake(), found["guild_id"], name, type=kind, parent_id=found["id"])
        thread = thread | {"owner_id": bot.user["id"], "thread_metadata": {"archived": False, "locked": False}}
        await self._deliver(thread, "THREAD_CREATE", thread | {"newly_created": True})
        return 201, thread, _bucket_headers(_OTHER_BUCKET, 50, 49, 1.0)


def _attachments(body: dict[str, Any], files: list[Upload]) -> list[dict[str, Any]] | tuple[int, Any]:
    """The attachment objects of a message's uploaded ``files``, each named by its ``files[n]`` field and by an
    entry of the payload's ``attachments`` with ``id`` n; an error answer for files the payload does not name."""
    named = {str(entry.get("id")): entry for entry in body.get("attachments") or [] if isinstance(entry, dict)}
    made = []
    for upload in files:
        index = upload.field.removeprefix("files[").removesuffix("]")
        entry = named.get(index)
        if not upload.field.startswith("files[") or entry is None:
            return 400, {"message": "Invalid Form Body", "code": 50035, "errors": {"attachments": {}}}
        made.append(
            {
                "id": _snowflake(),
                "filename": entry.get("filename") or upload.filename,
                "size": len(upload.data),
                "content_type": upload.content_type,
                "url": f"https://cdn.discordapp.com/attachments/0/0/{upload.filename}",
            }
        )
    return made


def _bucket_headers(bucket: str, limit: int, remaining: int, reset_after: float) -> dict[str, str]:
    return {
        "X-RateLimit-Limit": str(limit),
        "X-RateLimit-Remaining": str(max(remaining, 0)),
        "X-RateLimit-Reset": f"{time.time() + reset_after:.3f}",
        "X-RateLimit-Reset-After": f"{reset_after:.3f}",
        "X-RateLimit-Bucket": bucket,
    }
