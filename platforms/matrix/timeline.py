"""What a room's timeline gives the poller: the filters that shape it, its events, names, and its gaps.

The ``/sync`` filter asks for room messages, stickers, encrypted events, memberships and names only (no presence,
typing or receipts). ``/rooms/{roomId}/messages`` pages use the same event types, so walking back from a gap's
``prev_batch`` meets the last event the poller saw: :func:`backfill` returns what lies between, oldest first, and
says plainly when it cannot close the gap (a longer gap than ``backfill_limit``, history the bot may not read).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable

import aiohttp

from platforms.matrix.client import Homeserver, room_path
from platforms.matrix.events import ENCRYPTED
from platforms.matrix.state import Draft
from platforms.matrix.wire import (
    ApiError,
    EventError,
    MemberContent,
    MessagesPage,
    NameContent,
    RoomEvent,
    decode_as,
    decode_event,
)

__all__ = [
    "TIMELINE_TYPES",
    "after_join",
    "backfill",
    "decode_events",
    "note_state",
    "page_filter",
    "sync_filter",
    "unique",
]

_log = logging.getLogger(__name__)

TIMELINE_TYPES = ("m.room.message", "m.sticker", ENCRYPTED, "m.room.member", "m.room.name")
_MESSAGE_TYPES = ("m.room.message", "m.sticker")
_PAGE = 100  # events asked for per backfill page
_MAX_DISPLAY_NAME = 200


def sync_filter(timeline_limit: int) -> str:
    """The inline ``/sync`` filter: room messages, names and members only; no presence, typing or receipts."""
    return json.dumps(
        {
            "presence": {"types": []},
            "account_data": {"types": ["m.direct"]},
            "room": {
                "timeline": {"limit": timeline_limit, "types": list(TIMELINE_TYPES)},
                "state": {"types": ["m.room.name", "m.room.member"], "lazy_load_members": True},
                "ephemeral": {"types": []},
                "account_data": {"types": []},
            },
        },
        separators=(",", ":"),
    )


def page_filter() -> str:
    """The ``/messages`` filter: the event types of the sync timeline, so a backfill meets the last one seen."""
    return json.dumps({"types": list(TIMELINE_TYPES), "lazy_load_members": True}, separators=(",", ":"))


def decode_events(raws: Iterable[bytes], where: str) -> list[RoomEvent]:
    """The events among ``raws`` that decode; the others are logged (``where`` names account and room)."""
    events: list[RoomEvent] = []
    for raw in raws:
        try:
            events.append(decode_event(raw))
        except EventError as exc:
            _log.warning("%s: skipped an event: %s", where, exc)
    return events


def note_state(draft: Draft, room_id: str, names: dict[str, str], events: Iterable[RoomEvent]) -> None:
    """Take the room's name (into ``draft``) and members' display names (into ``names``) from ``events``."""
    for event in events:
        try:
            if event.type == "m.room.name" and event.state_key == "":
                name = decode_as(event.content, NameContent, "m.room.name").name
                draft.update(room_id, name=(name.strip() or None) if name else None)
            elif event.type == "m.room.member" and event.state_key:
                member = decode_as(event.content, MemberContent, "m.room.member")
                if member.displayname and member.displayname.strip():
                    names[event.state_key] = member.displayname.strip()[:_MAX_DISPLAY_NAME]
        except EventError:
            continue  # names are cosmetic


def after_join(events: list[RoomEvent], user_id: str) -> tuple[list[RoomEvent], int]:
    """The events after ``user_id``'s last join among ``events`` (all when there is none), and how many messages
    came before it."""
    joins = [index for index, event in enumerate(events) if _is_join(event, user_id)]
    if not joins:
        return events, 0
    before = sum(1 for event in events[: joins[-1]] if event.type in _MESSAGE_TYPES)
    return events[joins[-1] + 1 :], before


def unique(events: Iterable[RoomEvent]) -> list[RoomEvent]:
    """``events`` without repeats of an event id (a backfilled page may overlap the timeline)."""
    seen: set[str] = set()
    kept: list[RoomEvent] = []
    for event in events:
        if event.event_id not in seen:
            seen.add(event.event_id)
            kept.append(event)
    return kept


async def backfill(
    session: aiohttp.ClientSession,
    api: Homeserver,
    room_id: str,
    prev_batch: str | None,
    last: str,
    *,
    limit: int,
    filter_json: str,
) -> list[RoomEvent]:
    """The events between ``last`` and a gapped timeline starting at ``prev_batch``, oldest first, at most ``limit``.

    A gap that cannot be closed is logged with the reason; the newest missed events are returned all the same.
    :class:`ApiError` escapes when asking again later can help (no answer, 429, 5xx).
    """
    where = f"matrix account '{api.name}': room {room_id}"
    collected: list[RoomEvent] = []  # newest first, as the pages come
    token = prev_batch
    if token is None:
        reason = "the timeline gave no prev_batch token to fetch them with"
    elif limit == 0:
        reason = "backfill_limit is 0, so gaps are only reported"
    else:
        reason = f"more than backfill_limit ({limit}) events are missing"
    while token is not None and len(collected) < limit:
        query = {"dir": "b", "from": token, "limit": str(min(_PAGE, limit - len(collected))), "filter": filter_json}
        try:
            body = await api.call(session, "GET", room_path(room_id, "messages"), query=query)
            page = decode_as(body, MessagesPage, "a /messages page")
        except ApiError as exc:
            if exc.transient:
                raise  # the sync is asked again and the gap with it
            reason = f"the homeserver refused them: {exc}"
            break
        except EventError as exc:
            reason = str(exc)
            break
        for event in decode_events(page.chunk, where):
            if event.event_id == last:
                _log.info("%s: fetched %d events missed in a gap of the timeline", where, len(collected))
                return collected[::-1]
            collected.append(event)
        if not page.chunk or page.end is None or page.end == token:
            reason = "the room's history visible to the bot ends before it"
            break
        token = page.end
    collected = collected[:limit]
    _log.warning(
        "%s: gap in the timeline: the events after %s were not all fetched (%s); the %d newest missed events are "
        "answered, older ones are not",
        where,
        last,
        reason,
        len(collected),
    )
    return collected[::-1]


def _is_join(event: RoomEvent, user_id: str) -> bool:
    if event.type != "m.room.member" or event.state_key != user_id:
        return False
    try:
        return decode_as(event.content, MemberContent, "m.room.member").membership == "join"
    except EventError:
        return False
