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

Each account's sync is a :class:`~platforms.support.connections.Connection`: an answered sync says in its links that
it is up, a failed one says why (with the fix, for a refused token) until a sync is answered again.
"""

from __future__ import annotations

import logging
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
from platforms.support.connections import Connection, Ended, doubling
from platforms.support.links import Links

if TYPE_CHECKING:
    from hermes_actors.ports import ChatInbox

__all__ = ["AccountSync"]

_log = logging.getLogger(__name__)

_GRACE_S = 15.0  # beyond the long-poll timeout, how long an answer may take before the sync counts as failed


class _WhoAmI(msgspec.Struct, frozen=True, kw_only=True):
    user_id: str


class AccountSync(Connection):
    """The ``/sync`` long poll of one account, feeding its messages to ``inbox``: an attempt signs in (once) and
    syncs until a sync fails, and the count of failures restarts with each answered sync.

    ``reader`` reads the answers of every account of the adapter; ``own_users`` is the set of those accounts'
    users, to which this one adds its own once signed in.
    """

    def __init__(
        self,
        account: Account,
        inbox: ChatInbox,
        config: MatrixConfig,
        snapshots: Snapshots,
        links: Links,
        *,
        reader: SyncReader,
        own_users: set[str],
    ) -> None:
        super().__init__(account.name, inbox, who=f"matrix account {account.name!r}", links=links, log=_log)
        self.account = account
        self._config = config
        self._snapshots = snapshots
        self._reader = reader
        self._own_users = own_users
        self._filter = sync_filter(config.timeline_limit)
        self._user_id: str | None = None
        self._state = decode_state(inbox.poll_cursor(PLATFORM, account.name), account.name)
        snapshots.put(account.name, self._state)

    async def attempt(self, http: aiohttp.ClientSession) -> Ended:
        account = self.account
        while True:
            if self._user_id is None:
                self._user_id = await self._whoami(http, account)
            self._state = await self._sync(http, account, self._user_id, self._state)
            self.connected()

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
        results = await accept_many_async(self.inbox, batch.messages, cursor=cursor)  # a cancelled poll finishes it
        for message, result in zip(batch.messages, results, strict=True):
            if result.duplicate:
                _log.info(
                    "matrix account %r: event %s was stored before; no new turn", account.name, message.message_id
                )

    def failure(self, exc: Exception) -> Ended:
        """A failed sync: the homeserver's error (with the fix, for a refused token) and the wait it asks for."""
        if isinstance(exc, SyncError):
            return Ended(str(exc), error=exc)
        if not isinstance(exc, ApiError):
            return Ended(f"the sync failed ({str(exc) or type(exc).__name__})", error=exc)
        error = str(exc).removeprefix(f"{self.who}: ")
        wait = exc.retry_after_s
        if exc.token_refused:
            error = (
                f"{self.account.api.base_url} does not accept the access token ({exc.errcode or exc}); put a new "
                f"token in platforms.matrix.accounts.{self.name}.access_token (or the variable named by "
                "access_token_env)"
            )
            wait = self._config.poll_retry_max_s if wait is None else wait
        return Ended(error, wait, error=exc)

    def retrying(self, ended: Ended, wait: float) -> None:
        exc, name = ended.error, self.name
        if isinstance(exc, SyncError):
            _log.warning("matrix account %r: %s; syncing again in %.1f s", name, exc, wait)
        elif not isinstance(exc, ApiError):
            _log.error("matrix account %r: the sync failed; syncing again in %.1f s", name, wait, exc_info=exc)
        elif exc.retry_after_s is not None:
            _log.warning("matrix account %r: the homeserver asked to wait %.1f s (%s)", name, wait, exc)
        elif exc.token_refused:
            _log.error(
                "matrix account %r: %s does not accept the access token (%s). Log the bot in again, put the new "
                "token in platforms.matrix.accounts.%s.access_token (or the variable named by access_token_env) and "
                "reload; trying again in %.0f s",
                name,
                self.account.api.base_url,
                exc.errcode or exc,
                name,
                wait,
            )
        else:
            _log.warning("matrix account %r: the sync failed (%s); syncing again in %.1f s", name, exc, wait)

    def backoff(self, failures: int) -> float:
        return doubling(failures, self._config.poll_retry_s, self._config.poll_retry_max_s)
