"""The DingTalk entry point: an HTTP server for every robot's callback URL (or, in stream mode, a WebSocket per
robot), and the sender of their replies.

A callback is acknowledged (HTTP 200) only once its message is committed to the inbox (with the conversation's
reply route, in the same transaction), or recognised as a repeat of a ``msgId`` already stored. Its ``timestamp``
and ``sign`` are checked first, then its body decoded, then the pair claimed for its ``msgId``
(:mod:`platforms.dingtalk.signatures`): DingTalk delivering a message again with the same headers is a duplicate,
while the same headers on another message are a replay. A request the adapter cannot use gets a small JSON
``{"error": ...}`` saying why: 404 unknown robot, 413 too large, 401 unsigned, badly signed, outside the one-hour
window or replayed, 400 malformed; 503 if the message (or its signature) could not be stored.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiohttp import web

from hermes_actors.errors import PlatformError
from platforms.base import Capabilities, ChatInbox, ReplySender
from platforms.dingtalk.accept import commit, with_files
from platforms.dingtalk.callback import PLATFORM, Ignored, Received, Signed, open_callback
from platforms.dingtalk.config import DingtalkConfig, RobotKeys, resolve_robots
from platforms.dingtalk.sender import TOKEN_PATH, DingtalkSender
from platforms.dingtalk.signatures import Claim, Signatures
from platforms.dingtalk.stream import OPEN_PATH, StreamConnection
from platforms.support.connections import Connections
from platforms.support.credentials import fetch_json
from platforms.support.http_client import shown
from platforms.support.http_host import HttpAdapter, Refused
from platforms.support.ratelimit import Rate

__all__ = ["DingtalkAdapter"]

_log = logging.getLogger(__name__)


def _answer(status: int, body: dict[str, Any]) -> web.Response:
    return web.json_response(body, status=status)


def _refused(name: str, refused: Refused) -> web.Response:
    _log.warning("dingtalk robot %r: refused a request (%d %s)", name, refused.status, refused.reason)
    return _answer(refused.status, {"error": refused.reason})


class DingtalkAdapter(HttpAdapter[DingtalkConfig]):
    """Serves ``POST /dingtalk/robot/<name>`` for each robot of a :class:`DingtalkConfig` and sends their replies.

    Secrets named by ``*_env`` fields are read from ``environ`` (default ``os.environ``) here. ``clock`` stamps
    inbound messages, bounds the callbacks' timestamps and ages tokens and session webhooks.
    """

    _inbox: ChatInbox | None  # the port it is started with (``start``)
    platform = PLATFORM
    capabilities = Capabilities(max_message_chars=5000)
    server_name = "dingtalk"

    def __init__(
        self,
        config: DingtalkConfig,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(config)
        self._robots = resolve_robots(config, os.environ if environ is None else environ)
        self._clock = clock
        self._sender = DingtalkSender(
            self._robots,
            api_base_url=config.api_base_url,
            clock=clock,
            timeout_s=config.http_timeout_s,
            chat_rate=Rate(per_second=config.chat_messages_per_minute / 60, burst=config.chat_messages_per_minute),
        )
        self._rng = rng or random.Random()
        self._signatures: Signatures | None = None
        self._streams = Connections(
            "robot", self._robots, thread="hermes-dingtalk", label="dingtalk: the stream", log=_log
        )

    @property
    def sender(self) -> DingtalkSender:
        """The reply sender."""
        return self._sender

    def senders(self) -> Sequence[ReplySender]:
        """The sender of every robot's replies."""
        return [self._sender]

    def start(self, inbox: ChatInbox) -> None:
        """Serve the callback URLs, or open every robot's stream; the sender reads the conversations' routes from
        ``inbox``."""
        self._sender.attach(inbox)
        if self.config.mode == "callback":
            self._signatures = Signatures(inbox)
            self._serve(inbox)
            return
        self._inbox = inbox
        connections = [
            StreamConnection(
                robot,
                inbox,
                self._sender,
                self._streams.links,
                fetch=self.config.fetch_policy,
                timeout_s=self.config.http_timeout_s,
                clock=self._clock,
                rng=self._rng,
            )
            for robot in self._robots.values()
        ]
        if connections:
            self._streams.start(connections)

    def stop(self, timeout: float = 10.0) -> None:
        """Close the server or the streams."""
        self._streams.stop(timeout)
        super().stop(timeout)

    def _serves_http(self) -> bool:
        return self.config.mode == "callback"

    def connection_problem(self) -> str | None:
        """In stream mode, each robot whose stream is down, with its last error; ``None`` otherwise."""
        return self._streams.problem()

    def check_credentials(self, *, timeout_s: float) -> list[str]:
        """Ask every robot's access token: one line per robot; :class:`PlatformError` for one DingTalk refuses."""
        seen = []
        base = self.config.api_base_url.rstrip("/")
        for name, robot in self._robots.items():
            what = f"dingtalk robot {name!r}: accessToken"
            keys = {"appKey": robot.app_key, "appSecret": robot.app_secret}
            status, body = fetch_json(base + TOKEN_PATH, what=what, method="POST", body=keys, timeout_s=timeout_s)
            if status != 200 or not isinstance(body, dict) or not body.get("accessToken"):
                said = body.get("message") if isinstance(body, dict) else None
                raise PlatformError(f"{what} answered HTTP {status} ({said or 'no message'}); check app_key/app_secret")
            seen.append(f"robot {name!r} ({robot.app_key}) got an access token")
        return seen

    def _add_routes(self, app: web.Application) -> None:
        """Serve the callback URLs, ``POST /dingtalk/robot/<name>``."""
        app.router.add_post("/dingtalk/robot/{robot}", self._receive)

    def describe(self) -> list[str]:
        """One banner line per robot: its callback URL (or its stream) and where replies go."""
        if self.config.mode == "stream":
            return [
                f"DingTalk robot '{robot.name}' ({robot.robot_code}, {robot.origin}): stream mode, a WebSocket opened "
                f"through {shown(self.config.api_base_url)}{OPEN_PATH}; replies through the session webhook, else the "
                "robot API; pictures, files, audio and video are downloaded as attachments"
                for robot in self._robots.values()
            ] or ["DingTalk: stream mode has no robots; add one under platforms.dingtalk.robots (app_key, app_secret)"]
        if not self._robots:
            return [
                f"DingTalk: {self.url} has no robots; add one under platforms.dingtalk.robots (app_key, app_secret)"
            ]
        return [
            f"DingTalk robot '{robot.name}' ({robot.robot_code}): callbacks at POST {self.url}/dingtalk/robot/"
            f"{robot.name} (signed with the app secret, {robot.origin}); replies through the session webhook, "
            f"else {shown(self.config.api_base_url)}; files are downloaded as attachments"
            for robot in self._robots.values()
        ]

    async def _receive(self, request: web.Request) -> web.Response:
        name = request.match_info["robot"]
        try:
            robot = self._robots.get(name)
            if robot is None:
                raise Refused(404, f"no dingtalk robot {name!r}; add it under platforms.dingtalk.robots")
            body = await self._read_body(request)
            signed = open_callback(
                robot, request.headers, body, received_at=self._clock(), api_base_url=self._sender.api_base_url
            )
        except Refused as exc:
            return _refused(name, exc)
        try:
            claim = await self._claim(robot, signed)
        except Exception:
            _log.exception("dingtalk robot %r: could not store the signature of message %s", name, signed.message_id)
            return _answer(503, {"error": "the message could not be stored; deliver it again later"})
        if claim is Claim.REPLAYED:
            reason = "the timestamp and sign headers already carried another message (a replayed request)"
            return _refused(name, Refused(401, reason))
        opened = signed.opened
        if isinstance(opened, Ignored):
            _log.debug("dingtalk robot %r: ignored a callback (%s)", name, opened.reason)
            return _answer(200, {"ignored": opened.reason})
        return await self._accept(robot, opened, again=claim is Claim.AGAIN)

    async def _claim(self, robot: RobotKeys, signed: Signed) -> Claim:
        signatures, host = self._signatures, self._host
        if signatures is None or host is None:  # pragma: no cover - the server runs only after start()
            raise PlatformError("dingtalk: the adapter is not started")
        return await host.blocking(lambda: signatures.claim(robot.name, signed.timestamp_ms, signed.message_id))

    async def _accept(self, robot: RobotKeys, received: Received, *, again: bool) -> web.Response:
        inbox, host = self._inbox, self._host
        try:
            if inbox is None or host is None:  # pragma: no cover - the server runs only after start()
                raise PlatformError("dingtalk: the adapter is not started")

            async def token(refused: str | None) -> str:
                return await host.blocking(lambda: self._sender.access_token(robot.name, refused))

            received = await with_files(
                received,
                robot,
                inbox=inbox,
                api_base_url=self._sender.api_base_url,
                token=token,
                fetch=self.config.fetch_policy,
                timeout_s=self.config.http_timeout_s,
            )
            result = await commit(inbox, robot.name, received, again=again)
        except Exception:
            _log.exception("dingtalk robot %r: could not accept message %s", robot.name, received.inbound.message_id)
            return _answer(503, {"error": "the message could not be stored; deliver it again later"})
        return _answer(200, {"accepted": True, "duplicate": result.duplicate, "routing_key": result.routing_key})
