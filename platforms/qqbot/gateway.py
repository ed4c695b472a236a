"""The WebSocket gateway of each bot in ``websocket`` mode: hello, heartbeats, identify or resume, dispatches.

One :class:`BotGateway` per bot, all on one background event loop (the adapter's ``Connections``). A connection
goes: the URL from ``GET {api_base_url}/gateway``; ``op 10`` Hello gives ``heartbeat_interval``; ``op 2`` Identify
(``token`` ``QQBot <access token>``, ``intents``, ``shard`` [0, 1]) starts a session that ``READY`` names
(``session_id``), or ``op 6`` Resume (``session_id``, ``seq``) continues one, QQ replaying every event after ``seq``
and then sending ``RESUMED``; ``op 1`` heartbeats carry the last ``s``, each answered by ``op 11``. ``op 7`` asks
for a reconnect (resume); ``op 9`` invalidates the session (identify anew).

Nothing received is lost: a message event counts as received only once ``inbox.accept_many`` has committed it
together with the session id and its ``s`` (the resume state, the bot's poll cursor, account = AppID), so a drop, a
failed commit or a crash resumes from the last committed event and QQ replays the rest; a replayed message the inbox
holds is recognised by its ``id``. Close codes that reconnecting cannot fix (intents refused, the bot banned or
offline) stop the bot with the fix in ``connection_problem``; 4006, 4007 and 4009 start a new session; 4004 fetches
a new access token. Other failures reconnect with exponential backoff and jitter.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import aiohttp
import msgspec

from hermes_actors.ports import PollCursor, SendError, accept_many_async
from platforms.qqbot.config import QqbotConfig, ResolvedBot
from platforms.qqbot.events import (
    MESSAGE_EVENTS,
    PLATFORM,
    Envelope,
    decode_envelope,
    decode_message,
    inbound_of,
    skip_reason,
)
from platforms.qqbot.files import attach_files
from platforms.qqbot.token import AccessTokens
from platforms.support import http_client
from platforms.support.connections import Connection, Ended, Fatal, doubling
from platforms.support.http_host import Refused
from platforms.support.links import Links

if TYPE_CHECKING:
    from hermes_actors.ports import ChatInbox

__all__ = ["FATAL_CLOSES", "NEW_SESSION_CLOSES", "BotGateway", "ResumeState"]

_log = logging.getLogger(__name__)

FATAL_CLOSES = {
    4013: "QQ refused the intents; check platforms.qqbot.intents",
    4014: "the bot may not use these intents; ask for them on the QQ open platform or change platforms.qqbot.intents",
    4914: "the bot is offline or limited to its sandbox; publish it or use the sandbox API base URL",
    4915: "QQ has banned the bot",
}
NEW_SESSION_CLOSES = {4006: "the session is not valid", 4007: "the seq was refused", 4009: "the session timed out"}
_TOKEN_CLOSE = 4004
_CLOSE_TIMEOUT_S = 2.0


class ResumeState(msgspec.Struct, frozen=True, kw_only=True):
    """What resuming a session needs, stored as the bot's poll cursor with the inbox rows it covers."""

    session_id: str
    seq: int | None


class _Hello(msgspec.Struct, frozen=True, kw_only=True):
    heartbeat_interval: int


