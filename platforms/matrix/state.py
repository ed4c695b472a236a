"""What an account remembers between syncs: the ``since`` token and, per room, what tells DMs from groups.

It is one :class:`AccountState`, stored as the account's poll cursor in the transaction that commits the inbox
rows of the sync it covers (``inbox.accept_many(batch, cursor=...)``). So after a crash the next ``/sync`` asks
from the position whose messages are all stored, and the homeserver sends nothing twice that the inbox had not
got; what it does send again collides with the inbox's dedupe on the event id.

Per room it keeps the newest event seen (where a gap's backfill stops), the joined member count, whether the room
was offered as a direct chat (``is_direct`` on the invite), and its name. A room is a DM when the account's
``m.direct`` account data lists it, when its invite said ``is_direct``, or when exactly two members (the bot and
one person) are joined; otherwise it is a group. The decision follows the room: when a third member joins a
two-person room that nobody marked direct, later messages are per-member group messages.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Set as AbstractSet

import msgspec

from platforms.support.cursors import CursorState

__all__ = ["AccountState", "Draft", "RoomInfo", "Snapshots", "decode_state", "encode_state"]

_log = logging.getLogger(__name__)

_MAX_NAME = 200


class RoomInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One joined room: ``last`` event seen, ``members`` joined, ``invited_direct``, ``name``."""

    last: str | None = None
    members: int | None = None
    invited_direct: bool = False
    name: str | None = None


class AccountState(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """An account's poll cursor as stored: the ``/sync`` position and the rooms' details."""

    v: int = 1
    since: str | None = None
    direct: frozenset[str] = frozenset()  # rooms listed in the account's m.direct
    rooms: dict[str, RoomInfo] = msgspec.field(default_factory=dict)

    def is_direct(self, room_id: str) -> bool | None:
        """Whether ``room_id`` is a DM; ``None`` when nothing is known about it yet (no mark, no member count)."""
        return _is_direct(room_id, self.rooms.get(room_id), self.direct)


def _is_direct(room_id: str, info: RoomInfo | None, direct: AbstractSet[str]) -> bool | None:
    if room_id in direct or (info is not None and info.invited_direct):
        return True
    if info is None or info.members is None:
        return None
    return info.members == 2


_cursor = CursorState(AccountState)


def encode_state(state: AccountState) -> str:
    """The cursor text for ``state``."""
    return _cursor.encode(state)


def decode_state(text: str | None, account: str) -> AccountState:
    """The state stored as cursor ``text``; something else is logged and a fresh state returned."""

    def invalid(_: str) -> AccountState:
        _log.warning(
            "matrix account %r: the stored cursor is not an account state; syncing from now, as on a first start",
            account,
        )
        return AccountState()

    return _cursor.decode(text, fresh=AccountState, invalid=invalid)


class Draft:
    """A mutable copy of an :class:`AccountState` for one sync; :meth:`freeze` makes the state to commit."""

    def __init__(self, state: AccountState) -> None:
        self.since = state.since
        self.direct = set(state.direct)
        self.rooms = dict(state.rooms)

    def room(self, room_id: str) -> RoomInfo:
        """What is known about ``room_id`` (empty for a room not seen yet)."""
        return self.rooms.get(room_id) or RoomInfo()

    def update(self, room_id: str, **changes: object) -> None:
        """Change fields of ``room_id``'s info (creating it)."""
        if "name" in changes and isinstance(changes["name"], str):
            changes["name"] = changes["name"][:_MAX_NAME]
        self.rooms[room_id] = msgspec.structs.replace(self.room(room_id), **changes)

    def forget(self, room_id: str) -> None:
        """The account left ``room_id``: drop what is known about it."""
        self.rooms.pop(room_id, None)
        self.direct.discard(room_id)

    def is_direct(self, room_id: str) -> bool | None:
        """As :meth:`AccountState.is_direct`, for the draft."""
        return _is_direct(room_id, self.rooms.get(room_id), self.direct)

    def freeze(self) -> AccountState:
        """The state to commit."""
        return AccountState(since=self.since, direct=frozenset(self.direct), rooms=dict(self.rooms))


class Snapshots:
    """The committed state of every account, for the sender (which quotes in groups only); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._states: dict[str, AccountState] = {}

    def put(self, account: str, state: AccountState) -> None:
        """Record ``account``'s newly committed state."""
        with self._lock:
            self._states[account] = state

    def is_direct(self, account: str, room_id: str) -> bool | None:
        """Whether ``room_id`` is a DM for ``account`` (``None``: unknown)."""
        with self._lock:
            state = self._states.get(account)
        return None if state is None else state.is_direct(room_id)
