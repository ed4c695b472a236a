"""A local Slack: the Web API's ``chat.postMessage`` on loopback, and Slack's side of the Events API.

:class:`FakeSlack` serves ``POST /api/chat.postMessage`` as Slack does: a Bearer bot token (``not_authed`` /
``invalid_auth`` otherwise), a JSON or form body, ``{"ok": true, "channel", "ts", "message"}`` on success and
``{"ok": false, "error": ...}`` with HTTP 200 on refusal, ``msg_too_long`` past 40,000 characters, and whatever a
test scripts with :meth:`FakeSlack.fail_next` (HTTP 429 with ``Retry-After``, ``ratelimited``, 5xx). Every
accepted post is recorded with its arrival time.

Files are shared as Slack's external upload takes them: ``POST /api/files.getUploadURLExternal`` (form fields
``filename`` and ``length``) answers an ``upload_url`` on this host and a ``file_id``; ``POST`` to that URL stores the
bytes (raw, or as a form's file; the length must match); ``POST /api/files.completeUploadExternal`` (JSON or form:
``files``, ``channel_id``, ``thread_ts``, ``initial_comment``) shares each file into the channel once, recorded as
a :class:`Shared`. :meth:`FakeSlack.fail_next_share` scripts an answer of one of those steps.

Files added with :meth:`FakeSlack.add_file` are served as Slack serves them: ``GET
/files-pri/<team>-<id>/download/<name>`` (the ``url_private_download`` of the file object it returns, which a
message event carries in ``files[]``) with the bytes and the file's ``Content-Type`` for a Bearer bot token of the
file's workspace, and Slack's sign-in page (HTTP 200, ``text/html``) for any other request; ``GET
/api/files.info?file=<id>`` answers ``{"ok": true, "file": {...}}``. Every download request is recorded;
:meth:`FakeSlack.fail_next_download` scripts an error status, :meth:`FakeSlack.hold_downloads` keeps downloads
waiting until released.

The event helpers build Events API payloads (``event_callback`` envelopes around ``message`` and ``app_mention``
events, ``url_verification``) and :func:`deliver` POSTs them the way Slack does: signed with the app's signing
secret (``v0=`` + hex HMAC-SHA256 of ``v0:<timestamp>:<body>``), with ``X-Slack-Retry-Num`` and
``X-Slack-Retry-Reason`` on redeliveries. :func:`deliver_until_acknowledged` follows Slack's retry policy: up to
three retries when the answer is not a 2xx within 3 s, none when the app says ``X-Slack-No-Retry: 1``.
Written from Slack's documentation, independently of the adapter's code.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import http.client
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from aiohttp import web

from platforms.support.http_host import HttpHost
from tests.platforms.form_data import is_form, parse_form
from tests.platforms.support import Arrivals

__all__ = [
    "Answer",
    "Download",
    "FakeSlack",
    "Posted",
    "Shared",
    "app_mention",
    "deliver",
    "deliver_until_acknowledged",
    "event_callback",
    "message",
    "press",
    "sign",
    "url_verification",
]

MAX_TEXT_CHARS = 40_000
_event_ids = itertools.count(1)


@dataclass(frozen=True)
class Posted:
    """One accepted ``chat.postMessage``: its token, fields, the ts Slack gave it and when it arrived."""

    token: str
    channel: str
    text: str
    thread_ts: str | None
    ts: str
    at: float  # time.monotonic() on arrival
    blocks: Any = None  # the message's Block Kit blocks, when it has any (an approval's buttons)


@dataclass(frozen=True)
class Shared:
    """One file shared by ``files.completeUploadExternal``: where, with which comment, and the file."""

    token: str
    channel: str
    thread_ts: str | None
    initial_comment: str | None
    file_id: str
    title: str | None
    filename: str
    data: bytes


@dataclass
class _Upload:
    team: str
    filename: str
    length: int
    data: bytes | None = None
    shared: bool = False


@dataclass(frozen=True)
class Download:
    """One request for a file's bytes: the file id, the Bearer token (``None``: none) and the status answered."""

    file_id: str
    token: str | None
    status: int


@dataclass(frozen=True)
class _File:
    team: str
    name: str
    mimetype: str
    data: bytes