class _Ready(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str


class BotGateway(Connection):
    """The gateway session of one bot, feeding ``inbox``: an attempt is one connection (identify or resume); one
    that was up for a while ends with a quick reconnect, failures in a row back off."""

    stable_s = 5.0
    stable_end_counts = False
    expected = (aiohttp.ClientError, OSError, TimeoutError, ValueError, SendError, Refused)

    def __init__(
        self,
        bot: ResolvedBot,
        tokens: AccessTokens,
        inbox: ChatInbox,
        config: QqbotConfig,
        links: Links,
        *,
        clock: Callable[[], float],
        rng: random.Random,
    ) -> None:
        super().__init__(bot.name, inbox, who=f"qqbot app {bot.app_id}", links=links, log=_log)
        self.bot = bot
        self._tokens = tokens
        self._config = config
        self._clock = clock
        self._rng = rng
        self._resume = self._stored()
        self._seq = self._resume.seq if self._resume is not None else None
        self._acked = True
        self._busy = False  # a frame is being handled: frames behind it (ACKs among them) wait unread
        self._http: aiohttp.ClientSession | None = None

    def _stored(self) -> ResumeState | None:
        stored = self.inbox.poll_cursor(PLATFORM, self.bot.app_id)
        if stored is None:
            return None
        try:
            return msgspec.json.decode(stored, type=ResumeState)
        except (msgspec.DecodeError, msgspec.ValidationError):
            _log.warning("qqbot app %s: the stored session does not decode; starting a new one", self.bot.app_id)
            return None

    def _cursor(self, state: ResumeState) -> PollCursor:
        return PollCursor(platform=PLATFORM, cursor=msgspec.json.encode(state).decode(), account_id=self.bot.app_id)

    async def attempt(self, http: aiohttp.ClientSession) -> Ended:
        self._http = http
        await self._connect(http)
        return Ended("the connection closed")

    def backoff(self, failures: int) -> float:
        return doubling(failures, self._config.reconnect_min_s, self._config.reconnect_max_s, self._rng)

    async def _gateway_url(self, header: dict[str, str]) -> str:
        url = f"{self._config.api_base}/gateway"
        result = await asyncio.to_thread(
            http_client.request, "GET", url, headers=header, timeout=self._config.http_timeout_s
        )
        if result.status == 401:
            self._tokens.forget()
        found = result.json() if result.status == 200 else None
        if not isinstance(found, dict) or not isinstance(found.get("url"), str):
            raise Ended(f"GET /gateway answered HTTP {result.status}: {result.excerpt()!r}")
        return str(found["url"])

    async def _connect(self, http: aiohttp.ClientSession) -> None:
        header = await asyncio.to_thread(self._tokens.header)
        url = await self._gateway_url(header)
        timeout = aiohttp.ClientWSTimeout(ws_receive=None, ws_close=_CLOSE_TIMEOUT_S)
        async with http.ws_connect(url, timeout=timeout, autoclose=False, max_msg_size=4 * 1024 * 1024) as ws:
            try:
                hello = await self._hello(ws)
                token = header["Authorization"]
                if self._resume is not None:
                    resume = {"token": token, "session_id": self._resume.session_id, "seq": self._seq}
                    await self._send(ws, {"op": 6, "d": resume})
                else:
                    identify = {"token": token, "intents": self._config.intents, "shard": [0, 1], "properties": {}}
                    await self._send(ws, {"op": 2, "d": identify})
                self._acked = True
                beat = asyncio.create_task(self._heartbeat(ws, hello.heartbeat_interval / 1000))
                try:
                    await self._read(ws)
                finally:
                    beat.cancel()
                    await asyncio.gather(beat, return_exceptions=True)
            finally:
                if not ws.closed:
                    await ws.close(code=4000)

    async def _hello(self, ws: aiohttp.ClientWebSocketResponse) -> _Hello:
        message = await ws.receive(timeout=self._config.hello_timeout_s)
        if message.type is not aiohttp.WSMsgType.TEXT:
            self._closed(ws.close_code, message.extra)
            raise Ended(f"expected Hello, got a {message.type.name} frame")
        frame = decode_envelope(message.data.encode())
        if frame.op != 10:
            raise Ended(f"expected Hello (op 10) first, got op {frame.op}")
        try:
            return msgspec.json.decode(bytes(frame.d), type=_Hello)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise Ended(f"the Hello cannot be read ({exc})") from None

    async def _send(self, ws: aiohttp.ClientWebSocketResponse, payload: dict[str, Any]) -> None:
        await ws.send_str(msgspec.json.encode(payload).decode())

    async def _heartbeat(self, ws: aiohttp.ClientWebSocketResponse, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            if not self._acked and not self._busy:
                _log.warning("qqbot app %s: no heartbeat ACK within %.1f s; reconnecting", self.bot.app_id, interval)
                await ws.close(code=4000)
                return
            self._acked = False
            await self._send(ws, {"op": 1, "d": self._seq})

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        while True:
            message = await ws.receive()
            if message.type is aiohttp.WSMsgType.TEXT:
                self._acked, self._busy = True, True  # a frame arrived: the connection is alive
                try:
                    await self._frame(ws, message.data)
                finally:
                    self._busy = False
            elif message.type is aiohttp.WSMsgType.BINARY:
                _log.warning("qqbot app %s: ignored a binary gateway frame", self.bot.app_id)
            elif message.type is aiohttp.WSMsgType.ERROR:
                raise Ended(f"the connection broke ({message.data})")
            else:
                self._closed(ws.close_code, message.extra)

    def _closed(self, code: int | None, reason: object) -> None:
        said = f"{code}" + (f" {str(reason)[:100]!r}" if reason else "")
        if code in FATAL_CLOSES:
            raise Fatal(f"QQ closed the connection ({said}): {FATAL_CLOSES[code]}")
        if code in NEW_SESSION_CLOSES:
            self._forget_session()
            raise Ended(f"QQ closed the connection ({said}: {NEW_SESSION_CLOSES[code]})")
        if code == _TOKEN_CLOSE:
            self._tokens.forget()
            raise Ended(f"QQ closed the connection ({said}: the access token was refused)", wait_s=0.0)
        raise Ended(f"the connection closed ({said})")

    def _forget_session(self) -> None:
        self._resume = None
        self._seq = None

    async def _frame(self, ws: aiohttp.ClientWebSocketResponse, text: str) -> None:
        try:
            frame = decode_envelope(text.encode())
        except Refused as exc:
            _log.warning("qqbot app %s: ignored a gateway frame: %s", self.bot.app_id, exc.reason)
            return
        match frame.op:
            case 0:
                await self._dispatch(frame)
            case 7:
                raise Ended("QQ asked for a reconnect (op 7)", wait_s=0.0)
            case 9:
                self._forget_session()
                raise Ended("QQ invalidated the session (op 9)", wait_s=1.0)
            case 11:
                self._acked = True
            case _:
                _log.debug("qqbot app %s: ignored op %d", self.bot.app_id, frame.op)

    async def _dispatch(self, frame: Envelope) -> None:
        if frame.t == "READY":
            try:
                ready = msgspec.json.decode(bytes(frame.d), type=_Ready)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise Ended(f"READY cannot be read ({exc})") from None
            self._resume, self._seq = ResumeState(session_id=ready.session_id, seq=frame.s), frame.s
            self.connected()
            _log.info("qqbot app %s: connected, session %s", self.bot.app_id, ready.session_id)
            try:
                await accept_many_async(self.inbox, [], cursor=self._cursor(self._resume))
            except Exception as exc:  # the next committed message stores the session with it
                _log.warning("qqbot app %s: could not store the new session (%s)", self.bot.app_id, exc)
        elif frame.t == "RESUMED":
            self.connected()
            _log.info("qqbot app %s: resumed the session at seq %s", self.bot.app_id, self._seq)
        elif frame.t in MESSAGE_EVENTS:
            await self._message(frame)
        if frame.s is not None:
            self._seq = frame.s

    async def _message(self, frame: Envelope) -> None:
        event = frame.t or ""
        try:
            message = decode_message(frame)
        except Refused as exc:
            _log.warning("qqbot app %s: skipped event %s (s %s): %s", self.bot.app_id, event, frame.s, exc.reason)
            return
        skipped = skip_reason(event, message)
        if skipped is not None:
            _log.info("qqbot app %s: skipped message %s: %s", self.bot.app_id, message.id, skipped)
            return
        inbound = inbound_of(event, message, app_id=self.bot.app_id, received_at=self._clock())
        if message.attachments:
            inbound = await attach_files(
                inbound,
                message.attachments,
                media=self.inbox.media,
                fetch=self._config.fetch_policy,
                timeout_s=self._config.http_timeout_s,
            )
        cursor = None
        if self._resume is not None and frame.s is not None:
            cursor = self._cursor(ResumeState(session_id=self._resume.session_id, seq=frame.s))
        try:
            (result,) = await accept_many_async(self.inbox, [inbound], cursor=cursor)
        except Exception as exc:
            _log.exception("qqbot app %s: could not store message %s", self.bot.app_id, message.id)
            raise Ended(f"message {message.id} could not be stored ({exc})") from exc
        if result.duplicate:
            _log.info("qqbot app %s: message %s was already stored (a replayed event)", self.bot.app_id, message.id)
