"""The gateway websocket of each bot: hello, heartbeats, identify or resume, and dispatches into the inbox.

One :class:`Shard` per bot (shard 0 of 1; a bot in more than 2,500 guilds needs sharding, which is not built) and
one background event loop for all of them (``adapter.Shards``). A connection goes: ``op 10`` Hello gives the
heartbeat interval; ``op 1`` heartbeats carry the last sequence number, the first after a random fraction of the
interval; ``op 2`` Identify (token and intents) starts a session and ``READY`` names it (``session_id``,
``resume_gateway_url``); or ``op 6`` Resume (session id and last sequence) continues one and Discord replays every
event after that sequence, then sends ``RESUMED``. A heartbeat without an ``op 11`` ACK before the next one means a
zombie connection: it is closed and resumed. ``op 7`` asks for a reconnect (resume); ``op 9`` invalidates the
session (resume when ``d`` is true, else identify anew after Discord's 1 to 5 s).

Nothing received is lost: a ``MESSAGE_CREATE`` counts as received only once ``inbox.accept_many`` has committed it,
together with the session id and its sequence number (the resume state, kept as the bot's poll cursor). Only then
does the sequence advance, so a drop, a failed commit or a crash resumes from the last committed event and Discord
replays the rest; a replayed event the inbox already holds is recognised by its message id. The state survives a
restart: a new process resumes the stored session (Discord keeps it for a while), so messages sent while the
daemon was down are delivered too. Connections end with close code 4000, never 1000, which would end the session.

A message's attachments are downloaded into the media store before it is committed (:mod:`platforms.discord.files`),
so its inbox row already names them. Frames are handled in order, so the ones after it (heartbeat ACKs among them)
wait unread meanwhile: a missing ACK counts as a zombie connection only when no frame was being handled since the
heartbeat went out.

Close codes 4004 (token refused), 4010 to 4014 (shard, version, intents) cannot be fixed by reconnecting: the shard
logs the fix and stops. Other failures reconnect with exponential backoff (``reconnect_min_s`` to
``reconnect_max_s``, with jitter); after a connection that lasted a while, the first attempt is immediate. A
message that cannot be committed is backed off on its own count, so a full disk does not spin resumes.
"""

from __future__ import annotations

import asyncio
import logging
import random
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import aiohttp
import msgspec

from hermes_actors.messages import InboundMessage
from hermes_actors.ports import accept_many_async
from platforms.discord.config import DiscordConfig
from platforms.discord.events import (
    Channel,
    ChannelCache,
    EventError,
    Frame,
    GuildCreate,
    Hello,
    Message,
    Ready,
    Skipped,
    ThreadListSync,
    decode_data,
    decode_frame,
    inbound_from_message,
    skip_reason,
)
from platforms.discord.files import attach_files
from platforms.discord.rest import RestClient, RestError, find_channel, gateway_url, versioned
from platforms.discord.resume import (
    INTENTS,
    MESSAGE_CONTENT,
    RESUMABLE_CLOSE,
    ProtocolBroken,
    ResumeState,
    after_close,
    read_resume_state,
    resume_cursor,
)
from platforms.support.connections import Connection, Ended, doubling
from platforms.support.links import Links

if TYPE_CHECKING:
    from hermes_actors.ports import ChatInbox

__all__ = ["Shard"]

_log = logging.getLogger(__name__)

_CLOSE_TIMEOUT_S = 2.0  # how long a closing handshake may take before the socket is dropped
_STABLE_S = 5.0  # a connection that lasted this long resets the backoff: its drop is reconnected at once
_CHANNEL_EVENTS = frozenset({"CHANNEL_CREATE", "CHANNEL_UPDATE", "THREAD_CREATE", "THREAD_UPDATE"})


