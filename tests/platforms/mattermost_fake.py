"""A local Mattermost for tests: the websocket event API and the REST API v4 on 127.0.0.1, speaking their JSON.

Written from Mattermost's API reference, independently of the adapter. The websocket (``/api/v4/websocket``) takes
the token as ``Authorization: Bearer`` on the upgrade (HTTP 401 otherwise), or an ``authentication_challenge``
action (``{"seq", "action", "data": {"token"}}``, answered ``{"status": "OK", "seq_reply"}``); it then sends the
``hello`` event and every event as ``{"event", "data", "broadcast", "seq"}`` with ``seq`` counting from 0 on each
connection. A post is broadcast as ``posted`` with ``data.post`` a JSON string, ``channel_type``, ``team_id``,
``channel_display_name`` and ``sender_name`` to every connected member of its channel, the author included (a bot
sees its own posts). Like Mattermost, nothing is replayed: a post made while a bot has no connection reaches it only
through REST. Tests can drop a connection without a close frame, skip a ``seq`` (an event the server lost), and push
raw frames.

The REST API answers ``GET /users/me``, ``GET /users/me/teams``, ``GET /users/me/teams/{id}/channels``,
``GET /channels/{id}``, ``GET /channels/{id}/posts?since=`` (``{"order", "posts"}``: posts changed after
``since``), ``POST /posts`` (``channel_id``, ``message`` up to 16,383 characters, ``root_id`` of a root post in the
same channel, ``pending_post_id`` deduplicated for :attr:`MattermostFake.dedupe_s`, ``file_ids`` of files uploaded
to that channel and not yet in a post), ``POST /files`` (``multipart/form-data``: ``channel_id`` and ``files``;
answered 201 with ``file_infos``), ``GET /files/{id}/info`` and ``GET /files/{id}``, all behind the Bearer token,
with Mattermost's JSON errors (``id``, ``message``, ``status_code``) and ``X-Ratelimit-*`` headers; failures (429
with ``Retry-After``, 403, a lost answer) can be scripted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import string
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import WSMsgType, web

from platforms.support.http_host import HttpHost
from tests.platforms.form_data import Upload, is_form, parse_form
from tests.platforms.support import wait_on

__all__ = ["MattermostFake", "Request", "new_id"]

T = TypeVar("T")
_ALPHABET = string.ascii_lowercase + string.digits
MAX_MESSAGE = 16383
_last_ms = [0]
_ms_lock = threading.Lock()


def new_id() -> str:
    """A fresh 26-character Mattermost id."""
    return "".join(secrets.choice(_ALPHABET) for _ in range(26))


def _now_ms() -> int:
    """Strictly increasing milliseconds near the wall clock (posts made in one millisecond stay ordered)."""
    with _ms_lock:
        _last_ms[0] = max(_last_ms[0] + 1, int(time.time() * 1000))
        return _last_ms[0]


@dataclass(frozen=True)
class Request:
    """One REST request: the bot's token (``None``: refused), method, path with query, JSON body, status."""

    token: str | None
    method: str
    path: str
    body: Any
    status: int


@dataclass
class _Failure:
    status: int
    body: Any
    headers: dict[str, str]
    lose_answer: bool
    after: int  # requests of the route answered normally first


@dataclass(eq=False)
class _Socket:
    ws: web.WebSocketResponse
    request: web.Request
    token: str | None = None
    seq: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass
class _File:
    info: dict[str, Any]
    data: bytes


@dataclass(frozen=True)
class Form:
    """The body of a ``multipart/form-data`` request: its text fields and its files."""

    fields: dict[str, str]
    files: list[Upload]


