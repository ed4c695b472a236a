"""Reading one ``/sync`` answer: account data, invites (joined when ``auto_join``), joined rooms' timelines with
their gaps backfilled, and the inbound messages that may start turns, with their files downloaded.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from urllib.parse import quote

import aiohttp
import msgspec

from hermes_actors.media import MediaStore
from hermes_actors.messages import InboundMessage
from platforms.matrix.client import Account, room_path
from platforms.matrix.config import MatrixConfig
from platforms.matrix.events import (
    ENCRYPTED,
    checked_room_id,
    inbound_message,
    incoming_of,
)
from platforms.matrix.files import attach_file
from platforms.matrix.state import AccountState, Draft
from platforms.matrix.timeline import after_join, backfill, decode_events, note_state, page_filter, unique
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
    decode_as,
)

__all__ = ["Batch", "SyncReader"]

_log = logging.getLogger(__name__)


class Batch(msgspec.Struct, frozen=True, kw_only=True):
    messages: list[InboundMessage]
    state: AccountState


class _AccountData(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    content: msgspec.Raw = msgspec.Raw(b"{}")


class _Events(msgspec.Struct, frozen=True, kw_only=True):
    events: list[msgspec.Raw] = msgspec.field(default_factory=list)


class _JoinedMembers(msgspec.Struct, frozen=True, kw_only=True):
    joined: dict[str, msgspec.Raw] = msgspec.field(default_factory=dict)


class SyncReader:
    """Reads ``/sync`` answers for the poller; ``own_users`` (every account's user, filled by the poller) are never
    answered, so two bots of ours in one room do not answer each other."""

    def __init__(
        self, config: MatrixConfig, *, media: MediaStore, clock: Callable[[], float], own_users: set[str]
    ) -> None:
        self._config = config
        self._media = media
        self._clock = clock
        self._own_users = own_users
        self._page_filter = page_filter()
        self._encrypted_seen: set[tuple[str, str]] = set()

    async def read(
        self,
        session: aiohttp.ClientSession,
        account: Account,
        user_id: str,
        state: AccountState,
        answer: SyncAnswer,
    ) -> Batch:
        """Read ``answer`` (a ``/sync`` answer to ``account`` in ``state``) into its messages and the next state."""
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
        return Batch(messages=messages, state=draft.freeze())

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
                    media=self._media,
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
