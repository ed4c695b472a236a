"""Replies through the Feishu IM message API, with tenant access tokens fetched, cached and refreshed per app.

A reply to a chat is ``POST /open-apis/im/v1/messages?receive_id_type=chat_id``; a reply in a thread goes to
``POST /open-apis/im/v1/messages/<root message>/reply`` with ``reply_in_thread``. Each part of a reply carries a
``uuid`` derived from the reply's outbox id, the reply and the part's position, so a retry within Feishu's
one-hour window does not post it twice, also after a restart (the outbox id is the row's). Tokens come from
``POST /open-apis/auth/v3/tenant_access_token/internal`` (self-built apps) and are reused until shortly before
their ``expire``; a send refused for its token (99991661, 99991663, 99991664) fetches a new one and tries once
more at once. Rate limits (HTTP 429, code 99991400, or 230020 for one chat) become
``SendError(retry_after_s=...)`` from ``x-ogw-ratelimit-reset`` or ``Retry-After``.

A reply carrying a document (``/save``) is uploaded with ``POST /open-apis/im/v1/files`` (``file_type: stream``)
and sent as one ``file`` message naming its ``file_key``, under a ``uuid`` of its own; a file Feishu refuses sends
the reply's text instead (:mod:`platforms.support.documents`).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

import msgspec

from hermes_actors.messages import ApprovalRequest, OutboundDocument, OutboundMessage
from platforms.base import SendError
from platforms.feishu.cards import approval_card
from platforms.feishu.config import AppKeys
from platforms.feishu.events import PLATFORM
from platforms.support import http_client
from platforms.support.documents import FormFile, UploadFailed, before_posting, form_data, posting_failed, send_document
from platforms.support.ratelimit import Rate, RateLimiter
from platforms.support.text import split_message
from platforms.support.tokens import TokenCache

__all__ = ["MAX_CONTENT_BYTES", "FeishuSender", "content_bytes", "content_json"]

_log = logging.getLogger(__name__)

MAX_CONTENT_BYTES = 148 * 1024  # a text message's request body may be 150 KB; the rest is room for the other fields
TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
SEND_PATH = "/open-apis/im/v1/messages?receive_id_type=chat_id"
FILES_PATH = "/open-apis/im/v1/files"
_TOKEN_INVALID = frozenset({99991661, 99991663, 99991664})
_RATE_LIMITED = frozenset({99991400, 230020})
_DEFAULT_EXPIRE_S = 7200
_DEFAULT_WAIT_S = 1.0  # a rate-limit answer without a hint
_HINTS = {
    230002: "; add the bot to the chat",
    99991672: "; grant the app the im:message:send_as_bot permission",
    99991663: "; the token was refused even after a refresh: check app_id and app_secret",
}


def content_json(text: str) -> str:
    """The ``content`` field of a text message: JSON inside the JSON body."""
    return msgspec.json.encode({"text": text}).decode()


def content_bytes(text: str) -> int:
    """How many bytes ``text`` takes in a request body, as the escaped ``content`` string."""
    return len(msgspec.json.encode(content_json(text)))


def _json_object(result: http_client.HttpResult) -> dict[str, Any] | None:
    try:
        answer = result.json()
    except http_client.HttpError:
        return None
    return answer if isinstance(answer, dict) else None


def _code(answer: dict[str, Any] | None) -> object:
    return None if answer is None else answer.get("code")


def _wait(result: http_client.HttpResult) -> float:
    for name in ("x-ogw-ratelimit-reset", "retry-after"):
        wait = http_client.retry_after_seconds(result.headers.get(name))
        if wait is not None:
            return wait
    return _DEFAULT_WAIT_S


def _check(result: http_client.HttpResult, answer: dict[str, Any] | None, what: str) -> dict[str, Any]:
    """The ``data`` of a successful answer; otherwise the :class:`SendError` that says what happened."""
    code = _code(answer)
    if result.status == 429 or code in _RATE_LIMITED:
        wait = _wait(result)
        raise SendError(
            f"{what}: asked to slow down (HTTP {result.status}, code {code}); it will be retried in {wait:g} s",
            retry_after_s=wait,
        )
    if answer is None:
        if result.status >= 300:
            raise http_client.status_error(result, what)
        raise SendError(f"{what}: answered HTTP {result.status} without a JSON object: {result.excerpt()!r}")
    if code != 0 or result.status >= 300:
        hint = _HINTS.get(code, "") if isinstance(code, int) else ""
        raise SendError(
            f"{what}: failed with code {code} ({answer.get('msg')!s:.200}, HTTP {result.status}){hint}; "
            "it will be retried"
        )
    data = answer.get("data")
    return data if isinstance(data, dict) else {}


class _Tokens(TokenCache[AppKeys]):
    """Tenant access tokens of self-built apps, cached until shortly before they expire (thread-safe)."""

    def __init__(self, *, clock: Callable[[], float], timeout_s: float) -> None:
        super().__init__(clock=clock)
        self._timeout = timeout_s

    def _fetch(self, app: AppKeys) -> tuple[str, float]:
        what = f"feishu app '{app.name}': tenant access token"
        body = {"app_id": app.app_id, "app_secret": app.app_secret}
        try:
            result = http_client.request("POST", app.base_url + TOKEN_PATH, json_body=body, timeout=self._timeout)
        except http_client.HttpError as exc:
            # Fetching a token has no effect on any chat, so even a lost answer leaves the reply unsent.
            raise SendError(f"{what}: {exc}; it will be retried") from exc
        answer = _json_object(result)
        token = answer.get("tenant_access_token") if answer is not None else None
        if answer is not None and answer.get("code") == 0 and isinstance(token, str) and token:
            expire = answer.get("expire")
            if isinstance(expire, int) and not isinstance(expire, bool) and expire > 0:
                return token, float(expire)
            return token, float(_DEFAULT_EXPIRE_S)
        if result.status == 429 or result.status >= 500 or _code(answer) in _RATE_LIMITED:
            _check(result, answer, what)  # raises: a rate limit or a server fault, retried like a send
        raise SendError(
            f"{what}: refused (HTTP {result.status}, code {_code(answer)}: {result.excerpt()!r}); check app_id and "
            f"app_secret of platforms.feishu.apps.{app.name}"
        )


class FeishuSender:
    """Sends replies for every configured app (the app name is the reply's ``account_id``); opens threads."""

    platform = PLATFORM
    idempotent_sends = False  # the uuid dedupes for an hour only; a retry after a long outage may repeat a part

    def __init__(
        self,
        apps: Mapping[str, AppKeys],
        *,
        clock: Callable[[], float] = time.time,
        timeout_s: float = 10.0,
        chat_rate: Rate | None = None,
        app_rate: Rate | None = None,
        max_content_bytes: int = MAX_CONTENT_BYTES,
    ) -> None:
        self._apps = apps
        self._timeout = timeout_s
        self._tokens = _Tokens(clock=clock, timeout_s=timeout_s)
        self._limits = {
            name: RateLimiter(
                per_key=chat_rate or Rate(per_second=5.0, burst=5.0),
                overall=app_rate or Rate(per_second=50.0, burst=50.0),
            )
            for name in apps
        }
        self._max_bytes = max_content_bytes

    def send(self, message: OutboundMessage) -> str | None:
        """Post ``message`` (split at the size limit); return the first part's message id (``om_...``).

        A reply flagged ``possible_duplicate`` goes out unchanged: its parts keep their ``uuid``, so Feishu drops a
        part it already has when the retry comes within the hour.
        """
        app = self._apps.get(message.account_id)
        target = message.thread_id or message.chat_id
        if app is None or target is None:
            why = "names no chat" if app is not None else f"is for app {message.account_id!r}, which is not configured"
            _log.warning("feishu: a reply to session %s %s; it stays in the transcript", message.session_id, why)
            return None
        what = f"feishu app '{app.name}': reply to {'thread' if message.thread_id else 'chat'} {target}"
        return send_document(
            message,
            lambda document: self._send_file(app, message, document, target, what),
            lambda: self._send_text(app, message, target, what),
            what,
        )

    def _send_text(self, app: AppKeys, message: OutboundMessage, target: str, what: str) -> str | None:
        if not message.text.strip():
            return None
        key = _reply_key(message)
        ids: list[str] = []
        parts = split_message(message.text, self._max_bytes, length=content_bytes)
        asked = message.approval if isinstance(message.approval, ApprovalRequest) else None
        for index, part in enumerate(parts):
            # Feishu limits sends per chat; after a 429 the outbox itself holds the chat back for retry_after.
            self._limits[app.name].acquire(message.chat_id or target)
            last = asked is not None and index == len(parts) - 1  # the question's buttons, under its last part
            content = approval_card(part, asked.id) if last and asked is not None else _text(part)
            ids.append(self._post(app, message.chat_id, message.thread_id, content, f"{key}-{index}", what))
        return ids[0]

    def _send_file(
        self, app: AppKeys, message: OutboundMessage, document: OutboundDocument, target: str, what: str
    ) -> str:
        """Upload ``document`` (``im/v1/files``, ``file_type: stream``), then one ``file`` message naming its key."""
        with before_posting(what):
            file = FormFile(field="file", name=document.name, mime_type=document.mime_type, data=document.data)
            form = form_data({"file_type": "stream", "file_name": document.name}, [file])
            file_key = self._call(app, FILES_PATH, None, f"{what}: file upload", form=form).get("file_key")
            if not isinstance(file_key, str) or not file_key:
                raise UploadFailed(f"{what}: the file upload was answered without a file_key")
        self._limits[app.name].acquire(message.chat_id or target)
        content = {"msg_type": "file", "content": msgspec.json.encode({"file_key": file_key}).decode()}
        try:
            return self._post(app, message.chat_id, message.thread_id, content, f"{_reply_key(message)}-file", what)
        except SendError as exc:
            raise posting_failed(exc) from None

    def tenant_token(self, account_id: str, refused: str | None = None) -> str:
        """App ``account_id``'s tenant access token, from the cache or fetched (so this may block).

        ``refused`` is a token Feishu just refused: it is dropped and a fresh one fetched. Raises
        :class:`SendError` when no token can be had (the attachment downloads share this cache with the sends).
        """
        app = self._apps.get(account_id)
        if app is None:
            raise SendError(f"feishu: no app {account_id!r} is configured; add it under platforms.feishu.apps")
        if refused is not None:
            self._tokens.forget(app, refused)
        return self._tokens.get(app)

    def create_thread(self, chat_id: str, title: str, *, account_id: str = "") -> str:
        """Post ``title`` to ``chat_id`` and return its message id: replies to it open the thread."""
        app = self._apps.get(account_id)
        if app is None and not account_id and len(self._apps) == 1:
            (app,) = self._apps.values()
        if app is None:
            raise SendError(
                f"feishu: cannot open a thread for app {account_id!r}; name one of: {', '.join(self._apps)}"
            )
        what = f"feishu app '{app.name}': new thread in chat {chat_id}"
        self._limits[app.name].acquire(chat_id)
        return self._post(app, chat_id, None, _text(title.strip() or "New thread"), None, what)

    def _post(
        self,
        app: AppKeys,
        chat_id: str | None,
        thread: str | None,
        content: dict[str, str],
        uuid: str | None,
        what: str,
    ) -> str:
        body: dict[str, Any] = dict(content)
        if uuid is not None:
            body["uuid"] = uuid
        if thread is not None:
            path = f"/open-apis/im/v1/messages/{quote(thread, safe='')}/reply"
            body["reply_in_thread"] = True
        else:
            path = SEND_PATH
            body["receive_id"] = chat_id
        data = self._call(app, path, body, what)
        message_id = data.get("message_id")
        if not isinstance(message_id, str):
            raise SendError(f"{what}: the answer has no message_id; it will be retried", outcome_unknown=True)
        return message_id

    def _call(
        self,
        app: AppKeys,
        path: str,
        body: dict[str, Any] | None,
        what: str,
        *,
        form: tuple[bytes, str] | None = None,
    ) -> dict[str, Any]:
        token = self._tokens.get(app)
        result, answer = self._request(app, path, body, form, token, what)
        if _code(answer) in _TOKEN_INVALID:
            _log.info(
                "feishu app %r: the tenant access token was refused (code %s); fetching a new one",
                app.name,
                _code(answer),
            )
            self._tokens.forget(app, token)
            result, answer = self._request(app, path, body, form, self._tokens.get(app), what)
        return _check(result, answer, what)

    def _request(
        self,
        app: AppKeys,
        path: str,
        body: dict[str, Any] | None,
        form: tuple[bytes, str] | None,
        token: str,
        what: str,
    ) -> tuple[http_client.HttpResult, dict[str, Any] | None]:
        headers = {"authorization": f"Bearer {token}"}
        raw = None
        if form is not None:
            raw, headers["content-type"] = form
        try:
            result = http_client.request(
                "POST", app.base_url + path, body=raw, json_body=body, headers=headers, timeout=self._timeout
            )
        except http_client.HttpError as exc:
            raise http_client.send_error(exc, what) from exc
        return result, _json_object(result)


def _text(text: str) -> dict[str, str]:
    return {"msg_type": "text", "content": content_json(text)}


def _reply_key(message: OutboundMessage) -> str:
    """The same for every attempt at one reply (in any process: the outbox id is the row's), different between
    replies; with ``-<part>`` it is the ``uuid``."""
    identity = msgspec.json.encode(
        [
            message.outbox_id,  # two identical notices to one chat are still two replies
            message.account_id,
            message.chat_id,
            message.thread_id,
            message.session_id,
            message.reply_to,
            message.answers,
            message.text,
        ]
    )
    return hashlib.sha256(identity).hexdigest()[:40]
