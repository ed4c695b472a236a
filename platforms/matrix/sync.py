"""``/sync`` long polls, one task per account on one background event loop.

Each answer is read into inbound messages and a new :class:`~platforms.matrix.state.AccountState` whose ``since``
is the answer's ``next_batch``; both are committed in one transaction with ``inbox.accept_many(messages,
cursor=...)``. A crash before that commit leaves the old ``since`` stored and the homeserver sends the same events
again; a crash after it resumes after them. Redeliveries collide with the inbox's dedupe on the event id.

Reading an answer: ``m.direct`` account data and each room's summary, invite and name update the state; invites
are joined (``auto_join``); the bot's own messages, and those of the adapter's other accounts (two of our bots in
one room would answer each other forever), are skipped; an event seen before is left to the inbox's dedupe. A
timeline marked ``limited`` (a gap: more events arrived than ``timeline_limit``) is backfilled with
``/rooms/{roomId}/messages?dir=b`` from its ``prev_batch`` back to the last event seen, at most ``backfill_limit``
events. What cannot be fetched (a longer gap, history not visible to the bot) is reported with a warning naming
the room and the last event seen; the newest missed messages are answered, older ones are not. On an account's
first sync (nothing stored) the messages already in its rooms are history and are not answered unless
``answer_history`` is set; in a room the bot has just joined, messages from before its join are not answered.

The file of an image, file, audio or video message is downloaded into the media store while its answer is read
(:mod:`platforms.matrix.files`), so the inbox row committed with the new ``since`` already holds the attachment
record; a crash before that commit only downloads it again (the media store writes the same bytes once).

A request that failed on the homeserver's side (no answer, 5xx, 429) fails the whole sync, which is asked again
from the same ``since`` after a backoff (``retry_after_ms`` for 429); a refused access token (``M_UNKNOWN_TOKEN``)
is logged with the fix and tried again every ``poll_retry_max_s``. Malformed rooms and events are logged and
stepped over. ``stop()`` cancels the polls in flight; a commit under way finishes first.

Each account's connection state is kept in :attr:`Poller.links` for readiness: an answered sync says it is up, a
failed one says why (with the fix, for a refused token) until a sync is answered again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import aiohttp
import msgspec

from hermes_actors.ports import PollCursor, accept_many_async
from platforms.matrix.answer import Batch, SyncReader
from platforms.matrix.client import Account
from platforms.matrix.config import MatrixConfig
from platforms.matrix.events import (
    PLATFORM,
)
from platforms.matrix.state import AccountState, Snapshots, decode_state, encode_state
from platforms.matrix.timeline import sync_filter
from platforms.matrix.wire import (
    ApiError,
    SyncError,
    decode_sync,
)
from platforms.support.links import Links
from platforms.support.task_thread import TaskThread

if TYPE_CHECKING:
    from hermes_actors.ports import ChatInbox

__all__ = ["Poller"]

_log = logging.getLogger(__name__)

_GRACE_S = 15.0  # beyond the long-poll timeout, how long an answer may take before the sync counts as failed


class _WhoAmI(msgspec.Struct, frozen=True, kw_only=True):
    user_id: str


class Poller:
    """Long-polls ``/sync`` for every account and feeds their messages to ``inbox``."""

    def __init__(
        self,
        accounts: Sequence[Account],
        inbox: ChatInbox,
        config: MatrixConfig,
        snapshots: Snapshots,
        *,
        clock: Callable[[], float],
    ) -> None:
        self._accounts = list(accounts)
        self._inbox = inbox
        self._config = config
        self._snapshots = snapshots
        self._clock = clock
        self._filter = sync_filter(config.timeline_limit)
        self._own_users: set[str] = set()  # every account's user: bots of ours never answer each other
        self._reader = SyncReader(config, media=inbox.media, clock=clock, own_users=self._own_users)
        self.links = Links("account", (account.name for account in self._accounts))
        self._thread = TaskThread(name="hermes-matrix-sync", label="matrix: the sync", log=_log)

    # -- lifecycle -------------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Read each account's stored state and start polling."""
        states = {account.name: self._stored(account.name) for account in self._accounts}
        for name, state in states.items():
            self._snapshots.put(name, state)
        self._thread.start(
            lambda session: {
                f"matrix-{account.name}": self._poll(session, account, states[account.name])
                for account in self._accounts
            }
        )

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel the polls (a commit under way finishes first) and wait up to ``timeout`` for the thread."""
        self._thread.stop(timeout)

    def _stored(self, account: str) -> AccountState:
        return decode_state(self._inbox.poll_cursor(PLATFORM, account), account)

    # -- the loop --------------------------------------------------------------------------------------------------

    async def _poll(self, session: aiohttp.ClientSession, account: Account, state: AccountState) -> None:
        user_id: str | None = None
        failures = 0
        while True:
            try:
                if user_id is None:
                    user_id = await self._whoami(session, account)
                state = await self._sync(session, account, user_id, state)
                self.links.connected(account.name)
                failures = 0
            except asyncio.CancelledError:
                raise
            except ApiError as exc:
                failures += 1
                await asyncio.sleep(self._failed(account, exc, failures))
            except SyncError as exc:
                failures += 1
                wait = self._backoff(failures)
                self.links.failed(account.name, str(exc))
                _log.warning("matrix account %r: %s; syncing again in %.1f s", account.name, exc, wait)
                await asyncio.sleep(wait)
            except Exception as exc:
                failures += 1
                wait = self._backoff(failures)
                self.links.failed(account.name, f"the sync failed ({str(exc) or type(exc).__name__})")
                _log.exception("matrix account %r: the sync failed; syncing again in %.1f s", account.name, wait)
                await asyncio.sleep(wait)

    async def _whoami(self, session: aiohttp.ClientSession, account: Account) -> str:
        body = await account.api.call(session, "GET", "/account/whoami")
        try:
            user_id = msgspec.json.decode(body, type=_WhoAmI).user_id
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise SyncError(f"the whoami answer has no user_id ({exc})") from None
        _log.info("matrix account %r: signed in as %s on %s", account.name, user_id, account.api.base_url)
        self._own_users.add(user_id)
        return user_id

    async def _sync(
        self, session: aiohttp.ClientSession, account: Account, user_id: str, state: AccountState
    ) -> AccountState:
        query = {"filter": self._filter, "timeout": str(self._config.poll_timeout_s * 1000)}
        if state.since is not None:
            query["since"] = state.since
        else:
            query["timeout"] = "0"  # the first sync is a snapshot: no reason to wait
        timeout = self._config.poll_timeout_s + _GRACE_S
        body = await account.api.call(session, "GET", "/sync", query=query, timeout=timeout)
        answer, repaired = decode_sync(body)
        if repaired:
            _log.warning(
                "matrix account %r: the /sync answer held invalid UTF-8, unpaired surrogates or values nested too "
                "deep; they were replaced before reading it",
                account.name,
            )
        batch = await self._reader.read(session, account, user_id, state, answer)
        if batch.messages or batch.state != state:
            await self._commit(account, batch)
        self._snapshots.put(account.name, batch.state)
        return batch.state

    async def _commit(self, account: Account, batch: Batch) -> None:
        cursor = PollCursor(platform=PLATFORM, cursor=encode_state(batch.state), account_id=account.name)
        results = await accept_many_async(self._inbox, batch.messages, cursor=cursor)  # a cancelled poll finishes it
        for message, result in zip(batch.messages, results, strict=True):
            if result.duplicate:
                _log.info(
                    "matrix account %r: event %s was stored before; no new turn", account.name, message.message_id
                )

    def _failed(self, account: Account, exc: ApiError, failures: int) -> float:
        """Log a failed sync and keep its error in :attr:`links`; return how long to wait before the next one."""
        error = str(exc).removeprefix(f"matrix account '{account.name}': ")
        if exc.token_refused:
            error = (
                f"{account.api.base_url} does not accept the access token ({exc.errcode or exc}); put a new token in "
                f"platforms.matrix.accounts.{account.name}.access_token (or the variable named by access_token_env)"
            )
        self.links.failed(account.name, error)
        if exc.retry_after_s is not None:
            _log.warning(
                "matrix account %r: the homeserver asked to wait %.1f s (%s)", account.name, exc.retry_after_s, exc
            )
            return exc.retry_after_s
        if exc.token_refused:
            wait = self._config.poll_retry_max_s
            _log.error(
                "matrix account %r: %s does not accept the access token (%s). Log the bot in again, put the new "
                "token in platforms.matrix.accounts.%s.access_token (or the variable named by access_token_env) and "
                "reload; trying again in %.0f s",
                account.name,
                account.api.base_url,
                exc.errcode or exc,
                account.name,
                wait,
            )
            return wait
        wait = self._backoff(failures)
        _log.warning("matrix account %r: the sync failed (%s); syncing again in %.1f s", account.name, exc, wait)
        return wait

    def _backoff(self, failures: int) -> float:
        return float(min(self._config.poll_retry_max_s, self._config.poll_retry_s * 2 ** min(failures - 1, 30)))