_SIGN_IN_PAGE = b"<!DOCTYPE html><html><head><title>Slack</title></head><body>Sign in to Slack</body></html>"


@dataclass(frozen=True)
class _Failure:
    status: int
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class FakeSlack:
    """The Web API of one or more workspaces: ``tokens`` maps each valid bot token to its team id."""

    tokens: Mapping[str, str]
    posted: list[Posted] = field(default_factory=list)
    attempts: list[float] = field(default_factory=list)  # arrival time of every authenticated call
    _arrivals: Arrivals[Posted] = field(default_factory=lambda: Arrivals("posted", "the fake Slack"))
    _script: deque[_Failure | None] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _seconds: itertools.count[int] = field(default_factory=lambda: itertools.count(1_764_460_800))
    downloads: list[Download] = field(default_factory=list)
    _files: dict[str, _File] = field(default_factory=dict)
    _download_script: deque[int] = field(default_factory=deque)
    _redirects: dict[str, str] = field(default_factory=dict)  # file id -> where its download redirects
    download_arrived: threading.Event = field(default_factory=threading.Event)  # set by the first download request
    _held: threading.Event | None = None
    shared: list[Shared] = field(default_factory=list)
    share_calls: list[str] = field(default_factory=list)  # the step of every upload request, in order
    _uploads: dict[str, _Upload] = field(default_factory=dict)
    _share_script: dict[str, deque[_Failure]] = field(default_factory=dict)
    _file_ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def __post_init__(self) -> None:
        app = web.Application()
        app.router.add_post("/api/chat.postMessage", self._post_message)
        app.router.add_post("/api/auth.test", self._auth_test)
        app.router.add_get("/api/files.info", self._files_info)
        app.router.add_get("/files-pri/{team_file}/download/{name}", self._download)
        app.router.add_post("/api/files.getUploadURLExternal", self._get_upload_url)
        app.router.add_post("/upload/v1/{file_id}", self._upload)
        app.router.add_post("/api/files.completeUploadExternal", self._complete_upload)
        self.host = HttpHost(app, name="fake-slack")

    @property
    def api_base_url(self) -> str:
        """What ``platforms.slack.api_base_url`` should be."""
        return self.host.url + "/api"

    def start(self) -> FakeSlack:
        self.host.start()
        return self

    def stop(self) -> None:
        self.host.stop()

    def fail_next(
        self,
        *,
        status: int = 200,
        error: str | None = None,
        retry_after: str | None = None,
        count: int = 1,
        after: int = 0,
    ) -> None:
        """Answer ``count`` authenticated calls, after ``after`` normal ones, with HTTP ``status`` and
        ``{"ok": false, "error": ...}`` (``ratelimited`` for 429, ``fatal_error`` otherwise, unless given)."""
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        body: dict[str, Any] = {"ok": False, "error": error or ("ratelimited" if status == 429 else "fatal_error")}
        with self._lock:
            self._script.extend([None] * after)
            self._script.extend(_Failure(status, headers, body) for _ in range(count))

    def add_file(
        self, file_id: str, data: bytes, *, name: str, mimetype: str, team: str = "T1", size: int | None = None
    ) -> dict[str, Any]:
        """Host ``data`` as file ``file_id`` of ``team``; return its file object as a message event carries it
        (``size`` overrides the size it states)."""
        with self._lock:
            self._files[file_id] = _File(team=team, name=name, mimetype=mimetype, data=data)
        return self.file_object(file_id) | ({"size": size} if size is not None else {})

    def file_object(self, file_id: str) -> dict[str, Any]:
        """The file object Slack gives for ``file_id`` (in ``files[]`` of an event and from ``files.info``)."""
        with self._lock:
            file = self._files[file_id]
        base = f"{self.host.url}/files-pri/{file.team}-{file_id}"
        return {
            "id": file_id,
            "created": 1764460800,
            "timestamp": 1764460800,
            "name": file.name,
            "title": file.name,
            "mimetype": file.mimetype,
            "filetype": file.name.rsplit(".", 1)[-1],
            "user": "U1",
            "user_team": file.team,
            "editable": False,
            "size": len(file.data),
            "mode": "hosted",
            "is_external": False,
            "external_type": "",
            "is_public": False,
            "url_private": f"{base}/{file.name}",
            "url_private_download": f"{base}/download/{file.name}",
            "permalink": f"https://example.slack.com/files/U1/{file_id}/{file.name}",
            "file_access": "visible",
        }

    def redirect_download(self, file_id: str, to: str) -> None:
        """Answer the authorised downloads of ``file_id`` with a 302 to ``to``."""
        with self._lock:
            self._redirects[file_id] = to

    def remove_file(self, file_id: str) -> None:
        """Delete a hosted file: its download is then 404 and ``files.info`` says ``file_not_found``."""
        with self._lock:
            del self._files[file_id]

    def fail_next_download(self, status: int, count: int = 1) -> None:
        """Answer the next ``count`` authorised downloads with HTTP ``status`` (an HTML error page)."""
        with self._lock:
            self._download_script.extend([status] * count)

    def hold_downloads(self) -> threading.Event:
        """Keep every download waiting until the returned event is set."""
        held = threading.Event()
        self._held = held
        return held

    def take(self, timeout: float = 10.0) -> Posted:
        """The next accepted post, waiting up to ``timeout``."""
        return self._arrivals.take(timeout)

    def drain(self) -> list[Posted]:
        """Every post that arrived and was not taken yet."""
        return self._arrivals.drain()

    def nothing_more(self, wait: float = 0.2) -> bool:
        """Whether no further post arrives within ``wait`` seconds."""
        return self._arrivals.nothing_more(wait)

    async def _post_message(self, request: web.Request) -> web.Response:
        arrived = time.monotonic()
        authorization = request.headers.get("Authorization", "")
        if not authorization.startswith("Bearer "):
            return web.json_response({"ok": False, "error": "not_authed"})
        token = authorization.removeprefix("Bearer ")
        if token not in self.tokens:
            return web.json_response({"ok": False, "error": "invalid_auth"})
        raw = await request.read()
        with self._lock:
            self.attempts.append(arrived)
            failure = self._script.popleft() if self._script else None
        if failure is not None:
            return web.json_response(failure.body, status=failure.status, headers=failure.headers)
        fields = self._fields(request.content_type, raw)
        if fields is None:
            return web.json_response({"ok": False, "error": "invalid_json"})
        channel, text, thread_ts = fields.get("channel"), fields.get("text"), fields.get("thread_ts")
        if not isinstance(channel, str) or not channel:
            return web.json_response({"ok": False, "error": "channel_not_found"})
        if not isinstance(text, str) or not text.strip():
            return web.json_response({"ok": False, "error": "no_text"})
        if len(text) > MAX_TEXT_CHARS:
            return web.json_response({"ok": False, "error": "msg_too_long"})
        ts = f"{next(self._seconds)}.000100"
        posted = Posted(
            token=token,
            channel=channel,
            text=text,
            thread_ts=thread_ts if isinstance(thread_ts, str) else None,
            ts=ts,
            at=arrived,
            blocks=fields.get("blocks"),
        )
        if posted.blocks is not None and not _valid_blocks(posted.blocks):
            return web.json_response({"ok": False, "error": "invalid_blocks"})
        with self._lock:
            self.posted.append(posted)
        self._arrivals.put(posted)
        message: dict[str, Any] = {"type": "message", "text": text, "user": "UBOT", "bot_id": "BBOT", "ts": ts}
        if posted.thread_ts:
            message["thread_ts"] = posted.thread_ts
        return web.json_response({"ok": True, "channel": channel, "ts": ts, "message": message})

    async def _auth_test(self, request: web.Request) -> web.Response:
        token, team = self._team_of(request)
        if token is None:
            return web.json_response({"ok": False, "error": "not_authed"})
        if team is None:
            return web.json_response({"ok": False, "error": "invalid_auth"})
        return web.json_response({"ok": True, "team_id": team, "user_id": "UBOT", "user": "hermes", "bot_id": "BBOT"})

    def _team_of(self, request: web.Request) -> tuple[str | None, str | None]:
        """(the Bearer token, its team) of a request; the team is ``None`` for a missing or unknown token."""
        authorization = request.headers.get("Authorization", "")
        token = authorization.removeprefix("Bearer ") if authorization.startswith("Bearer ") else None
        return token, self.tokens.get(token) if token is not None else None

    async def _files_info(self, request: web.Request) -> web.Response:
        token, team = self._team_of(request)
        if token is None:
            return web.json_response({"ok": False, "error": "not_authed"})
        if team is None:
            return web.json_response({"ok": False, "error": "invalid_auth"})
        file_id = request.query.get("file", "")
        with self._lock:
            file = self._files.get(file_id)
        if file is None or file.team != team:
            return web.json_response({"ok": False, "error": "file_not_found"})
        return web.json_response({"ok": True, "file": self.file_object(file_id)})

    async def _download(self, request: web.Request) -> web.StreamResponse:
        team_file, name = request.match_info["team_file"], request.match_info["name"]
        file_team, _, file_id = team_file.partition("-")
        token, team = self._team_of(request)
        self.download_arrived.set()
        held = self._held
        if held is not None:
            await asyncio.to_thread(held.wait, 10)
        with self._lock:
            file = self._files.get(file_id)
            scripted = self._download_script.popleft() if self._download_script and team is not None else None
            if team is None or team != file_team:
                status = 200  # Slack sends whoever is not signed in to its sign-in page
            elif scripted is not None:
                status = scripted
            elif file is None or file.name != name:
                status = 404
            else:
                status = 200
            redirect = self._redirects.get(file_id) if status == 200 else None
            self.downloads.append(Download(file_id=file_id, token=token, status=302 if redirect else status))
        if redirect is not None and team == file_team:
            raise web.HTTPFound(redirect)
        if team is None or team != file_team:
            return web.Response(body=_SIGN_IN_PAGE, content_type="text/html")
        if status != 200 or file is None:
            return web.Response(status=status, body=b"<html>error</html>", content_type="text/html")
        return web.Response(body=file.data, headers={"Content-Type": file.mimetype})

    def fail_next_share(self, step: str, body: dict[str, Any], status: int = 200) -> None:
        """Answer the next request of ``step`` (``getUploadURLExternal``, ``upload`` or ``completeUploadExternal``)
        with ``body``."""
        with self._lock:
            self._share_script.setdefault(step, deque()).append(_Failure(status, {}, body))

    def _scripted(self, step: str) -> web.Response | None:
        with self._lock:
            self.share_calls.append(step)
            queue = self._share_script.get(step)
            failure = queue.popleft() if queue else None
        return None if failure is None else web.json_response(failure.body, status=failure.status)

    async def _get_upload_url(self, request: web.Request) -> web.Response:
        token, team = self._team_of(request)
        if token is None or team is None:
            return web.json_response({"ok": False, "error": "not_authed" if token is None else "invalid_auth"})
        fields = self._fields(request.content_type, await request.read()) or {}
        scripted = self._scripted("getUploadURLExternal")
        if scripted is not None:
            return scripted
        filename, length = fields.get("filename"), str(fields.get("length", ""))
        if not isinstance(filename, str) or not filename or not length.isdigit():
            return web.json_response({"ok": False, "error": "invalid_arguments"})
        file_id = f"F{next(self._file_ids):08d}"
        with self._lock:
            self._uploads[file_id] = _Upload(team, filename, int(length))
        upload_url = f"{self.host.url}/upload/v1/{file_id}"
        return web.json_response({"ok": True, "upload_url": upload_url, "file_id": file_id})

    async def _upload(self, request: web.Request) -> web.Response:
        raw = await request.read()
        scripted = self._scripted("upload")
        if scripted is not None:
            return scripted
        if is_form(request.headers.get("Content-Type", "")):
            _, files = parse_form(request.headers["Content-Type"], raw)
            raw = files[0].data if files else b""
        with self._lock:
            upload = self._uploads.get(request.match_info["file_id"])
            if upload is None or upload.data is not None:
                return web.Response(status=404, text="Not Found")
            if len(raw) != upload.length:
                return web.Response(status=400, text="length mismatch")
            upload.data = raw
        return web.Response(text=f"OK - {len(raw)}")

    async def _complete_upload(self, request: web.Request) -> web.Response:
        token, team = self._team_of(request)
        if token is None or team is None:
            return web.json_response({"ok": False, "error": "not_authed" if token is None else "invalid_auth"})
        fields = self._fields(request.content_type, await request.read()) or {}
        scripted = self._scripted("completeUploadExternal")
        if scripted is not None:
            return scripted
        files = fields.get("files")
        if isinstance(files, str):
            files = json.loads(files)
        channel = fields.get("channel_id")
        if not isinstance(files, list) or not files or not isinstance(channel, str):
            return web.json_response({"ok": False, "error": "invalid_arguments"})
        done = []
        with self._lock:
            for entry in files:
                upload = self._uploads.get(str(entry.get("id")))
                if upload is None or upload.team != team or upload.data is None or upload.shared:
                    return web.json_response({"ok": False, "error": "file_not_found"})
            for entry in files:
                file_id = str(entry["id"])
                upload = self._uploads[file_id]
                upload.shared = True
                thread_ts, comment = fields.get("thread_ts"), fields.get("initial_comment")
                assert upload.data is not None
                self.shared.append(
                    Shared(
                        token, channel, thread_ts, comment, file_id, entry.get("title"), upload.filename, upload.data
                    )
                )
                done.append({"id": file_id, "title": entry.get("title") or upload.filename})
        return web.json_response({"ok": True, "files": done})

    @staticmethod
    def _fields(content_type: str, raw: bytes) -> dict[str, Any] | None:
        if content_type == "application/x-www-form-urlencoded":
            return dict(parse_qsl(raw.decode("utf-8", "replace")))
        try:
            decoded = json.loads(raw)
        except ValueError:
            return None
        return decoded if isinstance(decoded, dict) else None