class MattermostFake:
    """The fake server; see the module docstring."""

    def __init__(self, *, dedupe_s: float = 30.0) -> None:
        self.dedupe_s = dedupe_s
        self.refuse_sockets = False  # answer websocket upgrades 503 (the server is down for its clients)
        self.omit_team_ids = False  # posted events without data.team_id (as some servers send them)
        self._lock = threading.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._users: dict[str, dict[str, Any]] = {}
        self._tokens: dict[str, str] = {}  # token -> user id
        self._teams: dict[str, set[str]] = {}  # team -> member user ids
        self._channels: dict[str, dict[str, Any]] = {}
        self._members: defaultdict[str, set[str]] = defaultdict(set)  # channel -> user ids
        self._posts: dict[str, dict[str, Any]] = {}
        self._pending: dict[str, tuple[float, dict[str, Any]]] = {}
        self._files: dict[str, _File] = {}
        self._sockets: list[_Socket] = []
        self._requests: list[Request] = []
        self._failures: defaultdict[str, deque[_Failure]] = defaultdict(deque)
        self._broadcasted: set[str] = set()
        self._skips: defaultdict[str, int] = defaultdict(int)  # token -> seq numbers to skip
        self.connects: defaultdict[str, int] = defaultdict(int)  # token -> sockets signed in
        app = web.Application()
        app.on_startup.append(self._remember_loop)
        app.router.add_get("/api/v4/websocket", self._websocket)
        app.router.add_get("/api/v4/users/me", self._rest("GET /users/me", self._me))
        app.router.add_get("/api/v4/users/me/teams", self._rest("GET /users/me/teams", self._my_teams))
        app.router.add_get(
            "/api/v4/users/me/teams/{team_id}/channels",
            self._rest("GET /users/me/teams/{team_id}/channels", self._my_channels),
        )
        app.router.add_get("/api/v4/channels/{channel_id}", self._rest("GET /channels/{channel_id}", self._channel))
        app.router.add_get(
            "/api/v4/channels/{channel_id}/posts", self._rest("GET /channels/{channel_id}/posts", self._channel_posts)
        )
        app.router.add_post("/api/v4/posts", self._rest("POST /posts", self._create_post))
        app.router.add_post("/api/v4/files", self._rest("POST /files", self._upload_files))
        app.router.add_get("/api/v4/files/{file_id}/info", self._rest("GET /files/{file_id}/info", self._file_info))
        app.router.add_get("/api/v4/files/{file_id}", self._rest("GET /files/{file_id}", self._file))
        self._host = HttpHost(app, name="mattermost-fake")

    # -- lifecycle

    async def _remember_loop(self, app: web.Application) -> None:
        self._loop = asyncio.get_running_loop()

    def __enter__(self) -> MattermostFake:
        self._host.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._loop is not None:
            self._run(self._close_all())
        self._host.stop(5)

    @property
    def url(self) -> str:
        """What ``platforms.mattermost.url`` should be."""
        return self._host.url

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        assert self._loop is not None, "start the fake first"
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)

    # -- setting up

    def add_user(self, username: str, *, token: str | None = None, bot: bool = False) -> str:
        """A user (a bot account when ``bot``) that signs in with ``token``; return its id."""
        user_id = new_id()
        with self._lock:
            self._users[user_id] = {"id": user_id, "username": username, "is_bot": bot}
            if token is not None:
                self._tokens[token] = user_id
        return user_id

    def add_team(self, members: Iterable[str]) -> str:
        team_id = new_id()
        with self._lock:
            self._teams[team_id] = set(members)
        return team_id

    def add_channel(self, kind: str, members: Iterable[str], *, team_id: str = "", name: str = "") -> str:
        """A channel of type ``O``, ``P`` (in ``team_id``), ``D`` or ``G`` with ``members`` (user ids)."""
        channel_id = new_id()
        with self._lock:
            self._channels[channel_id] = {
                "id": channel_id,
                "type": kind,
                "team_id": team_id if kind in ("O", "P") else "",
                "display_name": name,
                "name": name.lower().replace(" ", "-") or channel_id,
                "last_post_at": 0,
            }
            self._members[channel_id].update(members)
        return channel_id

    def add_file(self, data: bytes, name: str, mime_type: str, *, size: int | None = None) -> str:
        """A file uploaded for a post; return its id (``size`` overrides what its info says)."""
        file_id = new_id()
        info = {"id": file_id, "name": name, "size": len(data) if size is None else size, "mime_type": mime_type}
        with self._lock:
            self._files[file_id] = _File(info, data)
        return file_id

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
        """Answer ``times`` requests of ``route`` (``"POST /posts"``), after ``after`` normal ones, with ``status``;
        ``lose_answer`` does the work, then drops the connection unanswered."""
        with self._lock:
            for number in range(times):
                failure = _Failure(status, body, dict(headers or {}), lose_answer, after if number == 0 else 0)
                self._failures[route].append(failure)

    # -- users acting

    def post(
        self,
        channel_id: str,
        user_id: str,
        message: str,
        *,
        root_id: str = "",
        file_ids: Iterable[str] = (),
        with_file_metadata: bool = True,
        **fields: Any,
    ) -> str:
        """``user_id`` posts ``message``; return the post id (broadcast to connected members)."""
        post = self._new_post(channel_id, user_id, message, root_id=root_id, file_ids=list(file_ids))
        post.update(fields)
        if post["file_ids"] and with_file_metadata:
            with self._lock:
                post["metadata"] = {"files": [self._files[f].info for f in post["file_ids"]]}
        self._run(self._broadcast(post))
        return str(post["id"])

    def rebroadcast(self, post_id: str) -> None:
        """Send the ``posted`` event of an existing post again (a replayed event)."""
        with self._lock:
            post = dict(self._posts[post_id])
        self._run(self._broadcast(post))

    def drop(self, token: str) -> None:
        """Cut the bot's connections without a close frame."""
        self._run(self._drop(token))

    def lose_next_event(self, token: str) -> None:
        """The bot's next event is not sent, though it takes its ``seq`` (as if the server had lost it)."""
        with self._lock:
            self._skips[token] += 1

    def send_raw(self, token: str, data: str | bytes) -> None:
        """Send one frame as it is to the bot's connections."""
        self._run(self._send_raw(token, data))

    # -- reading what happened

    def wait_for(self, check: Callable[[], T], timeout: float = 10.0) -> T:
        """Wait until ``check()`` is truthy (re-checked on every change); return it."""
        return wait_on(self._lock, check, timeout, lambda: f"timed out after {timeout} s; requests: {self.requests()}")

    def wait_connected(self, token: str, count: int = 1, timeout: float = 10.0) -> None:
        """Wait until the bot has signed in ``count`` websockets and one is open."""
        self.wait_for(lambda: self.connects[token] >= count and self._open(token), timeout)

    def _open(self, token: str) -> bool:
        with self._lock:
            return any(s.token == token and not s.ws.closed for s in self._sockets)

    def requests(self, route: str | None = None) -> list[Request]:
        """Every REST request whose ``METHOD path`` starts with ``route``, oldest first."""
        with self._lock:
            return [r for r in self._requests if route is None or f"{r.method} {r.path}".startswith(route)]

    def posts_by(self, user_id: str, channel_id: str | None = None) -> list[dict[str, Any]]:
        """The posts ``user_id`` made (in ``channel_id``), oldest first."""
        with self._lock:
            return [
                p
                for p in self._posts.values()
                if p["user_id"] == user_id and (channel_id is None or p["channel_id"] == channel_id)
            ]

    def wait_posts(self, user_id: str, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Wait until ``user_id`` made ``count`` posts; return them."""

        def made() -> list[dict[str, Any]]:
            found = self.posts_by(user_id)
            return found if len(found) >= count else []

        return self.wait_for(made, timeout)

    # -- the websocket

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        if self.refuse_sockets:
            return web.json_response(_error("api.fake.unavailable.app_error", 503), status=503)
        auth = request.headers.get("Authorization", "")
        token: str | None = None
        if auth:
            token = (
                auth.removeprefix("Bearer ").removeprefix("BEARER ").strip() if auth[:7].lower() == "bearer " else ""
            )
            with self._lock:
                if token not in self._tokens:
                    return web.json_response(_error("api.web_socket.connect.upgrade.app_error", 401), status=401)
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        sock = _Socket(ws=ws, request=request)
        with self._lock:
            self._sockets.append(sock)
        if token is not None:
            await self._signed_in(sock, token)
        try:
            async for message in ws:
                if message.type is WSMsgType.TEXT:
                    await self._action(sock, message.data)
        finally:
            with self._lock:
                self._lock.notify_all()
        return ws

    async def _action(self, sock: _Socket, text: str) -> None:
        try:
            action = json.loads(text)
        except ValueError:
            return
        if not isinstance(action, dict):
            return
        reply: dict[str, Any] = {"status": "OK", "seq_reply": action.get("seq")}
        if action.get("action") == "authentication_challenge" and sock.token is None:
            token = (action.get("data") or {}).get("token")
            with self._lock:
                known = token in self._tokens
            if not known:
                reply = {
                    "status": "FAIL",
                    "seq_reply": action.get("seq"),
                    "error": _error("api.web_socket_router.not_authenticated.app_error", 401),
                }
                await self._send(sock, reply)
                return
            await self._send(sock, reply)
            await self._signed_in(sock, str(token))
            return
        await self._send(sock, reply)

    async def _signed_in(self, sock: _Socket, token: str) -> None:
        with self._lock:
            sock.token = token
        await self._event(sock, "hello", {"server_version": "9.11.0.fake", "connection_id": new_id()}, {})
        with self._lock:
            self.connects[token] += 1
            self._lock.notify_all()

    async def _event(self, sock: _Socket, event: str, data: dict[str, Any], broadcast: dict[str, Any]) -> None:
        with self._lock:
            lost = sock.token is not None and self._skips.pop(sock.token, 0) > 0
            seq = sock.seq
            sock.seq += 1
        if lost:
            return
        frame = {"event": event, "data": data, "broadcast": broadcast, "seq": seq}
        await self._send(sock, frame)

    async def _send(self, sock: _Socket, payload: dict[str, Any]) -> None:
        async with sock.lock:
            if not sock.ws.closed:
                with contextlib.suppress(ConnectionError):
                    await sock.ws.send_str(json.dumps(payload))

    async def _broadcast(self, post: dict[str, Any]) -> None:
        with self._lock:
            channel = self._channels[post["channel_id"]]
            members = set(self._members[channel["id"]])
            author = self._users[post["user_id"]]
            targets = [s for s in self._sockets if s.token is not None and self._tokens[s.token] in members]
        data = {
            "channel_display_name": channel["display_name"],
            "channel_name": channel["name"],
            "channel_type": channel["type"],
            "mentions": "[]",
            "post": json.dumps(post),
            "sender_name": "@" + author["username"],
            "set_online": True,
            "team_id": "" if self.omit_team_ids else channel["team_id"],
        }
        broadcast = {"omit_users": None, "user_id": "", "channel_id": channel["id"], "team_id": ""}
        for sock in targets:
            await self._event(sock, "posted", data, broadcast)

    async def _drop(self, token: str) -> None:
        with self._lock:
            live = [s for s in self._sockets if s.token == token and not s.ws.closed]
        for sock in live:
            if sock.request.transport is not None:
                sock.request.transport.abort()

    async def _send_raw(self, token: str, data: str | bytes) -> None:
        with self._lock:
            live = [s for s in self._sockets if s.token == token and not s.ws.closed]
        for sock in live:
            async with sock.lock:
                await (sock.ws.send_bytes(data) if isinstance(data, bytes) else sock.ws.send_str(data))

    async def _close_all(self) -> None:
        with self._lock:
            live = [s for s in self._sockets if not s.ws.closed]
        for sock in live:
            await sock.ws.close(code=1001, message=b"going away")

    # -- the REST API

    Handler = Callable[[str, web.Request, Any], tuple[int, Any, dict[str, str]]]

    def _rest(self, route: str, handle: Handler) -> Callable[[web.Request], Coroutine[Any, Any, web.StreamResponse]]:
        async def serve(request: web.Request) -> web.StreamResponse:
            raw = await request.read()
            auth = request.headers.get("Authorization", "")
            with self._lock:
                user_id = self._tokens.get(auth.removeprefix("Bearer ")) if auth.startswith("Bearer ") else None
            token = auth.removeprefix("Bearer ") if user_id is not None else None
            body: Any = None
            if raw and is_form(request.headers.get("Content-Type", "")):
                try:
                    body = Form(*parse_form(request.headers["Content-Type"], raw))
                except ValueError:
                    return self._record(
                        request, token, None, 400, _error("api.context.invalid_body_param.app_error", 400)
                    )
            elif raw:
                try:
                    body = json.loads(raw)
                except ValueError:
                    return self._record(
                        request, token, None, 400, _error("api.context.invalid_body_param.app_error", 400)
                    )
            if user_id is None:
                return self._record(request, None, body, 401, _error("api.context.session_expired.app_error", 401))
            with self._lock:
                queue = self._failures[route]
                failure = None
                if queue and queue[0].after > 0:
                    queue[0].after -= 1
                elif queue:
                    failure = queue.popleft()
            if failure is not None and not failure.lose_answer:
                return self._record(request, token, body, failure.status, failure.body, failure.headers)
            status, answer, headers = handle(user_id, request, body)
            if status == 201 and route == "POST /posts" and isinstance(answer, dict):
                with self._lock:
                    new = answer["id"] not in self._broadcasted
                    self._broadcasted.add(answer["id"])
                if new:
                    await self._broadcast(answer)
            if failure is not None:
                self._record(request, token, body, status, answer, headers)
                if request.transport is not None:
                    request.transport.abort()
                return web.Response(status=status)
            return self._record(request, token, body, status, answer, headers)

        return serve

    def _record(
        self,
        request: web.Request,
        token: str | None,
        body: Any,
        status: int,
        answer: Any,
        headers: dict[str, str] | None = None,
    ) -> web.StreamResponse:
        with self._lock:
            self._requests.append(Request(token, request.method, request.path_qs.removeprefix("/api/v4"), body, status))
            self._lock.notify_all()
        sent = {"X-Ratelimit-Limit": "10", "X-Ratelimit-Remaining": "9", "X-Ratelimit-Reset": "1"} | dict(headers or {})
        if isinstance(answer, bytes):
            return web.Response(status=status, body=answer, headers=sent)
        if answer is None:
            answer = _error("api.fake.scripted.app_error", status)
        return web.json_response(answer, status=status, headers=sent)

    def _me(self, user_id: str, request: web.Request, body: Any) -> tuple[int, Any, dict[str, str]]:
        with self._lock:
            return 200, dict(self._users[user_id]), {}

    def _my_teams(self, user_id: str, request: web.Request, body: Any) -> tuple[int, Any, dict[str, str]]:
        with self._lock:
            return (
                200,
                [{"id": t, "name": t[:8], "display_name": t[:8]} for t, m in self._teams.items() if user_id in m],
                {},
            )

    def _my_channels(self, user_id: str, request: web.Request, body: Any) -> tuple[int, Any, dict[str, str]]:
        team_id = request.match_info["team_id"]
        with self._lock:
            found = [
                dict(c)
                for c in self._channels.values()
                if user_id in self._members[c["id"]] and c["team_id"] in (team_id, "")
            ]
        return 200, found, {}

    def _visible(self, user_id: str, channel_id: str) -> dict[str, Any] | tuple[int, Any]:
        with self._lock:
            channel = self._channels.get(channel_id)
            if channel is None:
                return 404, _error("app.channel.get.existing.app_error", 404)
            if user_id not in self._members[channel_id]:
                return 403, _error("api.context.permissions.app_error", 403)
            return dict(channel)

    def _channel(self, user_id: str, request: web.Request, body: Any) -> tuple[int, Any, dict[str, str]]:
        found = self._visible(user_id, request.match_info["channel_id"])
        return (found[0], found[1], {}) if isinstance(found, tuple) else (200, found, {})

    def _channel_posts(self, user_id: str, request: web.Request, body: Any) -> tuple[int, Any, dict[str, str]]:
        found = self._visible(user_id, request.match_info["channel_id"])
        if isinstance(found, tuple):
            return found[0], found[1], {}
        try:
            since = int(request.query["since"])
        except (KeyError, ValueError):
            return 400, _error("api.context.invalid_url_param.app_error", 400), {}
        with self._lock:
            posts = [p for p in self._posts.values() if p["channel_id"] == found["id"] and p["update_at"] > since]
        posts.sort(key=lambda p: p["create_at"], reverse=True)
        posts = posts[:1000]
        return 200, {"order": [p["id"] for p in posts], "posts": {p["id"]: p for p in posts}}, {}

    def _create_post(self, user_id: str, request: web.Request, body: Any) -> tuple[int, Any, dict[str, str]]:
        if not isinstance(body, dict) or not isinstance(body.get("channel_id"), str):
            return 400, _error("api.context.invalid_body_param.app_error", 400), {}
        found = self._visible(user_id, body["channel_id"])
        if isinstance(found, tuple):
            return found[0], found[1], {}
        message, root_id, pending = body.get("message", ""), body.get("root_id", ""), body.get("pending_post_id", "")
        file_ids = body.get("file_ids") or []
        if not isinstance(file_ids, list) or len(file_ids) > 10:
            return 400, _error("model.post.is_valid.file_ids.app_error", 400), {}
        if not isinstance(message, str) or not (message or file_ids) or len(message) > MAX_MESSAGE:
            return 400, _error("model.post.is_valid.msg.app_error", 400), {}
        with self._lock:
            root = self._posts.get(root_id) if root_id else None
            if root_id and (root is None or root["channel_id"] != found["id"] or root["root_id"]):
                return 400, _error("api.post.create_post.root_id.app_error", 400), {}
            if pending:
                seen = self._pending.get(pending)
                if seen is not None and time.monotonic() - seen[0] < self.dedupe_s:
                    return 201, seen[1], {}
            files = [self._files.get(str(file_id)) for file_id in file_ids]
            for file in files:  # Mattermost drops what it cannot attach; the fake refuses it, to be seen
                if file is None or file.info.get("channel_id") != found["id"] or file.info.get("post_id"):
                    return 400, _error("api.post.create_post.attach_files.app_error", 400), {}
        post = self._new_post(found["id"], user_id, message, root_id=root_id, file_ids=[str(f) for f in file_ids])
        if files:
            with self._lock:
                for file in files:
                    assert file is not None
                    file.info["post_id"] = post["id"]
                post["metadata"] = {"files": [dict(file.info) for file in files if file is not None]}
        if pending:
            post["pending_post_id"] = pending
            with self._lock:
                self._pending[pending] = (time.monotonic(), post)
        return 201, post, {}

    def _upload_files(self, user_id: str, request: web.Request, body: Any) -> tuple[int, Any, dict[str, str]]:
        if not isinstance(body, Form) or not body.files:
            return 400, _error("api.file.upload_file.incorrect_number_of_files.app_error", 400), {}
        found = self._visible(user_id, body.fields.get("channel_id", ""))
        if isinstance(found, tuple):
            return found[0], found[1], {}
        infos = []
        for upload in body.files:
            if upload.field != "files":
                return 400, _error("api.file.upload_file.incorrect_number_of_files.app_error", 400), {}
            file_id = self.add_file(upload.data, upload.filename, upload.content_type)
            with self._lock:
                info = self._files[file_id].info
                info.update({"channel_id": found["id"], "user_id": user_id, "post_id": ""})
                infos.append(dict(info))
        return 201, {"file_infos": infos, "client_ids": []}, {}

    def uploaded(self, file_id: str) -> tuple[dict[str, Any], bytes]:
        """The info and the bytes of a file."""
        with self._lock:
            file = self._files[file_id]
            return dict(file.info), file.data

    def _file_info(self, user_id: str, request: web.Request, body: Any) -> tuple[int, Any, dict[str, str]]:
        with self._lock:
            found = self._files.get(request.match_info["file_id"])
        if found is None:
            return 404, _error("app.file_info.get.app_error", 404), {}
        return 200, found.info, {}

    def _file(self, user_id: str, request: web.Request, body: Any) -> tuple[int, Any, dict[str, str]]:
        with self._lock:
            found = self._files.get(request.match_info["file_id"])
        if found is None:
            return 404, _error("app.file_info.get.app_error", 404), {}
        return 200, found.data, {"Content-Type": found.info["mime_type"]}

    def _new_post(
        self, channel_id: str, user_id: str, message: str, *, root_id: str = "", file_ids: list[str] | None = None
    ) -> dict[str, Any]:
        now = _now_ms()
        with self._lock:
            user = self._users[user_id]
            post: dict[str, Any] = {
                "id": new_id(),
                "create_at": now,
                "update_at": now,
                "edit_at": 0,
                "delete_at": 0,
                "user_id": user_id,
                "channel_id": channel_id,
                "root_id": root_id,
                "original_id": "",
                "message": message,
                "type": "",
                "props": {"from_bot": "true"} if user["is_bot"] else {},
                "hashtags": "",
                "file_ids": file_ids or [],
                "pending_post_id": "",
                "metadata": {},
            }
            self._posts[post["id"]] = post
            self._channels[channel_id]["last_post_at"] = now
            self._lock.notify_all()
        return post


def _error(error_id: str, status: int) -> dict[str, Any]:
    return {
        "id": error_id,
        "message": f"fake Mattermost: {error_id}",
        "detailed_error": "",
        "request_id": new_id(),
        "status_code": status,
    }
