"""Replies to DingTalk conversations: through the message's session webhook while it is valid, else the robot API.

Every callback's :class:`~platforms.dingtalk.callback.Route` is committed with its inbox row (as the poll cursor
of the conversation), so the sender finds it by robot and conversation, also after a restart. While the session
webhook has more than a minute left and is DingTalk's (:func:`~platforms.dingtalk.webhook.webhook_problem`; a
route stored before that check may name any URL, and is then not used), a part is ``POST``-ed there as
``{"msgtype": "text", ...}`` (errcode 130101: too fast, retried after half a minute; any other errcode sends the
part through the API instead). Otherwise it goes through the robot send API with an access token from
``POST /v1.0/oauth2/accessToken``, cached until a few minutes before its ``expireIn``:
``/v1.0/robot/oToMessages/batchSend`` to the sender of a one-to-one conversation, ``/v1.0/robot/groupMessages/send``
to a group, header ``x-acs-dingtalk-access-token``. A 401 fetches a new token once; 429 and throttling codes become
``SendError(retry_after_s=...)``; other 4xx answers (the robot left the group, a user who is not staff) give the
reply up with DingTalk's code and message.

A reply carrying a document (``/save``) is sent as its text: the robot API's file message (``sampleFile``) needs
media uploaded to ``oapi.dingtalk.com``, another host than ``api_base_url``, and takes only Office, PDF, ZIP and RAR
files, and a session webhook takes no files.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from hermes_actors.messages import OutboundMessage
from platforms.base import ChatInbox, SendError
from platforms.dingtalk.callback import PLATFORM, Route, decode_route, route_key
from platforms.dingtalk.config import RobotKeys
from platforms.dingtalk.webhook import webhook_problem
from platforms.support import http_client
from platforms.support.progress import PartProgress
from platforms.support.ratelimit import Rate, RateLimiter
from platforms.support.text import split_message
from platforms.support.tokens import TokenCache

__all__ = ["GROUP_PATH", "MAX_TEXT_CHARS", "ONE_TO_ONE_PATH", "TOKEN_PATH", "DingtalkSender"]

_log = logging.getLogger(__name__)

TOKEN_PATH = "/v1.0/oauth2/accessToken"
ONE_TO_ONE_PATH = "/v1.0/robot/oToMessages/batchSend"
GROUP_PATH = "/v1.0/robot/groupMessages/send"
MAX_TEXT_CHARS = 5000
WEBHOOK_MARGIN_S = 60.0  # a session webhook this close to expiry is not used
_DEFAULT_EXPIRE_S = 7200.0
_DEFAULT_WAIT_S = 1.0
_WEBHOOK_TOO_FAST = 130101
_WEBHOOK_WAIT_S = 30.0  # a session webhook takes 20 messages a minute


def _json_object(result: http_client.HttpResult) -> dict[str, Any] | None:
    try:
        answer = result.json()
    except http_client.HttpError:
        return None
    return answer if isinstance(answer, dict) else None


def _throttled(result: http_client.HttpResult, answer: dict[str, Any] | None) -> bool:
    code = str(answer.get("code", "")) if answer is not None else ""
    return result.status == 429 or "throttl" in code.lower() or "qpslimit" in code.lower()


class _Tokens(TokenCache[RobotKeys]):
    """Access tokens per robot, cached until shortly before they expire (thread-safe)."""

    def __init__(self, base_url: str, *, clock: Callable[[], float], timeout_s: float) -> None:
        super().__init__(clock=clock)
        self._base_url = base_url
        self._timeout = timeout_s

    def _fetch(self, robot: RobotKeys) -> tuple[str, float]:
        what = f"dingtalk robot '{robot.name}': access token"
        body = {"appKey": robot.app_key, "appSecret": robot.app_secret}
        try:
            result = http_client.request("POST", self._base_url + TOKEN_PATH, json_body=body, timeout=self._timeout)
        except http_client.HttpError as exc:
            raise SendError(f"{what}: {exc}; it will be retried") from exc
        answer = _json_object(result)
        token = answer.get("accessToken") if answer is not None else None
        if result.status == 200 and isinstance(token, str) and token:
            expire = answer.get("expireIn") if answer is not None else None
            valid = isinstance(expire, int) and not isinstance(expire, bool) and expire > 0
            return token, float(expire) if valid and isinstance(expire, int) else _DEFAULT_EXPIRE_S
        if _throttled(result, answer):
            wait = http_client.retry_after_seconds(result.headers.get("retry-after")) or _DEFAULT_WAIT_S
            raise SendError(f"{what}: asked to slow down (HTTP {result.status})", retry_after_s=wait)
        raise SendError(
            f"{what}: refused (HTTP {result.status}: {result.excerpt()!r}); check app_key and app_secret of "
            f"platforms.dingtalk.robots.{robot.name}; it will be retried"
        )


class DingtalkSender:
    """Sends replies for every configured robot (the robot name is the reply's ``account_id``)."""

    platform = PLATFORM
    idempotent_sends = False

    def __init__(
        self,
        robots: Mapping[str, RobotKeys],
        *,
        api_base_url: str,
        clock: Callable[[], float] = time.time,
        timeout_s: float = 10.0,
        chat_rate: Rate | None = None,
    ) -> None:
        self._robots = robots
        self._base_url = api_base_url.rstrip("/")
        self._clock = clock
        self._timeout = timeout_s
        self._tokens = _Tokens(self._base_url, clock=clock, timeout_s=timeout_s)
        self._limits = RateLimiter(per_key=chat_rate or Rate(per_second=20 / 60, burst=20))
        self._progress: PartProgress[str] = PartProgress()
        self._inbox: ChatInbox | None = None

    def attach(self, inbox: ChatInbox) -> None:
        """Read conversations' routes from ``inbox`` (the adapter calls this when it starts)."""
        self._inbox = inbox

    @property
    def api_base_url(self) -> str:
        """Where the DingTalk API is (without a trailing slash)."""
        return self._base_url

    def access_token(self, robot: str, refused: str | None = None) -> str:
        """Robot ``robot``'s access token, cached or fetched (so this may block); ``refused``, one DingTalk just
        refused, is dropped first. Raises :class:`SendError` (file downloads share the cache with the sends)."""
        keys = self._robots.get(robot)
        if keys is None:
            raise SendError(f"dingtalk: no robot {robot!r} is configured", permanent=True)
        if refused is not None:
            self._tokens.forget(keys, refused)
        return self._tokens.get(keys)

    def route(self, robot: str, conversation_id: str) -> Route | None:
        """The stored route of a conversation, or ``None`` when no callback from it was committed."""
        if self._inbox is None:
            return None
        text = self._inbox.poll_cursor(PLATFORM, route_key(robot, conversation_id))
        return decode_route(text) if text is not None else None

    def send(self, message: OutboundMessage) -> str | None:
        """Post ``message`` (split at 5,000 characters, resuming after parts already sent); return the first
        part's id (``processQueryKey``, or ``webhook`` for a part sent through the session webhook)."""
        robot = self._robots.get(message.account_id)
        if robot is None:
            raise SendError(
                f"dingtalk: the reply is for robot {message.account_id!r}, which is not configured", permanent=True
            )
        if not message.text.strip():
            return None
        what = f"dingtalk robot '{robot.name}': reply to conversation {message.chat_id}"
        route = self.route(robot.name, message.chat_id) if message.chat_id else None
        if route is None:
            raise SendError(f"{what}: no callback from this conversation is stored to reply to", permanent=True)
        sent = self._progress.sent(message)
        parts = split_message(message.text, MAX_TEXT_CHARS)
        for part in parts[len(sent) :]:
            self._limits.acquire(route.conversation_id)
            sent.append(self._send_part(robot, route, part, what))
            self._progress.remember(message, sent)
        self._progress.forget(message)
        return sent[0] if sent else None

    def _send_part(self, robot: RobotKeys, route: Route, text: str, what: str) -> str:
        webhook, expires = route.webhook, route.webhook_expires_at
        if webhook is not None and expires is not None and self._clock() < expires - WEBHOOK_MARGIN_S:
            problem = webhook_problem(webhook, self._base_url)
            if problem is None:
                if self._webhook(webhook, text, what):
                    return "webhook"
            else:
                _log.warning("%s: the stored session webhook is not used (%s); using the robot API", what, problem)
        return self._robot_api(robot, route, text, what)

    def _webhook(self, url: str, text: str, what: str) -> bool:
        """Post ``text`` to a session webhook; ``False`` when DingTalk refused it there (the API is tried)."""
        body = {"msgtype": "text", "text": {"content": text}}
        try:
            result = http_client.request("POST", url, json_body=body, timeout=self._timeout)
        except http_client.HttpError as exc:
            raise http_client.send_error(exc, f"{what} (session webhook)") from exc
        if result.status == 429 or result.status >= 500:
            raise http_client.status_error(result, f"{what} (session webhook)")
        answer = _json_object(result)
        errcode = answer.get("errcode") if answer is not None else None
        if result.status == 200 and errcode == 0:
            return True
        if errcode == _WEBHOOK_TOO_FAST:
            raise SendError(
                f"{what}: the session webhook says too fast (errcode 130101)", retry_after_s=_WEBHOOK_WAIT_S
            )
        _log.info(
            "%s: the session webhook refused it (HTTP %d, errcode %s); using the robot API",
            what,
            result.status,
            errcode,
        )
        return False

    def _robot_api(self, robot: RobotKeys, route: Route, text: str, what: str) -> str:
        body: dict[str, Any] = {
            "robotCode": robot.robot_code,
            "msgKey": "sampleText",
            "msgParam": msgspec.json.encode({"content": text}).decode(),
        }
        if route.chat_type == "group":
            path = GROUP_PATH
            body["openConversationId"] = route.conversation_id
        elif route.user_id:
            path = ONE_TO_ONE_PATH
            body["userIds"] = [route.user_id]
        else:
            raise SendError(
                f"{what}: the session webhook expired and the sender has no staff id for the robot API",
                permanent=True,
            )
        token = self._tokens.get(robot)
        result = self._post(path, body, token, what)
        if result.status == 401:
            _log.info("dingtalk robot %r: the access token was refused; fetching a new one", robot.name)
            self._tokens.forget(robot, token)
            result = self._post(path, body, self._tokens.get(robot), what)
        return self._answer(result, route, what)

    def _post(self, path: str, body: dict[str, Any], token: str, what: str) -> http_client.HttpResult:
        headers = {"x-acs-dingtalk-access-token": token}
        try:
            return http_client.request(
                "POST", self._base_url + path, json_body=body, headers=headers, timeout=self._timeout
            )
        except http_client.HttpError as exc:
            raise http_client.send_error(exc, what) from exc

    def _answer(self, result: http_client.HttpResult, route: Route, what: str) -> str:
        answer = _json_object(result)
        if _throttled(result, answer):
            wait = http_client.retry_after_seconds(result.headers.get("retry-after")) or _DEFAULT_WAIT_S
            raise SendError(f"{what}: asked to slow down (HTTP {result.status})", retry_after_s=wait)
        if result.status >= 500 or answer is None:
            raise http_client.status_error(result, what)
        if result.status != 200:
            raise SendError(
                f"{what}: refused with HTTP {result.status} ({answer.get('code')}: {answer.get('message')!s:.200})",
                permanent=result.status in (400, 403, 404),
            )
        if route.user_id in (answer.get("flowControlledStaffIdList") or ()):
            raise SendError(f"{what}: the user is flow-controlled by DingTalk", retry_after_s=_WEBHOOK_WAIT_S)
        if route.user_id in (answer.get("invalidStaffIdList") or ()):
            raise SendError(f"{what}: DingTalk says {route.user_id} is not a valid staff id", permanent=True)
        key = answer.get("processQueryKey")
        if not isinstance(key, str) or not key:
            raise SendError(f"{what}: the answer has no processQueryKey", outcome_unknown=True)
        return key