class Shard(Connection):
    """The gateway session of one bot, feeding ``inbox``: an attempt is one connection (identify or resume); one
    that was up for a while ends with a reconnect at once, failures in a row back off."""

    stable_s = _STABLE_S
    stable_end_counts = False
    expected = (aiohttp.ClientError, OSError, TimeoutError, ValueError, RestError, EventError, ProtocolBroken)

    def __init__(
        self,
        name: str,
        token: str,
        rest: RestClient,
        inbox: ChatInbox,
        config: DiscordConfig,
        cache: ChannelCache,
        links: Links,
        *,
        clock: Callable[[], float],
        rng: random.Random,
    ) -> None:
        super().__init__(name, inbox, who=f"discord bot {name!r}", links=links, log=_log)
        self._token = token
        self._rest = rest
        self._config = config
        self._cache = cache
        self._clock = clock
        self._rng = rng
        self._resume = read_resume_state(inbox, name)
        self._seq = self._resume.seq if self._resume is not None else None
        self._user_id = self._resume.user_id if self._resume is not None else None
        self._acked = True
        self._busy = False  # a frame is being handled: later ones, ACKs among them, wait unread
        self._busy_since_beat = False
        self._http: aiohttp.ClientSession | None = None

    @property
    def intents(self) -> int:
        return INTENTS if self._config.message_content_intent else INTENTS & ~MESSAGE_CONTENT

    async def attempt(self, http: aiohttp.ClientSession) -> Ended:
        self._http = http
        return await self._connect(http)

    def retrying(self, ended: Ended, wait: float) -> None:
        how = "resuming" if self._resume is not None else "identifying"
        _log.info("discord bot %r: %s; %s in %.1f s", self.name, ended.reason, how, wait)

    def backoff(self, failures: int) -> float:
        """None after a connection that lasted, then doubling from ``reconnect_min_s`` up to ``reconnect_max_s``,
        each with jitter (half to all of it)."""
        config = self._config
        return doubling(failures, config.reconnect_min_s, config.reconnect_max_s, self._rng) if failures else 0.0

    # -- one connection

    async def _connect(self, http: aiohttp.ClientSession) -> Ended:
        resume = self._resume
        url = (
            resume.resume_gateway_url
            if resume is not None
            else await gateway_url(self._rest, self._config, bot=self.name)
        )
        timeout = aiohttp.ClientWSTimeout(ws_receive=None, ws_close=_CLOSE_TIMEOUT_S)
        async with http.ws_connect(
            versioned(url),
            timeout=timeout,
            max_msg_size=self._config.max_frame_bytes,
            autoping=True,
            autoclose=False,  # aiohttp would answer Discord's close with 1000, which ends the session
        ) as ws:
            try:
                hello = await self._hello(ws)
                if isinstance(hello, Ended):
                    return hello
                self._acked, self._busy_since_beat = True, False
                await self._send(ws, self._resume_payload(resume) if resume is not None else self._identify_payload())
                reader = asyncio.create_task(self._read(ws))
                beat = asyncio.create_task(self._heartbeat(ws, hello.heartbeat_interval / 1000))
                try:
                    done, _ = await asyncio.wait({reader, beat}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for task in (reader, beat):
                        task.cancel()
                    await asyncio.gather(reader, beat, return_exceptions=True)
                return (reader if reader in done else beat).result()
            finally:
                if not ws.closed:
                    await ws.close(code=RESUMABLE_CLOSE)

    async def _hello(self, ws: aiohttp.ClientWebSocketResponse) -> Hello | Ended:
        try:
            message = await ws.receive(timeout=self._config.hello_timeout_s)
        except TimeoutError:
            raise ProtocolBroken(f"no Hello within {self._config.hello_timeout_s:.0f} s") from None
        if message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED):
            return self._closed(ws.close_code, message.extra)
        if message.type is not aiohttp.WSMsgType.TEXT:
            raise ProtocolBroken(f"expected Hello, got a {message.type.name} frame")
        frame = decode_frame(message.data)
        if frame.op != 10:
            raise ProtocolBroken(f"expected Hello (op 10) first, got op {frame.op}")
        return decode_data(frame, Hello)

    def _identify_payload(self) -> dict[str, Any]:
        properties = {"os": sys.platform, "browser": "hermes-actors", "device": "hermes-actors"}
        return {"op": 2, "d": {"token": self._token, "intents": self.intents, "properties": properties}}

    def _resume_payload(self, resume: ResumeState) -> dict[str, Any]:
        return {"op": 6, "d": {"token": self._token, "session_id": resume.session_id, "seq": self._seq}}

    async def _send(self, ws: aiohttp.ClientWebSocketResponse, payload: dict[str, Any]) -> None:
        await ws.send_str(msgspec.json.encode(payload).decode())

    async def _heartbeat(self, ws: aiohttp.ClientWebSocketResponse, interval: float) -> Ended:
        await asyncio.sleep(interval * self._rng.random())
        while True:
            if not self._acked and not self._busy and not self._busy_since_beat:
                _log.warning(
                    "discord bot %r: no heartbeat ACK within %.1f s, so the connection is a zombie; reconnecting",
                    self.name,
                    interval,
                )
                return Ended("the connection stopped answering heartbeats", 0.0)
            self._acked = False
            self._busy_since_beat = self._busy
            await self._send(ws, {"op": 1, "d": self._seq})
            await asyncio.sleep(interval)

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> Ended:
        while True:
            message = await ws.receive()
            if message.type is aiohttp.WSMsgType.TEXT:
                self._busy = self._busy_since_beat = True
                try:
                    ended = await self._frame(ws, message.data)
                finally:
                    self._busy = False
                if ended is not None:
                    return ended
            elif message.type is aiohttp.WSMsgType.BINARY:
                _log.warning(
                    "discord bot %r: ignored a binary gateway frame of %d bytes (JSON text frames were asked for)",
                    self.name,
                    len(message.data),
                )
            elif message.type is aiohttp.WSMsgType.ERROR:
                return self._broken(message.data)
            else:  # CLOSE, CLOSING, CLOSED
                return self._closed(ws.close_code, message.extra)

    def _closed(self, code: int | None, reason: object) -> Ended:
        ended, new_session = after_close(code, reason)
        if new_session:
            self._forget_session()
        return ended

    def _broken(self, error: object) -> Ended:
        if isinstance(error, aiohttp.WebSocketError) and error.code == aiohttp.WSCloseCode.MESSAGE_TOO_BIG:
            # Resuming would replay the same frame: start a new session past it.
            _log.error(
                "discord bot %r: a gateway frame exceeded max_frame_bytes (%d); starting a new session, events "
                "of the old one are lost; raise platforms.discord.max_frame_bytes",
                self.name,
                self._config.max_frame_bytes,
            )
            self._forget_session()
        return Ended(f"the connection broke ({error})")

    def _forget_session(self) -> None:
        self._resume = None
        self._seq = None

    # -- payloads

    async def _frame(self, ws: aiohttp.ClientWebSocketResponse, text: str) -> Ended | None:
        try:
            frame = decode_frame(text)
        except EventError as exc:
            _log.warning("discord bot %r: ignored a gateway frame: %s", self.name, exc)
            return None
        match frame.op:
            case 0:
                await self._dispatch(frame)
            case 1:
                await self._send(ws, {"op": 1, "d": self._seq})
            case 7:
                return Ended("Discord asked for a reconnect (op 7)", 0.0)
            case 9:
                if bytes(frame.d).strip() == b"true":
                    return Ended("Discord invalidated the session, resumable (op 9)", wait_s=0.0)
                self._forget_session()
                wait = self._rng.uniform(self._config.identify_wait_min_s, self._config.identify_wait_max_s)
                return Ended("Discord invalidated the session (op 9)", wait)
            case 11:
                self._acked = True
            case _:
                _log.debug("discord bot %r: ignored op %d", self.name, frame.op)
        return None

    async def _dispatch(self, frame: Frame) -> None:
        try:
            match frame.t:
                case "READY":
                    await self._ready(decode_data(frame, Ready), frame.s)
                case "RESUMED":
                    self.connected()
                    _log.info("discord bot %r: resumed session at sequence %s", self.name, self._seq)
                case "MESSAGE_CREATE":
                    await self._message(frame)
                case "GUILD_CREATE":
                    guild = decode_data(frame, GuildCreate)
                    if not guild.unavailable:
                        self._cache.put([*guild.channels, *guild.threads], guild.id)
                case "THREAD_LIST_SYNC":
                    synced = decode_data(frame, ThreadListSync)
                    self._cache.put(synced.threads, synced.guild_id)
                case kind if kind in _CHANNEL_EVENTS:
                    self._cache.put([decode_data(frame, Channel)])
        except EventError as exc:
            _log.warning("discord bot %r: skipped event %s (sequence %s): %s", self.name, frame.t, frame.s, exc)
        if frame.s is not None:
            self._seq = frame.s

    async def _ready(self, ready: Ready, seq: int | None) -> None:
        self._resume = ResumeState(
            session_id=ready.session_id,
            seq=seq,
            resume_gateway_url=ready.resume_gateway_url,
            user_id=ready.user.id,
        )
        self._user_id = ready.user.id
        self.connected()
        _log.info("discord bot %r: connected as %s (user %s)", self.name, ready.user.username, ready.user.id)
        try:
            await accept_many_async(self.inbox, [], cursor=resume_cursor(self.name, self._resume))
        except Exception as exc:
            _log.warning("discord bot %r: could not store the new session (%s)", self.name, exc)

    async def _message(self, frame: Frame) -> None:
        message = decode_data(frame, Message)
        outcome: InboundMessage | Skipped | None = skip_reason(message, self._user_id)
        if outcome is None:  # only now is the channel worth a lookup
            channel: Channel | None
            if message.guild_id is None:  # a DM: remembered so that replies there do not quote
                channel = Channel(id=message.channel_id, type=1)
                self._cache.put([channel])
            else:
                channel = await find_channel(self._rest, self._cache, message, bot=self.name)
            outcome = inbound_from_message(
                message, self.name, own_user_id=self._user_id, channel=channel, received_at=self._clock()
            )
        if isinstance(outcome, Skipped):
            level = logging.DEBUG if outcome.quiet else logging.INFO
            _log.log(level, "discord bot %r: skipped message %s: %s", self.name, message.id, outcome.reason)
            return
        if message.attachments:
            outcome = await self._attach(outcome, message)
        cursor = None
        if self._resume is not None and frame.s is not None:
            cursor = resume_cursor(self.name, msgspec.structs.replace(self._resume, seq=frame.s))
        (result,) = await self.commit([outcome], cursor=cursor, what=f"message {message.id}")
        if result.duplicate:
            _log.info("discord bot %r: message %s was already stored (a replayed event)", self.name, message.id)

    async def _attach(self, inbound: InboundMessage, message: Message) -> InboundMessage:
        """``inbound`` with the files of ``message`` saved into the media store (or refused, saying why)."""
        assert self._http is not None  # set by attempt()
        return await attach_files(
            inbound,
            message.attachments,
            media=self.inbox.media,
            fetch=self._config.fetch_policy,
            timeout_s=self._config.request_timeout_s,
            where=f"discord bot {self.name!r}",
        )
