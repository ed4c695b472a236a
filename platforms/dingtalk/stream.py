"""DingTalk stream mode: one WebSocket per robot, opened through ``/v1.0/gateway/connections/open``.

The robot asks for a connection with its ``clientId`` (app key) and ``clientSecret`` and the subscription
``CALLBACK /v1.0/im/bot/messages/get``; DingTalk answers an ``endpoint`` and a one-time ``ticket``, and the socket
is ``endpoint?ticket=...``. Each frame is JSON: ``type`` (``SYSTEM``, ``EVENT`` or ``CALLBACK``), ``headers`` (the
``topic`` and ``messageId``) and ``data``, a JSON string. A robot message (``CALLBACK``) holds the same body as
an HTTP callback; it is acknowledged (``{"code": 200, "headers": {"messageId": ...}, "data": ...}``) only once it
is committed with its conversation's route, so a frame lost to a crash is delivered again and then recognised by
its ``msgId``. A frame that cannot be read is acknowledged with code 400 and logged (DingTalk would otherwise send it
again forever). ``SYSTEM ping`` is answered with its own data; ``SYSTEM disconnect`` (DingTalk moving the
connection) and any drop reconnect with a fresh ticket, after a jittered backoff when the attempt failed.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import aiohttp
import msgspec

from platforms.base import ChatInbox
from platforms.dingtalk.accept import commit, with_files
from platforms.dingtalk.callback import Ignored, decode_callback
from platforms.dingtalk.config import RobotKeys
from platforms.dingtalk.sender import DingtalkSender
from platforms.support.connections import Connection, Ended
from platforms.support.fetch_policy import FetchPolicy
from platforms.support.http_host import Refused
from platforms.support.links import Links

__all__ = ["OPEN_PATH", "ROBOT_TOPIC", "StreamConnection"]

_log = logging.getLogger(__name__)

OPEN_PATH = "/v1.0/gateway/connections/open"
ROBOT_TOPIC = "/v1.0/im/bot/messages/get"
_BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0)


class _Frame(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    headers: dict[str, Any] = {}
    data: str = ""


class _Opened(msgspec.Struct, frozen=True, kw_only=True):
    endpoint: str
    ticket: str


class _Refused(Exception):
    """DingTalk would not open a connection (an answer, not a network failure)."""


class StreamConnection(Connection):
    """One robot's stream: connect, read frames, commit messages, acknowledge them, reconnect. An attempt reopens
    the stream at once after each clean end (a ``disconnect`` frame)."""

    expected = (aiohttp.ClientError, TimeoutError, _Refused, OSError)

    def __init__(
        self,
        robot: RobotKeys,
        inbox: ChatInbox,
        sender: DingtalkSender,
        links: Links,
        *,
        fetch: FetchPolicy,
        timeout_s: float,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(robot.name, inbox, who=f"dingtalk robot {robot.name!r}", links=links, log=_log)
        self.robot = robot
        self._sender = sender
        self._fetch = fetch
        self._timeout = timeout_s
        self._clock = clock
        self._rng = rng or random.Random()

    async def attempt(self, http: aiohttp.ClientSession) -> Ended:
        while True:
            await self._session(http)

    def failure(self, exc: Exception) -> Ended:
        if isinstance(exc, self.expected):
            return Ended(" ".join(str(exc).split())[:200] or type(exc).__name__, error=exc)
        return super().failure(exc)

    def retrying(self, ended: Ended, wait: float) -> None:
        _log.warning("dingtalk robot %r: the stream failed (%s); reconnecting", self.name, ended.reason)

    def backoff(self, failures: int) -> float:
        return _BACKOFF_S[min(max(failures, 1), len(_BACKOFF_S)) - 1] * (0.5 + self._rng.random())

    async def _open(self, http: aiohttp.ClientSession) -> _Opened:
        body = {
            "clientId": self.robot.app_key,
            "clientSecret": self.robot.app_secret,
            "subscriptions": [{"type": "CALLBACK", "topic": ROBOT_TOPIC}],
            "ua": "hermes-actors",
        }
        url = self._sender.api_base_url + OPEN_PATH
        timeout = aiohttp.ClientTimeout(total=self._timeout)
        async with http.post(url, json=body, timeout=timeout) as answer:
            data = await answer.content.read(64 * 1024)
            if answer.status != 200:
                said = data[:200].decode("utf-8", "replace")
                raise _Refused(f"connections/open answered HTTP {answer.status}: {said}; check app_key and app_secret")
        try:
            return msgspec.json.decode(data, type=_Opened)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise _Refused(f"connections/open answered without endpoint and ticket ({exc})") from None

    async def _session(self, http: aiohttp.ClientSession) -> None:
        opened = await self._open(http)
        url = f"{opened.endpoint}{'&' if '?' in opened.endpoint else '?'}ticket={quote(opened.ticket, safe='')}"
        async with http.ws_connect(url, heartbeat=60.0, max_msg_size=4 * 1024 * 1024) as socket:
            self.connected()
            _log.info("dingtalk robot %r: the stream is connected", self.robot.name)
            async for message in socket:
                if message.type != aiohttp.WSMsgType.TEXT:
                    if message.type == aiohttp.WSMsgType.ERROR:
                        raise aiohttp.ClientError(f"the stream broke ({socket.exception()})")
                    continue
                if not await self._frame(socket, message.data):
                    return
        raise aiohttp.ClientError(f"the stream was closed (code {socket.close_code})")

    async def _frame(self, socket: aiohttp.ClientWebSocketResponse, text: str) -> bool:
        """Handle one frame; ``False`` when DingTalk asks to reconnect."""
        try:
            frame = msgspec.json.decode(text, type=_Frame)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            _log.warning("dingtalk robot %r: an unreadable stream frame (%s)", self.robot.name, exc)
            return True
        topic = str(frame.headers.get("topic", ""))
        if frame.type == "SYSTEM":
            if topic == "ping":
                await socket.send_str(_ack(frame, 200, "OK", frame.data))
            return topic != "disconnect"
        if frame.type == "CALLBACK" and topic == ROBOT_TOPIC:
            code, said = await self._message(frame)
            if code is not None:
                await socket.send_str(_ack(frame, code, said, '{"response": null}'))
            return True
        await socket.send_str(_ack(frame, 200, "OK", '{"status": "SUCCESS", "message": "not handled"}'))
        return True

    async def _message(self, frame: _Frame) -> tuple[int | None, str]:
        """Commit the message a frame holds: the code to acknowledge it with (``None``: not at all)."""
        robot = self.robot
        try:
            opened = decode_callback(
                robot, frame.data, received_at=self._clock(), api_base_url=self._sender.api_base_url
            )
        except Refused as exc:
            _log.warning("dingtalk robot %r: refused a stream message (%s)", robot.name, exc.reason)
            return 400, exc.reason
        if isinstance(opened, Ignored):
            return 200, opened.reason

        async def token(refused: str | None) -> str:
            return await asyncio.to_thread(self._sender.access_token, robot.name, refused)

        try:
            received = await with_files(
                opened,
                robot,
                inbox=self.inbox,
                api_base_url=self._sender.api_base_url,
                token=token,
                fetch=self._fetch,
                timeout_s=self._timeout,
            )
            await commit(self.inbox, robot.name, received)
        except Exception:  # not acknowledged: DingTalk delivers it again
            _log.exception("dingtalk robot %r: could not accept message %s", robot.name, opened.inbound.message_id)
            return None, ""
        return 200, "OK"


def _ack(frame: _Frame, code: int, message: str, data: str) -> str:
    headers = {"contentType": "application/json", "messageId": str(frame.headers.get("messageId", ""))}
    return msgspec.json.encode({"code": code, "headers": headers, "message": message, "data": data}).decode()
