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

Each account's connection state is kept in :attr:`EventStreams.links` for readiness: a stream the daemon answered
says it is up, a refused or dropped one says why until a stream is answered again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
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
from platforms.support.links import Links
from platforms.support.task_thread import TaskThread

if TYPE_CHECKING:
    from hermes_actors.ports import ChatInbox

__all__ = ["EVENT_TYPES", "EventStreams", "events_url"]

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


class _Account:
    """One account's stream state: the last event id seen, and how many connects failed in a row."""

    def __init__(self, name: str, last_id: str | None) -> None:
        self.name = name
        self.last_id = last_id
        self.failures = 0
        self.connected = False


class EventStreams:
    """Listens to the event stream of every account in ``accounts`` and commits their messages to ``inbox``."""

    def __init__(
        self,
        accounts: Sequence[str],
        inbox: ChatInbox,
        config: SignalConfig,
        *,
        clock: Callable[[], float],
    ) -> None:
        self._accounts = list(accounts)
        self._inbox = inbox
        self._config = config
        self._clock = clock
        self.links = Links("account", self._accounts)
        self._thread = TaskThread(name="hermes-signal-events", label="signal: the event", log=_log)
        self._stopping = threading.Event()

    def start(self) -> None:
        """Read each account's stored event id and connect."""
        states = [_Account(name, self._stored_id(name)) for name in self._accounts]
        self._thread.start(
            lambda session: {f"signal-events-{state.name}": self._listen(session, state) for state in states}
        )

    def stop(self, timeout: float = 10.0) -> None:
        """Close the streams (an event being committed finishes first); wait up to ``timeout`` for the thread."""
        self._stopping.set()
        self._thread.stop(timeout)

    def _stored_id(self, account: str) -> str | None:
        return self._inbox.poll_cursor(PLATFORM, account)

    async def _listen(self, session: aiohttp.ClientSession, state: _Account) -> None:
        while not self._stopping.is_set():
            try:
                await self._stream(session, state)
                problem = "the daemon closed the event stream"
            except asyncio.CancelledError:
                raise
            except _Refused as exc:
                hint = _HINTS.get(exc.status, "check that platforms.signal.url is signal-cli's daemon --http")
                problem = f"the event stream was refused ({exc}); {hint}"
            except (aiohttp.ClientError, TimeoutError) as exc:
                problem = f"the event stream failed ({type(exc).__name__}: {str(exc)[:200] or 'no detail'})"
            except Exception:
                _log.exception("signal account %s: the event stream failed unexpectedly", state.name)
                problem = "the event stream failed unexpectedly"
            if self._stopping.is_set():
                return
            self.links.failed(state.name, problem)
            if state.connected:
                state.connected = False
                state.failures = 0  # it worked until now: the first reconnect is quick
            state.failures += 1
            wait = self._backoff(state.failures)
            level = logging.WARNING if state.failures == 1 else logging.ERROR
            _log.log(level, "signal account %s: %s; reconnecting in %.1f s", state.name, problem, wait)
            await asyncio.sleep(wait)

    async def _stream(self, session: aiohttp.ClientSession, state: _Account) -> None:
        url = events_url(self._config.base, state.name)
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        if state.last_id:
            headers["Last-Event-ID"] = state.last_id
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
            if state.failures:
                _log.info("signal account %s: the event stream is back after %d failures", state.name, state.failures)
            else:
                _log.info("signal account %s: listening to %s", state.name, url)
            state.connected = True
            self.links.connected(state.name)
            parser = SseParser(config.max_event_bytes, last_id=state.last_id)
            async for chunk in response.content.iter_any():
                for item in parser.feed(chunk):
                    await self._handle(session, state, item)
                    if self._stopping.is_set():
                        return

    async def _handle(self, session: aiohttp.ClientSession, state: _Account, item: SseEvent | Oversized) -> None:
        if isinstance(item, Oversized):
            _log.warning(
                "signal account %s: skipped an event of more than %d bytes (platforms.signal.max_event_bytes)",
                state.name,
                self._config.max_event_bytes,
            )
            return
        if item.event not in EVENT_TYPES:
            _log.debug("signal account %s: ignored a %r event", state.name, item.event[:40])
        else:
            await self._receive(session, state, item)
        state.last_id = item.id

    async def _receive(self, session: aiohttp.ClientSession, state: _Account, item: SseEvent) -> None:
        try:
            event = decode_event(item.data)
            found = inbound_from_event(event, state.name, received_at=self._clock())
        except EventError as exc:
            _log.warning("signal account %s: skipped event %s: %s", state.name, item.id or "without id", exc)
            return
        if isinstance(found, Skipped):
            where = item.id or "without id"
            _log.log(found.level, "signal account %s: skipped event %s: %s", state.name, where, found.reason)
            return
        files = files_of(event)
        if files:  # fetched before the commit, so the stored message holds their records
            found = await attach_files(
                found,
                files,
                account=state.name,
                rpc_url=self._config.base + "/api/v1/rpc",
                media=self._inbox.media,
                session=session,
                timeout_s=self._config.request_timeout_s,
            )
        await self._commit(state, found, item.id)

    async def _commit(self, state: _Account, inbound: InboundMessage, event_id: str | None) -> None:
        """Store ``inbound`` with the event id; retry until it is stored or the adapter stops. The commit waits on a
        worker thread: this account's stream waits for it, the other accounts' streams go on."""
        cursor = None if event_id is None else PollCursor(platform=PLATFORM, cursor=event_id, account_id=state.name)
        delay = self._config.reconnect_base_s
        while True:
            try:
                (result,) = await accept_many_async(self._inbox, [inbound], cursor=cursor)
            except Exception:
                if self._stopping.is_set():
                    self._lost(state, inbound)
                    return
                _log.exception(
                    "signal account %s: could not store message %s; trying again in %.1f s",
                    state.name,
                    inbound.message_id,
                    delay,
                )
                try:
                    await asyncio.sleep(delay)
                except asyncio.CancelledError:
                    self._lost(state, inbound)
                    raise
                delay = min(delay * 2, _COMMIT_RETRY_MAX_S)
                continue
            if result.duplicate:
                _log.info(
                    "signal account %s: message %s was stored before; no new turn", state.name, inbound.message_id
                )
            return

    def _lost(self, state: _Account, inbound: InboundMessage) -> None:
        _log.error(
            "signal account %s: stopped before message %s could be stored; it is lost unless signal-cli delivers it "
            "again",
            state.name,
            inbound.message_id,
        )

    def _backoff(self, failures: int) -> float:
        config = self._config
        return float(min(config.reconnect_max_s, config.reconnect_base_s * 2 ** min(failures - 1, 30)))
