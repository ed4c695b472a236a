"""One bot account's long poll and batch threads, and the state they share.

The poll thread asks ``getupdates`` for messages after the account's ``get_updates_buf``; the batch thread
releases batches whose quiet spell has passed; every change is committed with the account's whole state as its
poll cursor. Each ``getupdates`` round says in the adapter's :class:`~platforms.support.links.Links` whether the
account is up (an answer, or a poll the server held past its timeout) or why it is not.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import msgspec

from hermes_actors.clock import wake_on_advance
from hermes_actors.messages import InboundMessage
from hermes_actors.ports import PollCursor
from hermes_actors.routing import SessionSource
from platforms.support.http_client import HttpError, HttpResult, retry_after_seconds, shown
from platforms.support.links import Links
from platforms.wechat.batching import AccountState, Batcher, SeenWindow, decode_state, encode_state
from platforms.wechat.config import WechatConfig
from platforms.wechat.files import fetch_media
from platforms.wechat.sender import AccountAuth, ContextTokens
from platforms.wechat.wire import (
    BASE_INFO,
    RATE_LIMITED,
    SESSION_EXPIRED,
    LongPoll,
    Malformed,
    Piece,
    decode_message,
    decode_updates,
    error_code,
    request_headers,
)

if TYPE_CHECKING:
    from hermes_actors.ports import ChatInbox

__all__ = ["PLATFORM", "BotAccount"]

_log = logging.getLogger(__name__)

PLATFORM = "wechat"
_POLL_MARGIN_S = 5.0  # the socket waits this much longer than the server promised to hold the poll
_MAX_POLL_TIMEOUT_S = 300.0
_COMMIT_RETRY_S = 1.0


class BotAccount:
    """One bot account's poll and batch threads and the state they share (guarded by ``_ready``'s lock)."""

    def __init__(
        self,
        auth: AccountAuth,
        config: WechatConfig,
        tokens: ContextTokens,
        links: Links,
        *,
        clock: Callable[[], float],
        monotonic: Callable[[], float],
    ) -> None:
        self.auth = auth
        self._links = links
        self._config = config
        self._tokens = tokens
        self._clock = clock
        self._monotonic = monotonic
        self._ready = threading.Condition()
        self._stopping = threading.Event()
        self._poll = LongPoll()
        self._batcher = Batcher(
            window_s=config.batch_window_s,
            long_chars=config.long_chunk_chars,
            long_wait_s=config.long_chunk_wait_s,
            monotonic=monotonic,
        )
        self._seen = SeenWindow(config.dedupe_window_s, clock=clock)
        wake_on_advance(clock, self._wake_batches)  # a test's fake clock moved: a window may have closed
        self._buf = ""
        self._committed = ""
        self._timeout = config.poll_timeout_s
        self._failures = 0
        self._inbox: ChatInbox | None = None
        self._threads: list[threading.Thread] = []

    @property
    def name(self) -> str:
        return self.auth.name

    def start(self, inbox: ChatInbox) -> None:
        stored = inbox.poll_cursor(PLATFORM, self.name)
        state = decode_state(stored, self.name)
        self._inbox = inbox
        self._buf = state.buf
        self._seen.restore(state.seen)
        self._batcher.restore(state.pending)
        self._committed = stored or ""
        if state.pending:
            _log.info("wechat account %r: %d batches were waiting at the last stop", self.name, len(state.pending))
        for target, role in ((self._poll_loop, "poll"), (self._batch_loop, "batch")):
            thread = threading.Thread(target=target, name=f"hermes-wechat-{self.name}-{role}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._poll.abort()
        with self._ready:
            self._ready.notify_all()

    def join(self, deadline: float) -> None:
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                _log.warning("wechat account %r: thread %s did not stop in time", self.name, thread.name)

    # -- polling ---------------------------------------------------------------------------------------------------

    def _poll_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                pause = self._poll_once()
            except Exception as exc:
                self._links.failed(self.name, f"the poll failed ({str(exc) or type(exc).__name__})")
                _log.exception("wechat account %r: the poll failed unexpectedly; polling again", self.name)
                pause = self._backoff()
            if pause > 0:
                self._stopping.wait(pause)

    def _backoff(self, at_least: float = 0.0) -> float:
        self._failures += 1
        delay = min(self._config.retry_base_s * 2.0 ** min(self._failures - 1, 30), self._config.retry_max_s)
        return max(delay, at_least)

    def _poll_once(self) -> float:
        """One ``getupdates`` round; return how long to pause before the next."""
        url = self.auth.url("getupdates")
        body = {"get_updates_buf": self._buf, "base_info": BASE_INFO}
        try:
            result = self._poll.post(url, body, request_headers(self.auth.token), self._timeout + _POLL_MARGIN_S)
        except HttpError as exc:
            if self._stopping.is_set():
                return 0.0
            pause = self._backoff()
            self._links.failed(self.name, str(exc))
            _log.warning("wechat account %r: %s; polling again in %.1f s", self.name, exc, pause)
            return pause
        if result is None:  # the server held the poll past its timeout: nothing new
            self._links.connected(self.name)
            return 0.0
        if result.status != 200:
            return self._refused(url, result)
        try:
            updates = decode_updates(result.body)
        except Malformed as exc:
            pause = self._backoff()
            self._links.failed(self.name, f"{exc}: {result.excerpt()!r}")
            _log.warning("wechat account %r: %s: %r; polling again in %.1f s", self.name, exc, result.excerpt(), pause)
            return pause
        code = error_code(updates)
        if code == SESSION_EXPIRED:
            self._failures = 0
            pause = self._config.session_expired_backoff_s
            self._links.failed(
                self.name,
                f"the iLink session has expired (errcode {code}); log the bot in again (scan the QR code) and put the "
                f"new bot token in platforms.wechat.accounts.{self.name} (token or token_env)",
            )
            _log.error(
                "wechat account %r: the iLink session has expired (errcode %d, %r). Log the bot in again (scan the QR "
                "code), put the new bot token in platforms.wechat.accounts.%s (token or token_env) and reload; "
                "polling again in %.0f s",
                self.name,
                code,
                updates.errmsg,
                self.name,
                pause,
            )
            return pause
        if code == RATE_LIMITED:
            pause = self._backoff(self._config.rate_limit_backoff_s)
            self._links.failed(self.name, f"getupdates is rate limited ({updates.errmsg!r})")
            _log.warning(
                "wechat account %r: getupdates is rate limited (%r); polling again in %.1f s",
                self.name,
                updates.errmsg,
                pause,
            )
            return pause
        if code != 0:
            pause = self._backoff()
            said = f"ret={updates.ret} errcode={updates.errcode} errmsg={updates.errmsg!r}"
            self._links.failed(self.name, f"getupdates failed ({said})")
            _log.warning(
                "wechat account %r: getupdates failed (ret=%s errcode=%s errmsg=%r); polling again in %.1f s",
                self.name,
                updates.ret,
                updates.errcode,
                updates.errmsg,
                pause,
            )
            return pause
        self._failures = 0
        self._links.connected(self.name)
        if updates.longpolling_timeout_ms is not None and updates.longpolling_timeout_ms > 0:
            self._timeout = min(updates.longpolling_timeout_ms / 1000, _MAX_POLL_TIMEOUT_S)
        self._receive(self._pieces(updates.msgs or []), updates.get_updates_buf)
        return 0.0

    def _refused(self, url: str, result: HttpResult) -> float:
        if result.status in (401, 403):
            pause = self._backoff()
            self._links.failed(
                self.name,
                f"{shown(url)} refused the bot token (HTTP {result.status}); check "
                f"platforms.wechat.accounts.{self.name} (token or token_env)",
            )
            _log.error(
                "wechat account %r: %s refused the bot token (HTTP %d); check platforms.wechat.accounts.%s "
                "(token or token_env); polling again in %.1f s",
                self.name,
                shown(url),
                result.status,
                self.name,
                pause,
            )
            return pause
        hint = retry_after_seconds(result.headers.get("retry-after")) if result.status == 429 else None
        pause = self._backoff(hint or 0.0)
        self._links.failed(self.name, f"getupdates answered HTTP {result.status} ({result.excerpt()!r})")
        _log.warning(
            "wechat account %r: getupdates answered HTTP %d (%r); polling again in %.1f s",
            self.name,
            result.status,
            result.excerpt(),
            pause,
        )
        return pause

    def _pieces(self, messages: Sequence[msgspec.Raw]) -> list[Piece]:
        pieces: list[Piece] = []
        for index, raw in enumerate(messages):
            try:
                decoded = decode_message(raw)
            except Malformed as exc:
                _log.warning("wechat account %r: skipped msgs[%d] of a getupdates answer: %s", self.name, index, exc)
                continue
            if decoded is None:
                continue
            piece, refs = decoded
            if refs and self._inbox is not None:
                attachments = fetch_media(
                    refs,
                    media=self._inbox.media,
                    cdn_base_url=self._config.cdn_base_url,
                    timeout_s=self._config.download_timeout_s,
                    account=self.name,
                )
                piece = msgspec.structs.replace(piece, attachments=attachments)
            pieces.append(piece)
        return pieces

    def _receive(self, pieces: list[Piece], buf: str | None) -> None:
        with self._ready:
            self._remember_tokens(pieces)  # a resend's token is still the newest of its chat
            fresh: list[Piece] = []
            for piece in pieces:
                repeat = self._seen.repeat(piece)
                if repeat is not None:
                    _log.info(
                        "wechat account %r: dropped message %s from %s: a repeat (%s) within %.0f s",
                        self.name,
                        piece.message_id,
                        piece.user_id,
                        repeat.partition(":")[0],
                        self._config.dedupe_window_s,
                    )
                    continue
                fresh.append(piece)
            for piece in fresh:
                self._batcher.add(piece)
            if buf:
                self._buf = buf
            self._commit()
            self._ready.notify_all()

    def _remember_tokens(self, pieces: list[Piece]) -> None:
        latest = {piece.chat_id: piece.context_token for piece in pieces if piece.context_token}
        for chat_id, token in latest.items():
            try:
                self._tokens.remember(self.name, chat_id, token)
            except Exception:
                _log.exception("wechat account %r: could not store the context_token of %s", self.name, chat_id)

    # -- batches ---------------------------------------------------------------------------------------------------

    def _wake_batches(self) -> None:
        with self._ready:
            self._ready.notify_all()

    def _batch_loop(self) -> None:
        with self._ready:
            while not self._stopping.is_set():
                try:
                    self._commit()
                except Exception:
                    _log.exception("wechat account %r: releasing batches failed unexpectedly", self.name)
                deadline = self._batcher.next_deadline()
                wait = None if deadline is None else max(0.0, deadline - self._monotonic())
                self._ready.wait(wait)

    def _commit(self) -> None:
        """Commit the due batches as turns together with the state (caller holds ``_ready``)."""
        assert self._inbox is not None
        due = self._batcher.take_due()
        try:
            state = encode_state(
                AccountState(buf=self._buf, pending=self._batcher.snapshot(), seen=self._seen.snapshot())
            )
            if not due and state == self._committed:
                return
            turns = [self._turn(batch) for batch in due]
            cursor = PollCursor(platform=PLATFORM, cursor=state, account_id=self.name)
            results = self._inbox.accept_many(turns, cursor=cursor)
        except Exception:
            _log.exception("wechat account %r: could not store %d new turns; trying again", self.name, len(due))
            self._batcher.put_back(due, self._monotonic() + _COMMIT_RETRY_S)
            return
        self._committed = state
        for turn, result in zip(turns, results, strict=True):
            if result.duplicate:
                _log.info("wechat account %r: message %s was stored before; no new turn", self.name, turn.message_id)

    def _turn(self, batch: list[Piece]) -> InboundMessage:
        first = batch[0]
        source = SessionSource(
            platform=PLATFORM,
            account_id=self.name,
            chat_type=first.chat_type,
            chat_id=first.chat_id,
            user_id=first.user_id,
        )
        text = "\n".join(piece.text for piece in batch)
        attachments = tuple(attachment for piece in batch for attachment in piece.attachments)
        return InboundMessage(
            source=source, text=text, message_id=first.message_id, attachments=attachments, received_at=self._clock()
        )
