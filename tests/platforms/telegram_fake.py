"""A local Telegram Bot API for tests: ``{base}/bot{token}/{method}`` on 127.0.0.1, speaking Telegram's JSON.

It keeps a queue of updates per bot with Telegram's confirmation rule (``getUpdates`` with ``offset`` forgets every
update below it; a newer poll ends an older one with 409), long polls that wait for updates, the webhook switch
(``setWebhook``/``deleteWebhook``; ``getUpdates`` is refused while one is set), ``sendMessage`` (4096 UTF-16
units, forum topics, flood control answering 429 with ``parameters.retry_after``, groups upgraded to supergroups
answering with ``migrate_to_chat_id``), ``createForumTopic``, and files: ``getFile`` for a file added with
:meth:`TelegramFake.add_file` and its download from ``{base}/file/bot{token}/{file_path}`` (recorded as method
``file``). Tests queue updates, script failures and read what was called::

    with TelegramFake() as fake:
        fake.add_bot(TOKEN)
        fake.push(TOKEN, message(private_chat(alice), alice, "hi"))
        fake.wait_for(lambda: fake.sent(TOKEN))
"""

from __future__ import annotations

import asyncio
import http.client
import itertools
import json
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

from aiohttp import web

from platforms.support.http_host import HttpHost
from tests.platforms.support import wait_on

__all__ = [
    "Call",
    "TelegramFake",
    "group_chat",
    "message",
    "post_update",
    "private_chat",
    "user",
]

T = TypeVar("T")

_TOPIC_ICON = 0x6FB9F0
_TERMINATED = "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"
_WEBHOOK_ACTIVE = "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete it first"


# -- Telegram objects --------------------------------------------------------------------------------------------


def user(user_id: int, first_name: str = "Ann", *, username: str | None = None, is_bot: bool = False) -> dict[str, Any]:
    """A ``User``."""
    found: dict[str, Any] = {"id": user_id, "is_bot": is_bot, "first_name": first_name}
    if username is not None:
        found["username"] = username
    return found


def private_chat(person: Mapping[str, Any]) -> dict[str, Any]:
    """The private ``Chat`` of a user with the bot (its id is the user's)."""
    chat: dict[str, Any] = {"id": person["id"], "type": "private", "first_name": person["first_name"]}
    if "username" in person:
        chat["username"] = person["username"]
    return chat


def group_chat(chat_id: int, title: str, *, kind: str = "supergroup", forum: bool = False) -> dict[str, Any]:
    """A group, supergroup (optionally a forum) or channel ``Chat``."""
    chat: dict[str, Any] = {"id": chat_id, "type": kind, "title": title}
    if forum:
        chat["is_forum"] = True
    return chat


def message(
    chat: Mapping[str, Any],
    sender: Mapping[str, Any] | None,
    text: str | None = None,
    *,
    message_id: int | None = None,
    topic: int | None = None,
    kind: str = "message",
    **fields: Any,
) -> dict[str, Any]:
    """An ``Update`` (without its ``update_id``) holding one message; ``topic`` puts it in a forum topic.

    ``message_id`` is filled in by :meth:`TelegramFake.push` when left out; ``kind`` is ``message`` or
    ``channel_post``; ``fields`` go into the message as they are (``photo=[...]``, ``caption=...``).
    """
    body: dict[str, Any] = {"chat": dict(chat), "date": int(time.time())}
    if message_id is not None:
        body["message_id"] = message_id
    if sender is not None:
        body["from"] = dict(sender)
    if text is not None:
        body["text"] = text
    if topic is not None:
        body["message_thread_id"] = topic
        body["is_topic_message"] = True
    body.update(fields)
    return {kind: body}


def callback_query(
    presser: Mapping[str, Any], on: Mapping[str, Any], data: str, *, query_id: str = "cq-1"
) -> dict[str, Any]:
    """An ``Update`` (without its ``update_id``) of ``presser`` pressing a button with ``data`` under the message
    ``on`` (a message the bot sent, as :meth:`TelegramFake.sent_messages` has it)."""
    return {"callback_query": {"id": query_id, "from": dict(presser), "message": dict(on), "data": data}}


# -- the server ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One Bot API request: which bot (token), method, JSON parameters, the status answered, and when."""

    token: str
    method: str
    params: dict[str, Any]
    status: int
    at: float


