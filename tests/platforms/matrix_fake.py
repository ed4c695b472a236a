"""A local Matrix homeserver for tests: the client-server API on 127.0.0.1, speaking the homeserver's JSON.

One stream of positions orders everything (room events, memberships, invites, account data); a ``/sync`` since
``s<N>`` answers what happened after N for the token's user, as a homeserver does: joined rooms with their
timelines (``limited`` with a ``prev_batch`` when more events arrived than the filter's ``timeline.limit``),
``summary.m.joined_member_count`` when membership changed, invites with their stripped state (``is_direct``),
left rooms and ``m.direct`` account data. A sync with nothing to answer waits up to its ``timeout``.
``/rooms/{roomId}/messages?dir=b`` pages backwards from a ``prev_batch``; ``PUT .../send/{type}/{txnId}`` makes an
event and remembers the transaction id per access token (a repeat answers the same event id);
``POST /join/{roomId}`` needs an invite. ``GET /_matrix/client/v1/media/download/{serverName}/{mediaId}`` (the
authenticated media API) serves what :meth:`MatrixFake.upload` or a client's ``POST /_matrix/media/v3/upload``
(raw bytes, ``Content-Type``, ``?filename=``; answered with its ``content_uri``) stored, with its ``Content-Type`` and
``Content-Length``, to any valid token; an unknown file is ``M_NOT_FOUND``. Errors are ``{"errcode", "error"}``:
``M_UNKNOWN_TOKEN``, ``M_MISSING_TOKEN``, ``M_FORBIDDEN``, ``M_LIMIT_EXCEEDED`` with ``retry_after_ms`` and
``Retry-After``. Tests add users and rooms, post messages as users, upload files, queue raw events, script failures
and read what happened::

    with MatrixFake() as hs:
        hs.add_user(TOKEN, "@bot:example.org")
        hs.create_room("!dm:example.org", "@bot:example.org", "@alice:example.org")
        hs.post("!dm:example.org", "@alice:example.org", "hi")
        hs.wait_for(lambda: hs.sent())
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import unquote

import msgspec
from aiohttp import web

from platforms.support.http_host import HttpHost
from tests.platforms.support import wait_on

__all__ = ["Call", "MatrixFake"]

T = TypeVar("T")

_PREFIX = "/_matrix/client/v3"
_MEDIA = "/_matrix/client/v1/media"
_UPLOAD = "/_matrix/media/v3/upload"
_DEFAULT_TIMELINE_LIMIT = 10


@dataclass(frozen=True)
class Call:
    """One request: the access token, the endpoint, the raw path under ``/_matrix/client/v3``, query and JSON
    body, the status answered (0: the connection was cut), when it arrived (``began``) and was answered (``at``)."""

    token: str | None
    endpoint: str
    path: str
    query: dict[str, str]
    body: Any
    status: int
    at: float
    began: float = 0.0


@dataclass
class _Failure:
    status: int
    errcode: str
    error: str
    retry_after_ms: int | None = None
    raw_body: bytes | None = None
    after: int = 0  # calls to let through first
    drop: bool = False  # do the work, then cut the connection instead of answering


@dataclass
class _Event:
    pos: int
    room_id: str
    raw: bytes  # the event's JSON as sent to clients
    event_id: str | None = None
    type: str | None = None
    sender: str | None = None
    content: dict[str, Any] | None = None


@dataclass
class _Room:
    room_id: str
    name: str | None = None
    members: dict[str, str] = field(default_factory=dict)  # user -> join | invite | leave
    changed: dict[str, int] = field(default_factory=dict)  # user -> stream position of their last change
    invites: dict[str, tuple[str, bool, int]] = field(default_factory=dict)  # user -> (inviter, is_direct, pos)
    members_changed_at: int = 0


@dataclass
class _User:
    user_id: str
    display_name: str | None = None
    direct: dict[str, list[str]] | None = None
    direct_at: int = 0
    polls_waiting: int = 0


class MatrixFake:
    """The fake homeserver; see the module docstring."""

    def __init__(self, server_name: str = "example.org") -> None:
        self.server_name = server_name
        self._lock = threading.Condition()
        self._pos = 0
        self._event_numbers = itertools.count(1)
        self._tokens: dict[str, str] = {}  # access token -> user id
        self._users: dict[str, _User] = {}
        self._rooms: dict[str, _Room] = {}
        self._events: list[_Event] = []
        self._txns: dict[tuple[str, str], str] = {}  # (access token, txn id) -> event id
        self._failures: defaultdict[str, deque[_Failure]] = defaultdict(deque)
        self._calls: list[Call] = []
        self._media: dict[tuple[str, str], tuple[bytes, str, bool]] = {}  # (server, id) -> (bytes, type, cut)
        self._media_ids = itertools.count(1)
        self.uploads: list[tuple[str | None, str, bytes, str]] = []  # (filename, Content-Type, bytes, mxc URI)
        self._closing = False
        self.send_summaries = True  # False: leave summary.m.joined_member_count out, as some servers do
        app = web.Application(client_max_size=4 * 1024 * 1024)
        app.router.add_route("*", _PREFIX + "/{tail:.*}", self._handle)
        app.router.add_route("*", _MEDIA + "/{tail:.*}", self._handle)
        app.router.add_route("*", _UPLOAD, self._handle)
        self._host = HttpHost(app, name="matrix-fake")

    # -- lifecycle

    def start(self) -> MatrixFake:
        self._host.start()
        return self

    def stop(self) -> None:
        """End waiting long polls at once, then stop the server."""
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        self._host.stop(5)

    def __enter__(self) -> MatrixFake:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """What ``platforms.matrix.accounts.<name>.homeserver`` should be."""
        return self._host.url

    # -- setting up

    def add_user(self, token: str, user_id: str, display_name: str | None = None) -> None:
        """A user with a logged-in device whose access token is ``token``."""
        with self._lock:
            self._tokens[token] = user_id
            self._users.setdefault(user_id, _User(user_id, display_name))

    def revoke(self, token: str) -> None:
        """Log the device out: its token is answered with ``M_UNKNOWN_TOKEN`` from now on."""
        with self._lock:
            self._tokens.pop(token, None)

    def create_room(self, room_id: str, *members: str, name: str | None = None) -> str:
        """A room with ``members`` joined (each join is an ``m.room.member`` event) and an optional name."""
        with self._lock:
            self._rooms[room_id] = _Room(room_id)
            creator = members[0] if members else f"@admin:{self.server_name}"
            if name is not None:
                self._rooms[room_id].name = name
                self._append(room_id, "m.room.name", creator, {"name": name}, state_key="")
            for member in members:
                self._membership(room_id, member, "join")
            return room_id

    def join(self, room_id: str, user_id: str) -> None:
        """``user_id`` joins (without an invite: tests decide who is in a room)."""
        with self._lock:
            self._membership(room_id, user_id, "join")

    def leave(self, room_id: str, user_id: str) -> None:
        with self._lock:
            self._membership(room_id, user_id, "leave")

    def invite(self, room_id: str, user_id: str, *, sender: str, is_direct: bool = False) -> None:
        """``sender`` invites ``user_id`` (``is_direct`` as a client does for a DM)."""
        with self._lock:
            room = self._rooms[room_id]
            content: dict[str, Any] = {"membership": "invite"}
            if is_direct:
                content["is_direct"] = True
            event = self._append(room_id, "m.room.member", sender, content, state_key=user_id)
            room.members[user_id] = "invite"
            room.changed[user_id] = event.pos
            room.invites[user_id] = (sender, is_direct, event.pos)

    def set_direct(self, user_id: str, direct: dict[str, list[str]]) -> None:
        """Set ``user_id``'s ``m.direct`` account data (``{other user: [room ids]}``)."""
        with self._lock:
            self._pos += 1
            user = self._users.setdefault(user_id, _User(user_id))
            user.direct, user.direct_at = direct, self._pos
            self._lock.notify_all()

    def post(
        self,
        room_id: str,
        sender: str,
        body: str,
        *,
        msgtype: str = "m.text",
        thread: str | None = None,
        relates_to: dict[str, Any] | None = None,
        event_type: str = "m.room.message",
        **content: Any,
    ) -> str:
        """``sender`` posts a message (in ``thread``, the root's event id, or with another ``m.relates_to``);
        return its event id. ``content`` adds fields (``filename``, ``url``)."""
        full: dict[str, Any] = {"msgtype": msgtype, "body": body, **content}
        if thread is not None:
            full["m.relates_to"] = {"rel_type": "m.thread", "event_id": thread, "is_falling_back": True}
        elif relates_to is not None:
            full["m.relates_to"] = relates_to
        with self._lock:
            event = self._append(room_id, event_type, sender, full)
            assert event.event_id is not None
            return event.event_id

    def upload(
        self,
        data: bytes,
        content_type: str = "application/octet-stream",
        *,
        server: str | None = None,
        cut: bool = False,
    ) -> str:
        """Store a file in the media repository (of ``server``, by default this one); return its ``mxc://`` URI.

        A ``cut`` file is served broken: its whole ``Content-Length``, half its bytes, then the connection closes.
        """
        with self._lock:
            key = (server or self.server_name, f"media{next(self._media_ids)}")
            self._media[key] = (data, content_type, cut)
        return f"mxc://{key[0]}/{key[1]}"

    def push_raw(self, room_id: str, raw: bytes) -> None:
        """Put ``raw`` (any bytes) in the room's timeline as it is: a hostile or broken event."""
        with self._lock:
            self._pos += 1
            self._events.append(_Event(pos=self._pos, room_id=room_id, raw=raw))
            self._lock.notify_all()

    def repeat(self, event_id: str) -> None:
        """Deliver event ``event_id`` again (the same event under a new stream position), as after a server hiccup."""
        with self._lock:
            original = next(e for e in self._events if e.event_id == event_id)
            self._pos += 1
            self._events.append(
                _Event(**{**original.__dict__, "pos": self._pos})  # the same JSON, the same id
            )
            self._lock.notify_all()

    def fail(
        self,
        endpoint: str,
        status: int,
        errcode: str = "M_UNKNOWN",
        error: str = "Internal server error",
        *,
        retry_after_ms: int | None = None,
        times: int = 1,
        after: int = 0,
        raw_body: bytes | None = None,
        drop: bool = False,
    ) -> None:
        """Answer ``times`` calls of ``endpoint`` (sync, send, join, messages, whoami, joined_members, upload), after
        letting ``after`` through, with an error; ``raw_body`` replaces the JSON; ``drop`` does the work (a send
        makes its event) and cuts the connection without answering."""
        with self._lock:
            for number in range(times):
                self._failures[endpoint].append(
                    _Failure(status, errcode, error, retry_after_ms, raw_body, after if number == 0 else 0, drop)
                )

    def heal(self) -> None:
        """Forget the failures :meth:`fail` scripted and not yet answered."""
        with self._lock:
            self._failures.clear()

    # -- reading what happened

    def calls(self, endpoint: str | None = None, token: str | None = None) -> list[Call]:
        """Every request so far (to ``endpoint``, with ``token``), oldest first."""
        with self._lock:
            return [
                c
                for c in self._calls
                if (endpoint is None or c.endpoint == endpoint) and (token is None or c.token == token)
            ]

    def sent(self, sender: str | None = None, room_id: str | None = None) -> list[dict[str, Any]]:
        """The contents of the ``m.room.message`` events made by ``PUT .../send`` (by ``sender``, in ``room_id``)."""
        with self._lock:
            made = {e.event_id: e for e in self._events if e.event_id is not None}
            by_txn = set(self._txns.values())
        result = []
        for event_id in sorted(by_txn, key=lambda e: made[e].pos):
            event = made[event_id]
            if (sender is None or event.sender == sender) and (room_id is None or event.room_id == room_id):
                result.append({"room_id": event.room_id, "event_id": event_id, **(event.content or {})})
        return result

    def texts(self, sender: str | None = None) -> list[str]:
        """The bodies of what ``sender`` sent, in order."""
        return [str(content["body"]) for content in self.sent(sender)]

    def members(self, room_id: str) -> dict[str, str]:
        with self._lock:
            return dict(self._rooms[room_id].members)

    def position(self) -> str:
        """The current ``next_batch`` token."""
        with self._lock:
            return f"s{self._pos}"

    def polling(self, token: str) -> bool:
        """Whether an incremental sync (one with ``since``) of the token's user is waiting right now."""
        with self._lock:
            user = self._users.get(self._tokens.get(token, ""))
            return user is not None and user.polls_waiting > 0

    def wait_for(self, check: Callable[[], T], timeout: float = 10.0) -> T:
        """Wait until ``check()`` is truthy (it is re-checked on every request and change); return it."""
        return wait_on(
            self._lock,
            check,
            timeout,
            lambda: f"timed out after {timeout} s; calls: {[c.endpoint for c in self._calls]}",
        )

    # -- the stream (callers hold the lock)

    def _append(
        self, room_id: str, event_type: str, sender: str, content: dict[str, Any], *, state_key: str | None = None
    ) -> _Event:
        self._pos += 1
        event_id = f"$e{next(self._event_numbers)}:{self.server_name}"
        body: dict[str, Any] = {
            "event_id": event_id,
            "type": event_type,
            "sender": sender,
            "origin_server_ts": int(time.time() * 1000),
            "content": content,
            "unsigned": {"age": 0},
        }
        if state_key is not None:
            body["state_key"] = state_key
        event = _Event(self._pos, room_id, json.dumps(body).encode(), event_id, event_type, sender, content)
        self._events.append(event)
        self._lock.notify_all()
        return event

    def _membership(self, room_id: str, user_id: str, membership: str) -> None:
        room = self._rooms[room_id]
        content: dict[str, Any] = {"membership": membership}
        user = self._users.get(user_id)
        if membership == "join" and user is not None and user.display_name:
            content["displayname"] = user.display_name
        event = self._append(room_id, "m.room.member", user_id, content, state_key=user_id)
        room.members[user_id] = membership
        room.changed[user_id] = event.pos
        room.members_changed_at = event.pos
        room.invites.pop(user_id, None)

    def _joined(self, room: _Room) -> list[str]:
        return [user for user, membership in room.members.items() if membership == "join"]

    # -- the API

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        began = time.monotonic()
        path = request.raw_path.split("?")[0]
        if path == _UPLOAD:
            tail = "/v3-upload"
        elif path.startswith(_PREFIX + "/"):
            tail = path.removeprefix(_PREFIX)
        else:
            tail = "/v1-media" + path.removeprefix(_MEDIA)
        endpoint, args = _route(request.method, tail)
        query = dict(request.query)
        header = request.headers.get("Authorization", "")
        token = header.removeprefix("Bearer ") if header.startswith("Bearer ") else None
        body: Any = None

        def record(response: web.StreamResponse, status: int | None = None) -> web.StreamResponse:
            answered = response.status if status is None else status
            with self._lock:
                self._calls.append(Call(token, endpoint, tail, query, body, answered, time.monotonic(), began))
                self._lock.notify_all()
            return response

        raw = await request.read()
        if raw and endpoint != "upload":
            try:
                body = json.loads(raw)
            except ValueError:
                return record(_error(400, "M_NOT_JSON", "Content not JSON."))
        with self._lock:
            user_id = self._tokens.get(token or "")
            scripted = None
            if user_id is not None and self._failures[endpoint]:
                if self._failures[endpoint][0].after > 0:
                    self._failures[endpoint][0].after -= 1
                else:
                    scripted = self._failures[endpoint].popleft()
        if token is None:
            return record(_error(401, "M_MISSING_TOKEN", "Missing access token."))
        if user_id is None:
            return record(_error(401, "M_UNKNOWN_TOKEN", "Invalid access token passed.", soft_logout=False))
        if scripted is not None and not scripted.drop:
            if scripted.raw_body is not None:
                failed = web.Response(status=scripted.status, body=scripted.raw_body, content_type="application/json")
            else:
                extra = {"retry_after_ms": scripted.retry_after_ms} if scripted.retry_after_ms is not None else {}
                failed = _error(scripted.status, scripted.errcode, scripted.error, **extra)
                if scripted.retry_after_ms is not None:
                    failed.headers["Retry-After"] = str(math.ceil(scripted.retry_after_ms / 1000))
            return record(failed)
        handler = {
            "sync": self._sync,
            "send": self._send,
            "join": self._join_call,
            "messages": self._messages,
            "whoami": self._whoami,
            "joined_members": self._joined_members,
        }.get(endpoint)
        answer: web.StreamResponse
        if endpoint == "download":  # streamed: it needs the request
            answer = await self._download(request, args)
        elif endpoint == "upload":  # raw bytes, not JSON
            answer = self._upload(request, raw)
        elif handler is None:
            return record(_error(404, "M_UNRECOGNIZED", "Unrecognized request"))
        else:
            answer = await handler(user_id, token, args, query, body)
        if scripted is not None:  # drop: the work is done, the answer is lost
            if request.transport is not None:
                request.transport.close()
            return record(web.Response(status=200), status=0)
        return record(answer)

    async def _whoami(
        self, user_id: str, token: str, args: list[str], query: dict[str, str], body: Any
    ) -> web.Response:
        return web.json_response({"user_id": user_id, "device_id": "HERMESDEV"})

    async def _download(self, request: web.Request, args: list[str]) -> web.StreamResponse:
        with self._lock:
            found = self._media.get((args[0], args[1]))
        if found is None:
            return _error(404, "M_NOT_FOUND", "Not found")
        data, content_type, cut = found
        if not cut:
            return web.Response(body=data, content_type=content_type)
        response = web.StreamResponse(headers={"Content-Type": content_type, "Content-Length": str(len(data))})
        await response.prepare(request)
        await response.write(data[: len(data) // 2])
        if request.transport is not None:
            request.transport.close()
        return response

    def _upload(self, request: web.Request, data: bytes) -> web.Response:
        content_type = request.headers.get("Content-Type", "application/octet-stream")
        mxc = self.upload(data, content_type)
        with self._lock:
            self.uploads.append((request.query.get("filename"), content_type, data, mxc))
        return web.json_response({"content_uri": mxc})

    async def _joined_members(
        self, user_id: str, token: str, args: list[str], query: dict[str, str], body: Any
    ) -> web.Response:
        with self._lock:
            room = self._rooms.get(args[0])
            if room is None or room.members.get(user_id) != "join":
                return _error(403, "M_FORBIDDEN", "You aren't a member of the room.")
            joined = {
                user: {"display_name": self._users[user].display_name if user in self._users else None}
                for user in self._joined(room)
            }
        return web.json_response({"joined": joined})

    async def _join_call(
        self, user_id: str, token: str, args: list[str], query: dict[str, str], body: Any
    ) -> web.Response:
        room_id = args[0]
        with self._lock:
            room = self._rooms.get(room_id)
            if room is None or room.members.get(user_id) not in ("invite", "join"):
                return _error(403, "M_FORBIDDEN", "You are not invited to this room.")
            if room.members[user_id] == "invite":
                self._membership(room_id, user_id, "join")
        return web.json_response({"room_id": room_id})

    async def _send(self, user_id: str, token: str, args: list[str], query: dict[str, str], body: Any) -> web.Response:
        room_id, event_type, txn_id = args
        if not isinstance(body, dict):
            return _error(400, "M_BAD_JSON", "Content must be a JSON object.")
        if len(json.dumps(body).encode()) > 65_536:
            return _error(413, "M_TOO_LARGE", "event too large")
        with self._lock:
            known = self._txns.get((token, txn_id))
            if known is not None:
                return web.json_response({"event_id": known})
            room = self._rooms.get(room_id)
            if room is None or room.members.get(user_id) != "join":
                return _error(403, "M_FORBIDDEN", f"User {user_id} not in room {room_id}")
            event = self._append(room_id, event_type, user_id, body)
            assert event.event_id is not None
            self._txns[(token, txn_id)] = event.event_id
            return web.json_response({"event_id": event.event_id})

    async def _messages(
        self, user_id: str, token: str, args: list[str], query: dict[str, str], body: Any
    ) -> web.Response:
        room_id = args[0]
        if query.get("dir") != "b":
            return _error(400, "M_INVALID_PARAM", "only dir=b is supported by this fake")
        start = _position(query.get("from", ""))
        if start is None:
            return _error(400, "M_INVALID_PARAM", "Invalid from parameter")
        limit = int(query.get("limit", "10"))
        types = _filter_types(query.get("filter"), ("types",))
        with self._lock:
            room = self._rooms.get(room_id)
            if room is None or room.members.get(user_id) != "join":
                return _error(403, "M_FORBIDDEN", "User not in room")
            older = [e for e in self._events if e.room_id == room_id and e.pos <= start and _wanted(e, types)]
        page = older[::-1][:limit]
        answer: dict[str, Any] = {"chunk": [msgspec.Raw(e.raw) for e in page], "start": f"t{start}"}
        if len(older) > len(page):
            answer["end"] = f"t{page[-1].pos - 1}"
        return web.Response(body=msgspec.json.encode(answer), content_type="application/json")

    async def _sync(self, user_id: str, token: str, args: list[str], query: dict[str, str], body: Any) -> web.Response:
        since: int | None = None
        if "since" in query:
            since = _position(query["since"])
            if since is None:
                return _error(400, "M_INVALID_PARAM", "Invalid since token")
        timeout_ms = int(query.get("timeout", "0"))
        limit_types = query.get("filter")
        limit = _filter_limit(limit_types)
        types = _filter_types(limit_types, ("room", "timeline", "types"))
        deadline = time.monotonic() + timeout_ms / 1000
        with self._lock:
            user = self._users[user_id]
            if since is not None:
                user.polls_waiting += 1
                self._lock.notify_all()
        try:
            while True:
                with self._lock:
                    answer, empty = self._sync_answer(user, since, limit, types)
                    if not empty or self._closing or time.monotonic() >= deadline:
                        return web.Response(body=msgspec.json.encode(answer), content_type="application/json")
                await asyncio.sleep(0.005)
        finally:
            if since is not None:
                with self._lock:
                    user.polls_waiting -= 1

    def _sync_answer(
        self, user: _User, since: int | None, limit: int, types: list[str] | None
    ) -> tuple[dict[str, Any], bool]:
        after = since or 0
        now = self._pos
        join: dict[str, Any] = {}
        invite: dict[str, Any] = {}
        leave: dict[str, Any] = {}
        for room in self._rooms.values():
            membership = room.members.get(user.user_id)
            changed = room.changed.get(user.user_id, 0)
            if membership == "join":
                entry = self._joined_entry(room, user, since, limit, types)
                if entry is not None:
                    join[room.room_id] = entry
            elif membership == "invite" and (since is None or changed > after):
                inviter, is_direct, _ = room.invites[user.user_id]
                member: dict[str, Any] = {"membership": "invite"}
                if is_direct:
                    member["is_direct"] = True
                state = [{"type": "m.room.member", "state_key": user.user_id, "sender": inviter, "content": member}]
                if room.name is not None:
                    state.append(
                        {"type": "m.room.name", "state_key": "", "sender": inviter, "content": {"name": room.name}}
                    )
                invite[room.room_id] = {"invite_state": {"events": state}}
            elif membership == "leave" and since is not None and changed > after:
                leave[room.room_id] = {"timeline": {"events": []}}
        answer: dict[str, Any] = {"next_batch": f"s{now}", "rooms": {"join": join, "invite": invite, "leave": leave}}
        if user.direct is not None and (since is None or user.direct_at > after):
            answer["account_data"] = {"events": [{"type": "m.direct", "content": user.direct}]}
        empty = not (join or invite or leave or "account_data" in answer)
        return answer, empty

    def _joined_entry(
        self, room: _Room, user: _User, since: int | None, limit: int, types: list[str] | None
    ) -> dict[str, Any] | None:
        after = since or 0
        newly_joined = since is None or room.changed.get(user.user_id, 0) > after
        if newly_joined:  # a room just joined comes with its recent history, as far as the limit goes
            after = 0
        events = [e for e in self._events if e.room_id == room.room_id and e.pos > after and _wanted(e, types)]
        if not events and not newly_joined and room.members_changed_at <= (since or 0):
            return None
        shown = events[-limit:]
        first_pos = shown[0].pos if shown else self._pos + 1
        entry: dict[str, Any] = {
            "timeline": {
                "events": [msgspec.Raw(e.raw) for e in shown],
                "limited": len(events) > len(shown),
                "prev_batch": f"t{first_pos - 1}",
            },
            "state": {"events": self._state_for(room, shown, full=newly_joined)},
        }
        if self.send_summaries and (newly_joined or room.members_changed_at > (since or 0)):
            entry["summary"] = {"m.joined_member_count": len(self._joined(room))}
        return entry

    def _state_for(self, room: _Room, shown: list[_Event], *, full: bool) -> list[dict[str, Any]]:
        """Lazy-loaded members: the senders of the timeline events (and the room name on a full state)."""
        state: list[dict[str, Any]] = []
        if full and room.name is not None:
            state.append({"type": "m.room.name", "state_key": "", "sender": "@admin", "content": {"name": room.name}})
        for sender in dict.fromkeys(e.sender for e in shown if e.sender is not None):
            profile = self._users.get(sender)
            content: dict[str, Any] = {"membership": room.members.get(sender, "leave")}
            if profile is not None and profile.display_name:
                content["displayname"] = profile.display_name
            state.append(
                {
                    "event_id": f"$state-{sender}",
                    "type": "m.room.member",
                    "state_key": sender,
                    "sender": sender,
                    "origin_server_ts": 0,
                    "content": content,
                }
            )
        return state


def _route(method: str, tail: str) -> tuple[str, list[str]]:
    """The endpoint name of a request path and its decoded path arguments; ``tail`` is the path under
    ``/_matrix/client/v3``, or under ``/_matrix/client/v1/media`` prefixed with ``/v1-media``."""
    parts = [unquote(part) for part in tail.strip("/").split("/")]
    if method == "GET" and parts == ["sync"]:
        return "sync", []
    if method == "GET" and parts == ["account", "whoami"]:
        return "whoami", []
    if method == "POST" and parts == ["v3-upload"]:
        return "upload", []
    if method == "GET" and len(parts) == 4 and parts[:2] == ["v1-media", "download"]:
        return "download", parts[2:]
    if method == "POST" and len(parts) == 2 and parts[0] == "join":
        return "join", [parts[1]]
    if len(parts) == 3 and parts[0] == "rooms" and method == "GET" and parts[2] in ("messages", "joined_members"):
        return parts[2], [parts[1]]
    if len(parts) == 5 and parts[0] == "rooms" and parts[2] == "send" and method == "PUT":
        return "send", [parts[1], parts[3], parts[4]]
    return "unknown", parts


def _position(token: str) -> int | None:
    if len(token) > 1 and token[0] in "st" and token[1:].lstrip("-").isdigit():
        return int(token[1:])
    return None


def _filter_limit(text: str | None) -> int:
    try:
        limit = json.loads(text or "{}")["room"]["timeline"]["limit"]
    except (ValueError, KeyError, TypeError):
        return _DEFAULT_TIMELINE_LIMIT
    return int(limit)


def _filter_types(text: str | None, path: tuple[str, ...]) -> list[str] | None:
    try:
        found: Any = json.loads(text or "{}")
        for key in path:
            found = found[key]
    except (ValueError, KeyError, TypeError):
        return None
    return [str(t) for t in found]


def _wanted(event: _Event, types: list[str] | None) -> bool:
    return types is None or event.type is None or event.type in types  # raw events always pass


def _error(status: int, errcode: str, error: str, **extra: Any) -> web.Response:
    return web.json_response({"errcode": errcode, "error": error, **extra}, status=status)
