"""Replies through WeCom's ``cgi-bin/message/send``, with ``gettoken`` access tokens cached and refreshed per app.

A reply goes to the user it answers (``touser``) from the app (``agentid``) as ``msgtype: text``, split at 2,048
bytes (WeCom's limit for a text message). Tokens come from ``GET /cgi-bin/gettoken?corpid=&corpsecret=`` and are
reused until five minutes before ``expires_in``; errcode 42001 (expired), 40014 or 40001 (invalid) fetches a new
one and tries once more. 45009 (API frequency limit) and -1 (system busy) become
``SendError(retry_after_s=...)``; errcodes that no retry can change (an unknown user, an agent the user cannot
see, an IP not on the app's allow-list) give the reply up with WeCom's code and message.

A reply carrying a document (``/save``) is uploaded as temporary media (``POST /cgi-bin/media/upload?type=file``,
the file as ``media``) and sent as one ``msgtype: file`` message (a file message has no caption) with WeCom's
duplicate check on; a file WeCom refuses sends the reply's text instead (:mod:`platforms.support.documents`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlencode

from hermes_actors.messages import OutboundDocument, OutboundMessage
from platforms.base import SendError
from platforms.support import http_client
from platforms.support.documents import FormFile, UploadFailed, before_posting, form_data, posting_failed, send_document
from platforms.support.progress import PartProgress
from platforms.support.ratelimit import Rate, RateLimiter
from platforms.support.text import split_message
from platforms.support.tokens import TokenCache
from platforms.wecom.callback import PLATFORM
from platforms.wecom.config import AppKeys

__all__ = ["MAX_TEXT_BYTES", "SEND_PATH", "TOKEN_INVALID", "TOKEN_PATH", "UPLOAD_PATH", "WecomSender"]

_log = logging.getLogger(__name__)

TOKEN_PATH = "/cgi-bin/gettoken"
SEND_PATH = "/cgi-bin/message/send"
UPLOAD_PATH = "/cgi-bin/media/upload"
MAX_TEXT_BYTES = 2048
TOKEN_INVALID = frozenset({42001, 40014, 40001})
_DUPLICATE_CHECK = {"enable_duplicate_check": 1, "duplicate_check_interval": 3600}
_RATE_LIMITED = {45009: 60.0, 45033: 5.0, -1: 1.0}  # errcode -> seconds to wait
_PERMANENT = {
    40003: "the user id is not in the corp",
    81013: "no valid recipient (the user left the corp or cannot see the app)",
    60020: "this server's IP is not on the app's trusted IP list",
    60011: "the app may not message this user (visibility)",
    40056: "the agent id is not valid",
    48002: "the API is forbidden for this app",
}


class _Tokens(TokenCache[AppKeys]):
    """Access tokens per app, cached until shortly before they expire (thread-safe)."""

    def __init__(self, base_url: str, *, clock: Callable[[], float], timeout_s: float) -> None:
        super().__init__(clock=clock)
        self._base_url = base_url
        self._timeout = timeout_s

    def _fetch(self, app: AppKeys) -> tuple[str, float]:
        what = f"wecom app '{app.name}': gettoken"
        url = f"{self._base_url}{TOKEN_PATH}?{urlencode({'corpid': app.corp_id, 'corpsecret': app.secret})}"
        try:
            result = http_client.request("GET", url, timeout=self._timeout)
        except http_client.HttpError as exc:
            raise SendError(f"{what}: {exc}; it will be retried") from exc
        answer = _json_object(result)
        code = answer.get("errcode") if answer is not None else None
        token = answer.get("access_token") if answer is not None else None
        if code == 0 and isinstance(token, str) and token:
            expire = answer.get("expires_in") if answer is not None else None
            valid = isinstance(expire, int) and not isinstance(expire, bool) and expire > 0
            return token, float(expire) if valid and isinstance(expire, int) else 7200.0
        if isinstance(code, int) and code in _RATE_LIMITED:
            raise SendError(f"{what}: asked to slow down (errcode {code})", retry_after_s=_RATE_LIMITED[code])
        said = answer.get("errmsg") if answer is not None else result.excerpt()
        raise SendError(
            f"{what}: refused (HTTP {result.status}, errcode {code}: {said!s:.200}); check corp_id and secret of "
            f"platforms.wecom.apps.{app.name}; it will be retried"
        )


def _json_object(result: http_client.HttpResult) -> dict[str, Any] | None:
    try:
        answer = result.json()
    except http_client.HttpError:
        return None
    return answer if isinstance(answer, dict) else None


def _bytes(text: str) -> int:
    return len(text.encode())


class WecomSender:
    """Sends replies for every configured app (the app name is the reply's ``account_id``)."""

    platform = PLATFORM
    idempotent_sends = False

    def __init__(
        self,
        apps: Mapping[str, AppKeys],
        *,
        api_base_url: str,
        clock: Callable[[], float] = time.time,
        timeout_s: float = 10.0,
        user_rate: Rate | None = None,
    ) -> None:
        self._apps = apps
        self._base_url = api_base_url.rstrip("/")
        self._timeout = timeout_s
        self._tokens = _Tokens(self._base_url, clock=clock, timeout_s=timeout_s)
        self._limits = RateLimiter(per_key=user_rate or Rate(per_second=5.0, burst=5.0))
        self._progress: PartProgress[str] = PartProgress()
        self._uploads: PartProgress[str] = PartProgress()  # the media id of each reply's file not yet shown

    @property
    def base_url(self) -> str:
        """Where the WeCom API is (without a trailing slash)."""
        return self._base_url

    def token(self, account_id: str, refused: str | None = None) -> str:
        """App ``account_id``'s access token (cached or fetched); ``refused``, one WeCom refused, is replaced."""
        app = self._apps.get(account_id)
        if app is None:
            raise SendError(f"wecom: no app {account_id!r} is configured", permanent=True)
        if refused is not None:
            self._tokens.forget(app, refused)
        return self._tokens.get(app)

    def send(self, message: OutboundMessage) -> str | None:
        """Send ``message`` to its user (split at 2,048 bytes, resuming after parts already sent); return the
        first part's ``msgid``."""
        app = self._apps.get(message.account_id)
        if app is None:
            raise SendError(
                f"wecom: the reply is for app {message.account_id!r}, which is not configured", permanent=True
            )
        user = message.chat_id
        if not user:
            raise SendError(f"wecom app '{app.name}': the reply names no user", permanent=True)
        what = f"wecom app '{app.name}': reply to {user}"
        return send_document(
            message,
            lambda document: self._send_file(app, user, message, document, what),
            lambda: self._send_text(app, user, message, what),
            what,
        )

    def _send_text(self, app: AppKeys, user: str, message: OutboundMessage, what: str) -> str | None:
        if not message.text.strip():
            return None
        sent = self._progress.sent(message)
        parts = split_message(message.text, MAX_TEXT_BYTES, length=_bytes)
        for part in parts[len(sent) :]:
            self._limits.acquire(f"{app.name}:{user}")
            sent.append(self._send_part(app, user, {"msgtype": "text", "text": {"content": part}}, what))
            self._progress.remember(message, sent)
        self._progress.forget(message)
        return sent[0] if sent else None

    def _send_file(
        self, app: AppKeys, user: str, message: OutboundMessage, document: OutboundDocument, what: str
    ) -> str:
        """Upload ``document`` as temporary media (once per reply in this process), then one ``file`` message with
        WeCom's duplicate check, so a retry of the same media within the hour is dropped."""
        uploaded = self._uploads.sent(message)
        if not uploaded:
            with before_posting(what):
                uploaded = [self._upload(app, document, what)]
            self._uploads.remember(message, uploaded)
        self._limits.acquire(f"{app.name}:{user}")
        content = {"msgtype": "file", "file": {"media_id": uploaded[0]}, **_DUPLICATE_CHECK}
        try:
            msgid = self._send_part(app, user, content, what)
        except SendError as exc:
            raise posting_failed(exc) from None
        self._uploads.forget(message)
        return msgid

    def _upload(self, app: AppKeys, document: OutboundDocument, what: str) -> str:
        file = FormFile(field="media", name=document.name, mime_type=document.mime_type, data=document.data)
        form = form_data({}, [file])
        token = self._tokens.get(app)
        result, answer = self._post_upload(form, token, what)
        if answer is not None and answer.get("errcode") in TOKEN_INVALID:
            self._tokens.forget(app, token)
            result, answer = self._post_upload(form, self._tokens.get(app), what)
        code = answer.get("errcode") if answer is not None else None
        media_id = answer.get("media_id") if answer is not None and code == 0 else None
        if isinstance(media_id, str) and media_id:
            return media_id
        said = answer.get("errmsg") if answer is not None else result.excerpt()
        raise UploadFailed(f"{what}: the file upload was refused (HTTP {result.status}, errcode {code}: {said!s:.200})")

    def _post_upload(
        self, form: tuple[bytes, str], token: str, what: str
    ) -> tuple[http_client.HttpResult, dict[str, Any] | None]:
        url = f"{self._base_url}{UPLOAD_PATH}?{urlencode({'access_token': token, 'type': 'file'})}"
        body, content_type = form
        try:
            result = http_client.request(
                "POST", url, body=body, headers={"content-type": content_type}, timeout=self._timeout
            )
        except http_client.HttpError as exc:
            raise UploadFailed(f"{what}: the file upload failed ({exc.reason})") from None
        return result, _json_object(result)

    def _send_part(self, app: AppKeys, user: str, content: dict[str, Any], what: str) -> str:
        body = {"touser": user, "agentid": app.agent_id, **content}
        token = self._tokens.get(app)
        result, answer = self._post(body, token, what)
        code = answer.get("errcode") if answer is not None else None
        if code in TOKEN_INVALID:
            _log.info("wecom app %r: the access token was refused (errcode %s); fetching a new one", app.name, code)
            self._tokens.forget(app, token)
            result, answer = self._post(body, self._tokens.get(app), what)
        return _msgid(result, answer, user, what)

    def _post(
        self, body: dict[str, Any], token: str, what: str
    ) -> tuple[http_client.HttpResult, dict[str, Any] | None]:
        url = f"{self._base_url}{SEND_PATH}?{urlencode({'access_token': token})}"
        try:
            result = http_client.request("POST", url, json_body=body, timeout=self._timeout)
        except http_client.HttpError as exc:
            raise http_client.send_error(exc, what) from exc
        return result, _json_object(result)


def _msgid(result: http_client.HttpResult, answer: dict[str, Any] | None, user: str, what: str) -> str:
    if result.status != 200 or answer is None:
        raise http_client.status_error(result, what)
    code, said = answer.get("errcode"), f"{answer.get('errmsg')!s:.200}"
    if isinstance(code, int) and code in _RATE_LIMITED:
        raise SendError(f"{what}: asked to slow down (errcode {code}: {said})", retry_after_s=_RATE_LIMITED[code])
    if isinstance(code, int) and code in _PERMANENT:
        raise SendError(f"{what}: refused with errcode {code} ({said}): {_PERMANENT[code]}", permanent=True)
    if code != 0:
        raise SendError(f"{what}: failed with errcode {code} ({said}); it will be retried")
    invalid = str(answer.get("invaliduser") or "").split("|")
    if user in invalid:
        raise SendError(
            f"{what}: WeCom lists {user} as an invalid user (not in the app's visible range)", permanent=True
        )
    msgid = answer.get("msgid")
    if not isinstance(msgid, str) or not msgid:
        raise SendError(f"{what}: the answer has no msgid", outcome_unknown=True)
    return msgid