def _valid_blocks(blocks: Any) -> bool:
    """Whether ``blocks`` is a list of blocks whose buttons have text, an ``action_id`` and a short ``value``."""
    if not isinstance(blocks, list) or not all(isinstance(b, dict) and isinstance(b.get("type"), str) for b in blocks):
        return False
    buttons = [e for b in blocks if b["type"] == "actions" for e in b.get("elements", [])]
    return all(
        isinstance(e, dict) and e.get("text") and e.get("action_id") and len(str(e.get("value", ""))) <= 2000
        for e in buttons
    )


def press(
    action_id: str,
    value: str,
    *,
    user: str = "U1",
    team: str = "T1",
    channel: str = "C1",
    message_ts: str | None = None,
    thread_ts: str | None = None,
    action_ts: str = "1764460999.000001",
) -> bytes:
    """The form body of a ``block_actions`` interactivity request: ``user`` pressed the button ``action_id``."""
    message: dict[str, Any] = {"type": "message", "ts": message_ts or "1764460998.000100"}
    if thread_ts is not None:
        message["thread_ts"] = thread_ts
    payload = {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "team_id": team},
        "team": {"id": team, "domain": "example"},
        "channel": {"id": channel, "name": "general"},
        "container": {"type": "message", "message_ts": message["ts"], "channel_id": channel},
        "message": message,
        "actions": [
            {"type": "button", "action_id": action_id, "block_id": "b", "value": value, "action_ts": action_ts}
        ],
    }
    return urlencode({"payload": json.dumps(payload)}).encode()