@dataclass
class _Failure:
    status: int
    description: str
    retry_after: int | None = None
    raw_body: bytes | None = None
    after: int = 0  # calls to let through first


@dataclass
class _Bot:
    token: str
    bot_id: int
    username: str
    queue: deque[tuple[int | None, bytes]] = field(default_factory=deque)  # (update_id, JSON) not yet confirmed
    delivered: set[int] = field(default_factory=set)  # queued entries without an id, already sent once
    poll_generation: int = 0
    polls_waiting: int = 0
    webhook: dict[str, Any] | None = None


class TelegramFake:
    """The fake Bot API; see the module docstring. ``flood_interval_s`` answers 429 to a chat sent to faster;
    ``port`` (default: a free one) and ``first_update_id`` (above the old one's) let a new fake take over a stopped
    one's address, as Telegram coming back."""

    def __init__(
        self,
        *,
        flood_interval_s: float | None = None,
        flood_retry_after: int = 1,
        port: int = 0,
        first_update_id: int = 700_000,
    ) -> None:
        self.flood_interval_s = flood_interval_s
        self.flood_retry_after = flood_retry_after
        self.floods = 0  # 429s answered by flood control
        self._lock = threading.Condition()
        self._bots: dict[str, _Bot] = {}
        self._next_update_id = (
            first_update_id  # Telegram's update ids only grow: push_raw's explicit ids advance it too
        )
        self._message_ids: defaultdict[int | str, itertools.count[int]] = defaultdict(lambda: itertools.count(1))
        self._topic_ids = itertools.count(100)
        self._forums: dict[int, set[int]] = {}  # forum chat -> its topics
        self._migrated: dict[int, int] = {}
        self._last_send: dict[int | str, float] = {}
        self._failures: defaultdict[str, deque[_Failure]] = defaultdict(deque)
        self._calls: list[Call] = []
        self._files: dict[str, tuple[str, bytes]] = {}  # file_id -> (file_path, bytes)
        self._bot_messages: list[dict[str, Any]] = []  # what sendMessage answered, in order
        self._closing = False
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.+}", self._download)
        self._host = HttpHost(app, port=port, name="telegram-fake")

    # -- lifecycle

    def start(self) -> TelegramFake:
        self._host.start()
        return self

    def stop(self) -> None:
        """End waiting long polls at once, then stop the server."""
        with self._lock:
            self._closing = True
        self._host.stop(5)

    def __enter__(self) -> TelegramFake:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        """What ``platforms.telegram.base_url`` should be."""
        return self._host.url

    @property
    def port(self) -> int:
        """The port it listens on."""
        return self._host.port

    # -- setting up

    def add_bot(self, token: str, *, username: str = "hermes_bot") -> None:
        """Accept ``token`` (a token the fake does not know gets 401 Unauthorized)."""
        with self._lock:
            self._bots[token] = _Bot(token=token, bot_id=int(token.split(":")[0]), username=username)

    def add_forum(self, chat_id: int, *topics: int) -> None:
        """Make ``chat_id`` a forum supergroup with ``topics`` open (``createForumTopic`` opens more)."""
        with self._lock:
            self._forums.setdefault(chat_id, set()).update(topics)

    def add_file(self, file_id: str, data: bytes, *, file_path: str | None = None) -> None:
        """Make ``getFile`` know ``file_id`` (at ``file_path``, default ``documents/<file_id>``) and serve ``data``."""
        with self._lock:
            self._files[file_id] = (file_path or f"documents/{file_id}", data)

    def migrate(self, chat_id: int, supergroup_id: int) -> None:
        """Group ``chat_id`` became supergroup ``supergroup_id``: sends to it answer 400 with migrate_to_chat_id."""
        with self._lock:
            self._migrated[chat_id] = supergroup_id

    def push(self, token: str, update: Mapping[str, Any]) -> int:
        """Queue ``update`` for the bot (with a fresh ``update_id``, and a message id if it has none)."""
        with self._lock:
            update_id = self._next_update_id
            self._next_update_id += 1
            body = dict(update)
            for kind in ("message", "channel_post"):
                if kind in body and "message_id" not in body[kind]:
                    body[kind] = {**body[kind], "message_id": next(self._message_ids[body[kind]["chat"]["id"]])}
            self._bots[token].queue.append((update_id, json.dumps({"update_id": update_id, **body}).encode()))
            self._lock.notify_all()
            return update_id

    def push_raw(self, token: str, raw: bytes, *, update_id: int | None = None) -> None:
        """Queue ``raw`` (one JSON value) as it is; it is confirmed like any update when ``update_id`` is given."""
        with self._lock:
            if update_id is not None:
                self._next_update_id = max(self._next_update_id, update_id + 1)
            self._bots[token].queue.append((update_id, raw))
            self._lock.notify_all()

    def fail(
        self,
        method: str,
        status: int,
        description: str,
        *,
        retry_after: int | None = None,
        times: int = 1,
        after: int = 0,
        raw_body: bytes | None = None,
    ) -> None:
        """Answer ``times`` calls of ``method``, after letting ``after`` through, with an error.

        ``raw_body`` replaces Telegram's JSON answer (a proxy's HTML error page).
        """
        with self._lock:
            for number in range(times):
                failure = _Failure(status, description, retry_after, raw_body, after=after if number == 0 else 0)
                self._failures[method.lower()].append(failure)

    def heal(self) -> None:
        """Forget the failures :meth:`fail` scripted and not yet answered."""
        with self._lock:
            self._failures.clear()

    # -- reading what happened

    def calls(self, method: str | None = None, token: str | None = None) -> list[Call]:
        """Every request so far (of ``method``, for ``token``), oldest first."""
        with self._lock:
            return [
                c
                for c in self._calls
                if (method is None or c.method == method.lower()) and (token is None or c.token == token)
            ]

    def sent(self, token: str | None = None) -> list[dict[str, Any]]:
        """The parameters of every ``sendMessage`` that succeeded."""
        return [c.params for c in self.calls("sendMessage", token) if c.status == 200]

    def offsets(self, token: str) -> list[int | None]:
        """The ``offset`` of each ``getUpdates`` call of the bot, oldest first."""
        return [c.params.get("offset") for c in self.calls("getUpdates", token)]

    def polling(self, token: str) -> bool:
        """Whether a long poll of the bot is waiting for updates right now."""
        with self._lock:
            return self._bots[token].polls_waiting > 0

    def pending(self, token: str) -> int:
        """Updates queued for the bot and not yet confirmed."""
        with self._lock:
            return len(self._bots[token].queue)

    def webhook(self, token: str) -> dict[str, Any] | None:
        """The ``setWebhook`` parameters in force for the bot."""
        with self._lock:
            return self._bots[token].webhook

    def wait_for(self, check: Callable[[], T], timeout: float = 10.0) -> T:
        """Wait until ``check()`` is truthy (it is re-checked on every request); return it."""
        return wait_on(
            self._lock, check, timeout, lambda: f"timed out after {timeout} s; calls: {[c.method for c in self._calls]}"
        )

    # -- the API

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        token, method = request.match_info["token"], request.match_info["method"].lower()
        params: dict[str, Any] = dict(request.query)
        if request.content_type == "multipart/form-data":  # a file upload (sendDocument): files as name, type, bytes
            form = await request.post()
            for key, value in form.items():
                if isinstance(value, web.FileField):
                    params[key] = (value.filename, value.content_type, value.file.read())
                else:
                    params[key] = value
            body = b""
        else:
            body = await request.read()
        if body:
            try:
                decoded = json.loads(body)
            except ValueError:
                return self._record(token, method, {}, _error(400, "Bad Request: can't parse JSON"))
            params.update(decoded)
        with self._lock:
            bot = self._bots.get(token)
            scripted = None
            if bot is not None and self._failures[method]:
                if self._failures[method][0].after > 0:
                    self._failures[method][0].after -= 1
                else:
                    scripted = self._failures[method].popleft()
        if bot is None:
            return self._record(token, method, params, _error(401, "Unauthorized"))
        if scripted is not None:
            if scripted.raw_body is not None:
                failed = web.Response(status=scripted.status, body=scripted.raw_body, content_type="text/html")
            else:
                failed = _error(scripted.status, scripted.description, retry_after=scripted.retry_after)
            return self._record(token, method, params, failed)
        handler = {
            "getupdates": self._get_updates,
            "sendmessage": self._send_message,
            "answercallbackquery": self._answer_callback_query,
            "senddocument": self._send_document,
            "createforumtopic": self._create_forum_topic,
            "getfile": self._get_file,
            "setwebhook": self._set_webhook,
            "deletewebhook": self._delete_webhook,
            "getme": self._get_me,
        }.get(method)
        if handler is None:
            return self._record(token, method, params, _error(404, "Not Found"))
        return self._record(token, method, params, await handler(bot, params))

    def _record(self, token: str, method: str, params: dict[str, Any], response: web.Response) -> web.Response:
        with self._lock:
            self._calls.append(Call(token, method, params, response.status, time.monotonic()))
            self._lock.notify_all()
        return response

    async def _get_updates(self, bot: _Bot, params: dict[str, Any]) -> web.Response:
        if bot.webhook is not None:
            return _error(409, _WEBHOOK_ACTIVE)
        offset = params.get("offset")
        limit = int(params.get("limit", 100))
        deadline = time.monotonic() + float(params.get("timeout", 0))
        with self._lock:
            bot.poll_generation += 1
            generation = bot.poll_generation
            if offset is not None:  # confirms every update below it; id-less entries go once they were sent
                bot.queue = deque(
                    (i, raw)
                    for i, raw in bot.queue
                    if (i is None and id(raw) not in bot.delivered) or (i is not None and i >= int(offset))
                )
                bot.delivered.clear()  # those entries are gone: their id() may be reused by a new bytes object
            bot.polls_waiting += 1
        try:
            while True:
                with self._lock:
                    if bot.poll_generation != generation:
                        return _error(409, _TERMINATED)
                    ready = [(i, raw) for i, raw in bot.queue if i is not None or id(raw) not in bot.delivered]
                    ready = ready[:limit]
                    if ready or self._closing or time.monotonic() >= deadline:
                        for update_id, raw in ready:
                            if update_id is None:
                                bot.delivered.add(id(raw))
                        body = b'{"ok":true,"result":[' + b",".join(raw for _, raw in ready) + b"]}"
                        return web.Response(body=body, content_type="application/json")
                    self._lock.notify_all()
                await asyncio.sleep(0.005)
        finally:
            with self._lock:
                bot.polls_waiting -= 1

    async def _send_message(self, bot: _Bot, params: dict[str, Any]) -> web.Response:
        chat_id, text = params.get("chat_id"), params.get("text")
        if chat_id is None or chat_id == "":
            return _error(400, "Bad Request: chat_id is empty")
        if not isinstance(text, str) or not text.strip():
            return _error(400, "Bad Request: message text is empty")
        if len(text.encode("utf-16-le")) // 2 > 4096:
            return _error(400, "Bad Request: message is too long")
        thread = params.get("message_thread_id")
        with self._lock:
            if chat_id in self._migrated:
                return _error(
                    400,
                    "Bad Request: group chat was upgraded to a supergroup chat",
                    migrate_to_chat_id=self._migrated[chat_id],
                )
            if thread is not None and chat_id in self._forums and thread not in self._forums[chat_id]:
                return _error(400, "Bad Request: message thread not found")
            now = time.monotonic()
            last = self._last_send.get(chat_id)
            if self.flood_interval_s is not None and last is not None and now - last < self.flood_interval_s:
                self.floods += 1
                retry = self.flood_retry_after
                return _error(429, f"Too Many Requests: retry after {retry}", retry_after=retry)
            self._last_send[chat_id] = now
            sent: dict[str, Any] = {
                "message_id": next(self._message_ids[chat_id]),
                "from": user(bot.bot_id, bot.username, username=bot.username, is_bot=True),
                "chat": {
                    "id": chat_id,
                    "type": "private" if isinstance(chat_id, int) and chat_id > 0 else "supergroup",
                },
                "date": int(time.time()),
                "text": text,
            }
        if thread is not None:
            sent |= {"message_thread_id": thread, "is_topic_message": True}
        markup = params.get("reply_markup")
        if markup is not None:
            rows = markup.get("inline_keyboard") if isinstance(markup, dict) else None
            buttons = [b for row in rows or [] for b in row] if isinstance(rows, list) else []
            if not buttons or not all(isinstance(b, dict) and b.get("text") for b in buttons):
                return _error(400, "Bad Request: can't parse reply keyboard markup JSON object")
            if any(len(str(b.get("callback_data", "")).encode()) > 64 for b in buttons):
                return _error(400, "Bad Request: BUTTON_DATA_INVALID")
            sent["reply_markup"] = markup
        with self._lock:
            self._bot_messages.append(sent)
        return _ok(sent)

    async def _answer_callback_query(self, bot: _Bot, params: dict[str, Any]) -> web.Response:
        if not params.get("callback_query_id"):
            return _error(400, "Bad Request: query is too old and response timeout expired or query ID is invalid")
        return _ok(True)

    def sent_messages(self) -> list[dict[str, Any]]:
        """The ``Message`` objects the bot sent, as Telegram answered them (with their ``reply_markup``)."""
        with self._lock:
            return list(self._bot_messages)

    async def _send_document(self, bot: _Bot, params: dict[str, Any]) -> web.Response:
        document = params.get("document")
        if not params.get("chat_id") or not isinstance(document, tuple):
            return _error(400, "Bad Request: there is no document in the request")
        with self._lock:
            chat_id = int(params["chat_id"])
            message_id = next(self._message_ids[chat_id])
        return _ok({"message_id": message_id, "chat": {"id": chat_id}, "date": int(time.time())})

    async def _create_forum_topic(self, bot: _Bot, params: dict[str, Any]) -> web.Response:
        chat_id, name = params.get("chat_id"), params.get("name")
        with self._lock:
            if chat_id not in self._forums:
                return _error(400, "Bad Request: the chat is not a forum")
            if not isinstance(name, str) or not 1 <= len(name) <= 128:
                return _error(400, "Bad Request: TOPIC_NAME_INVALID")
            topic = next(self._topic_ids)
            self._forums[chat_id].add(topic)
        return _ok({"message_thread_id": topic, "name": name, "icon_color": _TOPIC_ICON})

    async def _get_file(self, bot: _Bot, params: dict[str, Any]) -> web.Response:
        file_id = params.get("file_id")
        with self._lock:
            known = self._files.get(file_id) if isinstance(file_id, str) else None
        if known is None:
            return _error(400, "Bad Request: invalid file_id")
        path, data = known
        return _ok({"file_id": file_id, "file_unique_id": f"u-{file_id}", "file_size": len(data), "file_path": path})

    async def _download(self, request: web.Request) -> web.Response:
        token, path = request.match_info["token"], request.match_info["path"]
        with self._lock:
            known = token in self._bots
            found = next((data for stored, data in self._files.values() if stored == path), None)
        if not known or found is None:
            return self._record(token, "file", {"path": path}, web.Response(status=404, text="Not Found"))
        return self._record(token, "file", {"path": path}, web.Response(body=found))

    async def _get_me(self, bot: _Bot, params: dict[str, Any]) -> web.Response:
        return _ok({"id": bot.bot_id, "is_bot": True, "first_name": bot.username, "username": bot.username})

    async def _set_webhook(self, bot: _Bot, params: dict[str, Any]) -> web.Response:
        if not isinstance(params.get("url"), str):
            return _error(400, "Bad Request: bad webhook: an HTTPS URL must be provided for webhook")
        with self._lock:
            bot.webhook = dict(params) if params["url"] else None
        return _ok(True)

    async def _delete_webhook(self, bot: _Bot, params: dict[str, Any]) -> web.Response:
        with self._lock:
            bot.webhook = None
        return _ok(True)


def _ok(result: Any) -> web.Response:
    return web.json_response({"ok": True, "result": result})


def _error(status: int, description: str, **parameters: Any) -> web.Response:
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    given = {k: v for k, v in parameters.items() if v is not None}
    if given:
        body["parameters"] = given
    return web.json_response(body, status=status)


def post_update(url: str, update: Any, secret: str | None, *, raw: bytes | None = None) -> tuple[int, dict[str, Any]]:
    """POST an update to a webhook as Telegram does (JSON, the secret header); return the status and JSON answer."""
    parts = urlsplit(url)
    body = raw if raw is not None else json.dumps(update).encode()
    headers = {"Content-Type": "application/json"}
    if secret is not None:
        headers["X-Telegram-Bot-Api-Secret-Token"] = secret
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        connection.request("POST", parts.path, body=body, headers=headers)
        response = connection.getresponse()
        answer: dict[str, Any] = json.loads(response.read())
        return response.status, answer
    finally:
        connection.close()
