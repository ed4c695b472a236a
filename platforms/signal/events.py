"""Listening to signal-cli's event stream: one ``GET /api/v1/events?account=...`` per account, reconnecting.

Each account has its own Server-Sent Events connection on one background event loop. An event is decoded,
normalised (:mod:`platforms.signal.envelopes`) and committed to the inbox before the next is read, with the
event's ``id`` (newer signal-cli) stored as the account's cursor in the same transaction. When the stream drops
(signal-cli restarted, the connection was reset, or no byte, not even the 15 s keep-alive, came for
``idle_timeout_s``), it reconnects after ``reconnect_base_s``, doubling to ``reconnect_max_s`` while it fails.

What happens to messages during a drop, and what this relies on:

- SSE itself replays nothing. signal-cli's HTTP daemon subscribes to an account only while one of its event
  streams is connected: with ``--receive-mode=on-connection`` (or ``manual``) it stops fetching from the Signal
  server when the last stream closes, so messages sent meanwhile stay queued on the Signal server and are
  delivered when the stream is back. With the default ``on-start`` it keeps fetching (and acknowledging to
  Signal) with nobody listening, and what arrives then reaches no stream: run the daemon with
  ``--receive-mode=on-connection``.
- signal-cli versions that number their events keep the last 1000 and send those after ``Last-Event-ID`` to a
  client that reconnects with it; every reconnect (and every start, from the stored cursor) sends it. Older
  versions ignore the header.
- An envelope written to a connection in the instant it broke is lost on daemons without that buffer: signal-cli
  has acknowledged it to Signal by then. That window is what remains.
- Anything delivered twice (the replay overlapping what was committed, Signal resending an unacknowledged
  envelope) has the same ``<sender uuid>:<timestamp>`` id and is dropped by the durable inbox.

A message's attachments are fetched into the media store (:mod:`platforms.signal.files`) before it is committed,
so its inbox row holds the attachment records; the stream waits meanwhile, as it does for the commit.

An event that cannot be committed is retried (the stream waits) until it is stored or the adapter stops; a bad
event is logged and stepped over. ``stop()`` cancels the streams at once.

Each account's stream is a :class:`~platforms.support.connections.Connection`: a stream the daemon answered says in
its links that it is up, a refused or dropped one says why until a stream is answered again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING
from urllib.parse import quote

import aiohttp

from hermes_actors.messages import InboundMessage
from hermes_actors.ports import PollCursor, accept_many_async
from platforms.signal.config import SignalConfig
from platforms.signal.envelopes import (
    PLATFORM,
    EventError,
    Skipped,
    decode_event,
    files_of,
    inbound_from_event,
)
from platforms.signal.files import attach_files
from platforms.signal.sse import Oversized, SseEvent, SseParser
from platforms.support.connections import Connection, Connections, Ended, doubling
from platforms.support.links import Links

if TYPE_CHECKING:
    from hermes_actors.ports import ChatInbox

__all__ = ["EVENT_TYPES", "AccountStream", "EventStreams", "events_url"]

_log = logging.getLogger(__name__)

EVENT_TYPES = ("receive", "message")  # signal-cli names its events "receive"; "message" is SSE's default
_COMMIT_RETRY_MAX_S = 30.0
_EXCERPT = 300

_HINTS = {
    400: "signal-cli has no such account; register or link it in signal-cli (signal-cli -a ACCOUNT register, or "
    "signal-cli link), or remove it from platforms.signal.accounts",
    404: "there is no event stream at this address; is platforms.signal.url signal-cli's daemon --http "
    "(version 0.13 or later)?",
    405: "this address does not serve signal-cli's event stream; check platforms.signal.url",
    421: "signal-cli refused the Host header; point platforms.signal.url at the address the daemon listens on "
    "(127.0.0.1 or localhost)",
}


def events_url(base: str, account: str) -> str:
    """The event stream of ``account`` (the ``+`` of a number must be escaped in the query)."""
    return f"{base.rstrip('/')}/api/v1/events?account={quote(account, safe='')}"


class _Refused(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


class EventStreams:
    """The event stream of every account in ``accounts`` (an :class:`AccountStream` each) on one event loop thread,
    committing their messages to ``inbox``."""

    def __init__(
        self, accounts: Sequence[str], inbox: ChatInbox, config: SignalConfig, *, clock: Callable[[], float]
    ) -> None:
        self._connections = Connections(
            "account", accounts, thread="hermes-signal-events", label="signal: the event", log=_log
        )
        links = self._connections.links
        self._streams = [AccountStream(account, inbox, config, links, clock=clock) for account in accounts]

    def start(self) -> None:
        """Connect every account's stream (from its stored event id)."""
        self._connections.start(self._streams)

    def stop(self, timeout: float = 10.0) -> None:
        """Close the streams (an event being committed finishes first); wait up to ``timeout`` for the thread."""
        self._connections.stop(timeout)

    def problem(self) -> str | None:
        """The accounts whose stream is down, with why, or ``None``."""
        return self._connections.problem()


