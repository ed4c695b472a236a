"""``/sync`` long polls, one task per account on one background event loop.

Each answer is read into inbound messages and a new :class:`~platforms.matrix.state.AccountState` whose ``since``
is the answer's ``next_batch``; both are committed in one transaction with ``gateway.accept_many(messages,
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
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING
from urllib.parse import quote

import aiohttp
import msgspec

from hermes_actors.messages import InboundMessage
from hermes_actors.ports import PollCursor
from platforms.matrix.client import Homeserver, room_path
from platforms.matrix.config import MatrixConfig
from platforms.matrix.events import (
    ENCRYPTED,
    PLATFORM,
    checked_room_id,
    inbound_message,
    incoming_of,
)
from platforms.matrix.files import attach_file
from platforms.matrix.state import AccountState, Draft, Snapshots, decode_state, encode_state
from platforms.matrix.timeline import after_join, backfill, decode_events, note_state, page_filter, sync_filter, unique
from platforms.matrix.wire import (
    ApiError,
    EventError,
    InvitedRoom,
    JoinedRoom,
    MemberContent,
    RoomEvent,
    Rooms,
    StrippedEvent,
    SyncAnswer,
    SyncError,
    decode_as,
    decode_sync,
)
from platforms.support.task_thread import TaskThread

if TYPE_CHECKING:
    from hermes_actors.ports import Inbox

__all__ = ["Account", "Poller"]

_log = logging.getLogger(__name__)

_GRACE_S = 15.0  # beyond the long-poll timeout, how long an answer may take before the sync counts as failed


class Account(msgspec.Struct, frozen=True, kw_only=True):
    """One account as the poller sees it."""

    name: str
    api: Homeserver
    auto_join: bool = True


class _Batch(msgspec.Struct, frozen=True, kw_only=True):
    messages: list[InboundMessage]
    state: AccountState


class _AccountData(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    content: msgspec.Raw = msgspec.Raw(b"{}")


class _Events(msgspec.Struct, frozen=True, kw_only=True):
    events: list[msgspec.Raw] = msgspec.field(default_factory=list)


class _WhoAmI(msgspec.Struct, frozen=True, kw_only=True):
    user_id: str


class _JoinedMembers(msgspec.Struct, frozen=True, kw_only=True):
    joined: dict[str, msgspec.Raw] = msgspec.field(default_factory=dict)


class Poller:
    """Long-polls ``/sync`` for every account and feeds their messages to ``gateway``."""

    def __init__(
        self,
        accounts: Sequence[Account],
        inbox: Inbox,
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
        self._page_filter = page_filter()
        self._encrypted_seen: set[tuple[str, str]] = set()
        self._own_users: set[str] = set()  # every account's user: bots of ours never answer each other
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
        return decode_state(self._inbox.cursor(PLATFORM, account), account)

    # -- the loop --------------------------------------------------------------------------------------------------

    async def _poll(self, session: aiohttp.ClientSession, account: Account, state: AccountState) -> None:
        user_id: str | None = None
        failures = 0
        while True:
            try:
                if user_id is None:
                    user_id = await self._whoami(session, account)
                state = await self._sync(session, account, user_id, state)
                failures = 0
            except asyncio.CancelledError:
                raise
            except ApiError as exc:
                failures += 1
                await asyncio.sleep(self._failed(account, exc, failures))
            except SyncError as exc:
                failures += 1
                wait = self._backoff(failures)
                _log.warning("matrix account %r: %s; syncing again in %.1f s", account.name, exc, wait)
                await asyncio.sleep(wait)
            except Exception:
                failures += 1
                wait = self._backoff(failures)
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
        batch = await self._read(session, account, user_id, state, answer)
        if batch.messages or batch.state != state:
            self._commit(account, batch)
        self._snapshots.put(account.name, batch.state)
        return batch.state

    def _commit(self, account: Account, batch: _Batch) -> None:
        cursor = PollCursor(platform=PLATFORM, cursor=encode_state(batch.state), account_id=account.name)
        # Blocking on purpose: a cancelled poll still finishes its commit, so stop() never splits a batch.
        results = self._inbox.accept_many(batch.messages, cursor=cursor)
        for message, result in zip(batch.messages, results, strict=True):
            if result.duplicate:
                _log.info(
                    "matrix account %r: event %s was stored before; no new turn", account.name, message.message_id
                )

    def _failed(self, account: Account, exc: ApiError, failures: int) -> float:
        """Log a failed sync; return how long to wait before the next one."""
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

    # -- reading an answer -----------------------------------------------------------------------------------------

    async def _read(
        self,
        session: aiohttp.ClientSession,
        account: Account,
        user_id: str,
        state: AccountState,
        answer: SyncAnswer,
    ) -> _Batch:
        draft = Draft(state)
        first = state.since is None
        self._read_account_data(account, draft, answer.account_data)
        try:
            rooms = decode_as(answer.rooms, Rooms, "$.rooms of the /sync answer")
        except EventError as exc:
            _log.warning("matrix account %r: skipped every room of a /sync answer: %s", account.name, exc)
            rooms = Rooms()
        for room_id in rooms.leave:
            draft.forget(room_id)
        for room_id, raw in rooms.invite.items():
            await self._invited(session, account, user_id, draft, room_id, raw)
        messages: list[InboundMessage] = []
        for room_id, raw in rooms.join.items():
            messages += await self._joined(session, account, user_id, draft, room_id, raw, first=first)
        draft.since = answer.next_batch
        return _Batch(messages=messages, state=draft.freeze())

    def _read_account_data(self, account: Account, draft: Draft, raw: msgspec.Raw) -> None:
        """``m.direct`` (``{user id: [room id, ...]}``) replaces the set of direct rooms when it comes."""
        try:
            events = decode_as(raw, _Events, "$.account_data").events
        except EventError as exc:
            _log.warning("matrix account %r: skipped the account data of a /sync answer: %s", account.name, exc)
            return
        for event_raw in events:
            try:
                event = decode_as(event_raw, _AccountData, "an account data event")
                if event.type != "m.direct":
                    continue
                direct = decode_as(event.content, dict[str, list[str]], "m.direct")
            except EventError as exc:
                _log.warning("matrix account %r: ignored account data: %s", account.name, exc)
                continue
            draft.direct = {room for rooms in direct.values() for room in rooms}

    async def _invited(
        self,
        session: aiohttp.ClientSession,
        account: Account,
        user_id: str,
        draft: Draft,
        room_id: str,
        raw: msgspec.Raw,
    ) -> None:
        try:
            checked_room_id(room_id)
            invite = decode_as(raw, InvitedRoom, f"the invite to {room_id[:80]}")
        except EventError as exc:
            _log.warning("matrix account %r: skipped an invite: %s", account.name, exc)
            return
        direct, inviter = False, "someone"
        for event_raw in invite.invite_state.events:
            try:
                event = decode_as(event_raw, StrippedEvent, "an invite state event")
                if event.type != "m.room.member" or event.state_key != user_id:
                    continue
                member = decode_as(event.content, MemberContent, "the invite's membership")
            except EventError:
                continue
            direct, inviter = bool(member.is_direct), event.sender or inviter
        if direct:
            draft.update(room_id, invited_direct=True)
        kind = "a direct chat" if direct else "a room"
        if not account.auto_join:
            _log.info(
                "matrix account %r: %s invited the bot to %s %s; auto_join is off, so it stays invited (set "
                "platforms.matrix.accounts.%s.auto_join: true, or join with another client)",
                account.name,
                inviter,
                kind,
                room_id,
                account.name,
            )
            return
        try:
            await account.api.call(session, "POST", "/join/" + quote(room_id, safe=""), body={})
        except ApiError as exc:
            if exc.transient:
                raise  # the sync is asked again, and so is the invite
            _log.warning("matrix account %r: could not join %s %s: %s", account.name, kind, room_id, exc)
            return
        _log.info("matrix account %r: joined %s %s (invited by %s)", account.name, kind, room_id, inviter)

    async def _joined(
        self,
        session: aiohttp.ClientSession,
        account: Account,
        user_id: str,
        draft: Draft,
        room_id: str,
        raw: msgspec.Raw,
        *,
        first: bool,
    ) -> list[InboundMessage]:
        try:
            checked_room_id(room_id)
            joined = decode_as(raw, JoinedRoom, f"room {room_id[:80]}")
        except EventError as exc:
            _log.warning("matrix account %r: skipped a room of a /sync answer: %s", account.name, exc)
            return []
        count = joined.summary.joined_member_count
        if count is not None and count >= 0:
            draft.update(room_id, members=count)
        where = f"matrix account '{account.name}': room {room_id}"
        names: dict[str, str] = {}
        events = decode_events(joined.timeline.events, where)
        note_state(draft, room_id, names, [*decode_events(joined.state.events, where), *events])
        last = draft.room(room_id).last
        if joined.timeline.limited and last is not None and not first and all(e.event_id != last for e in events):
            missed = await backfill(
                session,
                account.api,
                room_id,
                joined.timeline.prev_batch,
                last,
                limit=self._config.backfill_limit,
                filter_json=self._page_filter,
            )
            events = unique([*missed, *events])
        fresh = self._fresh(account, room_id, user_id, events, last, first=first)
        if events:
            draft.update(room_id, last=events[-1].event_id)
        return await self._messages(session, account, user_id, draft, room_id, fresh, names)

    async def _messages(
        self,
        session: aiohttp.ClientSession,
        account: Account,
        user_id: str,
        draft: Draft,
        room_id: str,
        events: Iterable[RoomEvent],
        names: dict[str, str],
    ) -> list[InboundMessage]:
        """The inbound messages among ``events`` of ``room_id``; what starts no turn is skipped (and logged if bad)."""
        messages: list[InboundMessage] = []
        for event in events:
            if event.type == ENCRYPTED:
                self._encrypted(account, room_id)
                continue
            if event.sender == user_id or event.sender in self._own_users:
                continue  # our own replies, or another account's of this adapter (they would answer each other)
            try:
                incoming = incoming_of(event)
            except EventError as exc:
                _log.warning("matrix account %r: skipped an event in %s: %s", account.name, room_id, exc)
                continue
            if incoming is None:
                continue
            direct = draft.is_direct(room_id)
            if direct is None:
                direct = await self._count_members(session, account, draft, room_id)
            inbound = inbound_message(
                incoming,
                account_id=account.name,
                room_id=room_id,
                direct=direct,
                room_name=draft.room(room_id).name,
                user_name=names.get(incoming.sender),
                received_at=self._clock(),
            )
            if incoming.file is not None:
                inbound = await attach_file(
                    inbound,
                    incoming.file,
                    api=account.api,
                    media=self._inbox.media,
                    session=session,
                    timeout_s=self._config.request_timeout_s,
                )
            messages.append(inbound)
        return messages

    def _fresh(
        self,
        account: Account,
        room_id: str,
        user_id: str,
        events: list[RoomEvent],
        last: str | None,
        *,
        first: bool,
    ) -> list[RoomEvent]:
        """The events that may start turns: all but history (a first sync, what came before the bot joined).

        An event seen before (a repeated answer) is not filtered here: the inbox's dedupe on the event id drops it.
        """
        if first:
            return events if self._config.answer_history else []
        if last is not None:
            return events
        fresh, before = after_join(events, user_id)
        if before:
            _log.info(
                "matrix account %r: %d messages in %s are from before the bot joined; they are not answered",
                account.name,
                before,
                room_id,
            )
        return fresh

    async def _count_members(
        self, session: aiohttp.ClientSession, account: Account, draft: Draft, room_id: str
    ) -> bool:
        """Count the joined members of a room nothing is known about; return whether it is a DM (two members)."""
        try:
            body = await account.api.call(session, "GET", room_path(room_id, "joined_members"))
            count = len(decode_as(body, _JoinedMembers, "the joined_members answer").joined)
        except ApiError as exc:
            if exc.transient:
                raise
            _log.warning(
                "matrix account %r: cannot count the members of %s (%s); taking it as a group",
                account.name,
                room_id,
                exc,
            )
            return False
        except EventError as exc:
            _log.warning("matrix account %r: %s; taking %s as a group", account.name, exc, room_id)
            return False
        draft.update(room_id, members=count)
        return count == 2

    def _encrypted(self, account: Account, room_id: str) -> None:
        if (account.name, room_id) in self._encrypted_seen:
            return
        self._encrypted_seen.add((account.name, room_id))
        _log.warning(
            "matrix account %r: room %s is end-to-end encrypted and this adapter cannot read encrypted messages; "
            "talk to the bot in an unencrypted room, or run an E2EE proxy (such as pantalaimon) as its homeserver",
            account.name,
            room_id,
        )