# -- Slack's side of the Events API ----------------------------------------------------------------------------


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """``X-Slack-Signature`` for ``body`` sent at ``timestamp``."""
    basestring = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), basestring, hashlib.sha256).hexdigest()


def message(
    text: str,
    *,
    channel: str = "C1",
    user: str = "U1",
    ts: str = "1764460800.000100",
    channel_type: str = "channel",
    thread_ts: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A ``message`` event as a ``message.channels`` / ``.groups`` / ``.im`` / ``.mpim`` subscription sends it."""
    event: dict[str, Any] = {
        "type": "message",
        "channel": channel,
        "user": user,
        "text": text,
        "ts": ts,
        "event_ts": ts,
        "channel_type": channel_type,
        "client_msg_id": f"cm-{ts}",
    }
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    return event | extra


def app_mention(
    text: str,
    *,
    channel: str = "C1",
    user: str = "U1",
    ts: str = "1764460800.000100",
    thread_ts: str | None = None,
    bot_user: str = "UBOT",
) -> dict[str, Any]:
    """An ``app_mention`` event (no ``channel_type``; the text starts with the bot's mention)."""
    event: dict[str, Any] = {
        "type": "app_mention",
        "channel": channel,
        "user": user,
        "text": f"<@{bot_user}> {text}",
        "ts": ts,
        "event_ts": ts,
    }
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    return event


def event_callback(
    event: Mapping[str, Any],
    *,
    team: str = "T1",
    event_id: str | None = None,
    bot_user: str = "UBOT",
    api_app_id: str = "A1",
) -> dict[str, Any]:
    """The envelope around ``event``, with the ``authorizations`` entry naming the bot user."""
    return {
        "token": "legacy-verification-token",
        "team_id": team,
        "api_app_id": api_app_id,
        "event": dict(event),
        "type": "event_callback",
        "event_id": event_id or f"Ev{next(_event_ids):08d}",
        "event_time": 1764460800,
        "authorizations": [
            {
                "enterprise_id": None,
                "team_id": team,
                "user_id": bot_user,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
        "is_ext_shared_channel": False,
    }


def url_verification(challenge: str) -> dict[str, Any]:
    """The request Slack sends when a Request URL is saved."""
    return {"token": "legacy-verification-token", "challenge": challenge, "type": "url_verification"}


@dataclass(frozen=True)
class Answer:
    """What the app answered: status, lower-cased headers, the JSON body (or ``None``) and how long it took."""

    status: int
    headers: Mapping[str, str]
    body: Any
    seconds: float


def deliver(
    url: str,
    payload: Any,
    secret: str,
    *,
    timestamp: float | None = None,
    retry: tuple[int, str] | None = None,
    headers: Mapping[str, str | None] | None = None,
    timeout: float = 10.0,
) -> Answer:
    """POST ``payload`` (JSON-encoded unless bytes) to ``url`` signed with ``secret``, as Slack does.

    ``retry`` is (``X-Slack-Retry-Num``, ``X-Slack-Retry-Reason``); ``headers`` overrides or (with ``None``)
    removes headers, for forged requests.
    """
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    stamp = str(int(time.time() if timestamp is None else timestamp))
    sent = {
        "Content-Type": "application/json",
        "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)",
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": sign(secret, stamp, body),
    }
    if retry is not None:
        sent |= {"X-Slack-Retry-Num": str(retry[0]), "X-Slack-Retry-Reason": retry[1]}
    for name, value in (headers or {}).items():
        sent.pop(name, None)
        if value is not None:
            sent[name] = value
    parts = urlsplit(url)
    started = time.monotonic()
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
    try:
        connection.request("POST", parts.path, body=body, headers=sent)
        response = connection.getresponse()
        data = response.read()
    finally:
        connection.close()
    try:
        decoded = json.loads(data) if data else None
    except ValueError:
        decoded = None
    return Answer(
        status=response.status,
        headers={k.lower(): v for k, v in response.getheaders()},
        body=decoded,
        seconds=time.monotonic() - started,
    )


def deliver_until_acknowledged(url: str, payload: Any, secret: str, *, max_retries: int = 3) -> list[int | str]:
    """Deliver like Slack: retry while the answer is no 2xx within 3 s; return each attempt's status or error."""
    outcomes: list[int | str] = []
    for attempt in range(max_retries + 1):
        retry = None
        if attempt:
            previous = outcomes[-1]
            reason = "http_timeout" if previous == "timeout" else "http_error"
            retry = (attempt, reason if isinstance(previous, int) or reason == "http_timeout" else "connection_failed")
        try:
            answer = deliver(url, payload, secret, retry=retry, timeout=3.0)
        except TimeoutError:
            outcomes.append("timeout")
            continue
        except OSError as exc:
            outcomes.append(type(exc).__name__)
            continue
        outcomes.append(answer.status)
        if 200 <= answer.status < 300 or answer.headers.get("x-slack-no-retry") == "1":
            break
    return outcomes