class AccountStream(Connection):
    """The event stream of one account, committing its messages to ``inbox``: an attempt holds the stream until it
    drops, and the count of failures restarts with each stream the daemon answered."""

    def __init__(
        self, account: str, inbox: ChatInbox, config: SignalConfig, links: Links, *, clock: Callable[[], float]
    ) -> None:
        super().__init__(account, inbox, who=f"signal account {account}", links=links, log=_log)
        self._config = config
        self._clock = clock
        self.last_id = inbox.poll_cursor(PLATFORM, account)  # the last event id seen

    async def attempt(self, http: aiohttp.ClientSession) -> Ended:
        await self._stream(http)
        return Ended("the daemon closed the event stream")

    def failure(self, exc: Exception) -> Ended:
        if isinstance(exc, _Refused):
            hint = _HINTS.get(exc.status, "check that platforms.signal.url is signal-cli's daemon --http")
            return Ended(f"the event stream was refused ({exc}); {hint}", error=exc)
        if isinstance(exc, (aiohttp.ClientError, TimeoutError)):
            return Ended(f"the event stream failed ({type(exc).__name__}: {str(exc)[:200] or 'no detail'})", error=exc)
        _log.exception("signal account %s: the event stream failed unexpectedly", self.name)
        return Ended("the event stream failed unexpectedly", error=exc)

    def retrying(self, ended: Ended, wait: float) -> None:
        level = logging.WARNING if self.failures == 1 else logging.ERROR
        _log.log(level, "signal account %s: %s; reconnecting in %.1f s", self.name, ended.reason, wait)

    def backoff(self, failures: int) -> float:
        return doubling(failures, self._config.reconnect_base_s, self._config.reconnect_max_s)

    async def _stream(self, session: aiohttp.ClientSession) -> None:
        url = events_url(self._config.base, self.name)
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        if self.last_id:
            headers["Last-Event-ID"] = self.last_id
        config = self._config
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=config.connect_timeout_s, sock_read=config.idle_timeout_s
        )
        async with session.get(url, headers=headers, timeout=timeout) as response:
            if response.status != 200:
                detail = (await response.content.read(_EXCERPT)).decode("utf-8", "replace")
                raise _Refused(response.status, repr(detail) if detail else "no body")
            kind = response.headers.get("Content-Type", "")
            if not kind.lower().startswith("text/event-stream"):
                raise _Refused(response.status, f"Content-Type {kind[:60]!r} is not text/event-stream")
            if self.failures:
                _log.info("signal account %s: the event stream is back after %d failures", self.name, self.failures)
            else:
                _log.info("signal account %s: listening to %s", self.name, url)
            self.connected()
            parser = SseParser(config.max_event_bytes, last_id=self.last_id)
            async for chunk in response.content.iter_any():
                for item in parser.feed(chunk):
                    await self._handle(session, item)

    async def _handle(self, session: aiohttp.ClientSession, item: SseEvent | Oversized) -> None:
        if isinstance(item, Oversized):
            _log.warning(
                "signal account %s: skipped an event of more than %d bytes (platforms.signal.max_event_bytes)",
                self.name,
                self._config.max_event_bytes,
            )
            return
        if item.event not in EVENT_TYPES:
            _log.debug("signal account %s: ignored a %r event", self.name, item.event[:40])
        else:
            await self._receive(session, item)
        self.last_id = item.id

    async def _receive(self, session: aiohttp.ClientSession, item: SseEvent) -> None:
        try:
            event = decode_event(item.data)
            found = inbound_from_event(event, self.name, received_at=self._clock())
        except EventError as exc:
            _log.warning("signal account %s: skipped event %s: %s", self.name, item.id or "without id", exc)
            return
        if isinstance(found, Skipped):
            where = item.id or "without id"
            _log.log(found.level, "signal account %s: skipped event %s: %s", self.name, where, found.reason)
            return
        files = files_of(event)
        if files:  # fetched before the commit, so the stored message holds their records
            found = await attach_files(
                found,
                files,
                account=self.name,
                rpc_url=self._config.base + "/api/v1/rpc",
                media=self.inbox.media,
                session=session,
                timeout_s=self._config.request_timeout_s,
            )
        await self._commit(found, item.id)

    async def _commit(self, inbound: InboundMessage, event_id: str | None) -> None:
        """Store ``inbound`` with the event id; retry until it is stored or the adapter stops. The commit waits on a
        worker thread: this account's stream waits for it, the other accounts' streams go on."""
        cursor = None if event_id is None else PollCursor(platform=PLATFORM, cursor=event_id, account_id=self.name)
        delay = self._config.reconnect_base_s
        while True:
            try:
                (result,) = await accept_many_async(self.inbox, [inbound], cursor=cursor)
            except Exception:
                _log.exception(
                    "signal account %s: could not store message %s; trying again in %.1f s",
                    self.name,
                    inbound.message_id,
                    delay,
                )
                try:
                    await asyncio.sleep(delay)
                except asyncio.CancelledError:
                    _log.error(
                        "signal account %s: stopped before message %s could be stored; it is lost unless signal-cli "
                        "delivers it again",
                        self.name,
                        inbound.message_id,
                    )
                    raise
                delay = min(delay * 2, _COMMIT_RETRY_MAX_S)
                continue
            if result.duplicate:
                _log.info("signal account %s: message %s was stored before; no new turn", self.name, inbound.message_id)
            return
