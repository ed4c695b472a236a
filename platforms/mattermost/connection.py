"""The websocket of each bot: sign in, catch up over REST, then turn ``posted`` events into inbox rows.

One :class:`BotConnection` per bot, all on one background event loop (the adapter's ``Connections``). One goes:
``GET /users/me`` (the bot's own id and name; HTTP 401 means the token is refused, which reconnecting cannot fix:
the bot stops and logs the fix), then the websocket ``/api/v4/websocket`` with ``Authorization: Bearer <token>``
on the upgrade; the server greets with a ``hello`` event. Before any event is read, the posts made while the bot
was away are fetched (:mod:`platforms.mattermost.cursor`), oldest first. Then events are read in order: each
``posted`` one is a post (``data.post``, a JSON string) whose files are fetched into the media store and which is
committed with the advanced read position in one transaction. Only then is the next event read, so a drop, a failed
commit or a crash resumes from the last committed post. Events carry a ``seq`` counting up from 0 on each
connection; a gap (an event the server dropped) is logged and closed by catching up again.

aiohttp pings every ``heartbeat_s`` and closes a connection whose pong does not come. Failures reconnect with
exponential backoff (``reconnect_min_s`` to ``reconnect_max_s``, with jitter), at once after a connection that
lasted a while.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import aiohttp

from hermes_actors.messages import InboundMessage
from hermes_actors.ports import accept_many_async
from platforms.mattermost.config import MattermostConfig
from platforms.mattermost.cursor import ReadState, read_state, state_cursor
from platforms.mattermost.events import DIRECT, GROUP, Skipped, Where, inbound_from_post
from platforms.mattermost.files import attach_files
from platforms.mattermost.rest import RestClient, RestError
from platforms.mattermost.wire import (
    Channel,
    Envelope,
    Post,
    Posted,
    User,
    WireError,
    decode,
    decode_envelope,
    decode_post,
)
from platforms.support.connections import Connection, Ended, Fatal, NotStored, doubling
from platforms.support.links import Links

if TYPE_CHECKING:
    from hermes_actors.ports import ChatInbox

__all__ = ["BotConnection"]

_log = logging.getLogger(__name__)

_STABLE_S = 5.0
_CLOSED = (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED)
_KEPT_CHANNELS = 10_000


class BotConnection(Connection):
    """The websocket session of one bot, feeding ``inbox``: an attempt signs in, connects and catches up, then
    reads events until the connection ends; one that was up for a while ends with a reconnect at once."""

    stable_s = _STABLE_S
    stable_end_counts = False
    expected = (aiohttp.ClientError, OSError, TimeoutError, RestError, WireError)

    def __init__(
        self,
        name: str,
        rest: RestClient,
        inbox: ChatInbox,
        config: MattermostConfig,
        links: Links,
        *,
        clock: Callable[[], float],
        rng: random.Random,
    ) -> None:
        super().__init__(name, inbox, who=f"mattermost bot {name!r}", links=links, log=_log)
        self._rest = rest
        self._config = config
        self._clock = clock
        self._rng = rng
        self._state: ReadState | None = read_state(inbox, name)
        self._me: User | None = None
        self._channels: dict[str, Where] = {}
        self._http: aiohttp.ClientSession | None = None

    async def attempt(self, http: aiohttp.ClientSession) -> Ended:
        self._http = http
        return Ended(await self._connect(http))

    def backoff(self, failures: int) -> float:
        config = self._config
        return doubling(failures, config.reconnect_min_s, config.reconnect_max_s, self._rng) if failures else 0.0

    # -- one connection

    async def _connect(self, http: aiohttp.ClientSession) -> str:
        try:
            self._me = await asyncio.to_thread(self._rest.me)
        except RestError as exc:
            if exc.status == 401:
                raise Fatal(f"{exc}: the token was refused; create a new access token for the bot") from None
            raise
        try:
            ws = await http.ws_connect(
                self._config.websocket_url,
                headers=self._rest.auth,
                heartbeat=self._config.heartbeat_s,
                max_msg_size=self._config.max_frame_bytes,
            )
        except aiohttp.WSServerHandshakeError as exc:
            if exc.status == 401:
                raise Fatal("the websocket refused the token (HTTP 401)") from None
            raise
        async with ws:
            hello_seq = await self._hello(ws)
            self.connected()
            _log.info("mattermost bot %r: connected as @%s (user %s)", self.name, self._me.username, self._me.id)
            await self._catch_up()
            return await self._read(ws, None if hello_seq is None else hello_seq + 1)

    async def _hello(self, ws: aiohttp.ClientWebSocketResponse) -> int | None:
        """Wait for the ``hello`` event; return its ``seq``."""
        deadline = time.monotonic() + self._config.hello_timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no hello event within {self._config.hello_timeout_s:g} s")
            message = await ws.receive(timeout=left)
            if message.type in _CLOSED:
                raise WireError(f"the server closed the websocket before its hello ({ws.close_code})")
            if message.type is aiohttp.WSMsgType.TEXT:
                envelope = decode_envelope(message.data)
                if envelope.event == "hello":
                    return envelope.seq

    async def _read(self, ws: aiohttp.ClientWebSocketResponse, expected: int | None) -> str:
        while True:
            message = await ws.receive()
            if message.type in _CLOSED:
                return f"the connection closed ({ws.close_code})"
            if message.type is aiohttp.WSMsgType.ERROR:
                return f"the connection broke ({message.data})"
            if message.type is not aiohttp.WSMsgType.TEXT:
                continue
            try:
                envelope = decode_envelope(message.data)
            except WireError as exc:
                _log.warning("mattermost bot %r: ignored a websocket message: %s", self.name, exc)
                continue
            if envelope.seq is not None:
                if expected is not None and envelope.seq != expected:
                    _log.warning(
                        "mattermost bot %r: event %d came after %d (events were dropped); catching up over REST",
                        self.name,
                        envelope.seq,
                        expected - 1,
                    )
                    await self._catch_up()
                expected = envelope.seq + 1
            if envelope.event == "posted":
                await self._posted(envelope)

    # -- posts

    async def _posted(self, envelope: Envelope) -> None:
        try:
            data = decode(envelope.data, Posted, "a posted event's data")
            post = decode_post(data.post)
        except WireError as exc:
            _log.warning("mattermost bot %r: skipped a posted event (seq %s): %s", self.name, envelope.seq, exc)
            return
        where = Where(channel_type=data.channel_type, team_id=data.team_id, channel_name=data.channel_display_name)
        if data.channel_type in (DIRECT, GROUP) or (data.channel_type and data.team_id):
            self._remember(post.channel_id, where)
        else:  # an event without its channel's type or team: ask
            found = await self._where(post.channel_id)
            if found is None:
                return
            where = found
        await self._take(post, where, data.sender_name)

    async def _where(self, channel_id: str) -> Where | None:
        known = self._channels.get(channel_id)
        if known is not None:
            return known
        try:
            channel = await asyncio.to_thread(self._rest.channel, channel_id)
        except RestError as exc:
            _log.warning(
                "mattermost bot %r: cannot tell what channel %s is (%s); its post is skipped",
                self.name,
                channel_id,
                exc,
            )
            return None
        return self._remember_channel(channel)

    def _remember_channel(self, channel: Channel) -> Where:
        where = Where(channel_type=channel.type, team_id=channel.team_id, channel_name=channel.display_name)
        self._remember(channel.id, where)
        return where

    def _remember(self, channel_id: str, where: Where) -> None:
        self._channels[channel_id] = where
        if len(self._channels) > _KEPT_CHANNELS:
            del self._channels[next(iter(self._channels))]

    async def _take(self, post: Post, where: Where, sender_name: str = "") -> None:
        """Commit ``post`` (or pass over it) and advance the read position with it."""
        me = self._me
        assert me is not None  # set by _connect()
        assert self._http is not None  # set by attempt()
        state = self._state or ReadState(since=0)
        outcome: InboundMessage | Skipped = inbound_from_post(
            post,
            self.name,
            own_user_id=me.id,
            own_username=me.username,
            where=where,
            sender_name=sender_name,
            received_at=self._clock(),
        )
        advanced = state.advanced(post.channel_id, post.create_at)
        if isinstance(outcome, Skipped):
            level = logging.DEBUG if outcome.quiet else logging.INFO
            _log.log(level, "mattermost bot %r: skipped post %s: %s", self.name, post.id, outcome.reason)
            self._state = advanced  # stored with the next post committed
            return
        if post.file_ids:
            outcome = await attach_files(
                outcome,
                post,
                rest=self._rest,
                media=self.inbox.media,
                session=self._http,
                timeout_s=self._config.request_timeout_s,
            )
        (result,) = await self.commit([outcome], cursor=state_cursor(self.name, advanced), what=f"post {post.id}")
        self._state = advanced
        if result.duplicate:
            _log.info("mattermost bot %r: post %s was already stored", self.name, post.id)

    # -- catching up

    async def _catch_up(self) -> None:
        """Read the posts made while the bot was not connected (none on its very first connection)."""
        state = self._state
        if state is None:
            first = ReadState(since=int(self._clock() * 1000))
            await self._store_position(first)
            return
        try:
            channels = await asyncio.to_thread(self._rest.my_channels)
        except RestError as exc:
            _log.warning(
                "mattermost bot %r: cannot list its channels (%s); catching up only the %d channels it has read",
                self.name,
                exc,
                len(state.channels),
            )
            channels = []
            for channel_id in list(state.channels):
                found = await self._channel_or_none(channel_id)
                if found is not None:
                    channels.append(found)
        missed: list[tuple[Post, Where]] = []
        for channel in channels:
            where = self._remember_channel(channel)
            mark = state.mark(channel.id)
            if channel.last_post_at and channel.last_post_at < mark:
                continue
            try:
                posts = await asyncio.to_thread(self._rest.posts_since, channel.id, mark)
            except RestError as exc:
                if exc.status not in (403, 404):
                    raise  # the whole catch-up runs again on the next connection
                _log.warning("mattermost bot %r: cannot read channel %s any more (%s)", self.name, channel.id, exc)
                continue
            if len(posts) >= 1000:
                _log.warning(
                    "mattermost bot %r: 1,000 posts or more to catch up in channel %s; older ones are not read",
                    self.name,
                    channel.id,
                )
            missed.extend((post, where) for post in posts if post.create_at >= mark)
        missed.sort(key=lambda item: (item[0].create_at, item[0].id))
        if missed:
            _log.info("mattermost bot %r: catching up on %d posts", self.name, len(missed))
        for post, where in missed:
            await self._take(post, where)

    async def _channel_or_none(self, channel_id: str) -> Channel | None:
        try:
            return await asyncio.to_thread(self._rest.channel, channel_id)
        except RestError as exc:
            _log.warning("mattermost bot %r: cannot read channel %s (%s)", self.name, channel_id, exc)
            return None

    async def _store_position(self, state: ReadState) -> None:
        try:
            await accept_many_async(self.inbox, [], cursor=state_cursor(self.name, state))
        except Exception as exc:
            raise NotStored(f"the read position could not be stored ({exc})") from exc
        self._state = state
