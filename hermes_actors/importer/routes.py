"""The source's routing table, into our directory.

Every entry (``gateway_routing``, then any ``sessions.json``) has its key translated (:mod:`.keys`) into the one
the live adapter builds. When several
entries give one key, the newest wins (at the same time, the table over ``sessions.json``) and the others are
reported as superseded. A winner is routed when its session was imported and the key is free here, reaches that
session already, or reaches a session that has ended here (a route to an ended session only starts a new one);
a key that reaches another live session here keeps it, and the conflict is reported. All in one transaction,
after every session is in.
"""

from __future__ import annotations

import math
from collections.abc import Set

from hermes_actors.importer.keys import KeyOutcome, KeyTranslation, translate_key
from hermes_actors.importer.report import RouteAction, RouteNote
from hermes_actors.importer.source import HermesRoute, HermesSession, HermesSource
from hermes_actors.importer.target import Target
from hermes_actors.importer.tenancy import LiveAccounts
from hermes_actors.routing import SessionSource

__all__ = ["import_routes", "key_sources"]

_ROUTED = {KeyOutcome.MOVED: RouteAction.MOVED, KeyOutcome.KEPT_FOR_CLAIM: RouteAction.KEPT_FOR_CLAIM}


def key_sources(session: HermesSession, extra: SessionSource | None = None) -> list[SessionSource]:
    """What a key of ``session`` may have been built from, best first: ``extra``, its origin, its columns."""
    columns = SessionSource(
        platform=session.source,
        chat_type=session.chat_type or "dm",
        chat_id=session.chat_id,
        thread_id=session.thread_id,
        user_id=session.user_id,
    )
    return [s for s in (extra, session.origin, columns) if s is not None]


def _rank(entry: HermesRoute) -> tuple[float, bool]:
    """Newer entries win; at the same time, the table wins over sessions.json."""
    return (entry.updated_at if entry.updated_at is not None else -math.inf, entry.found_in == "gateway_routing")


class _Routes:
    def __init__(self, source: HermesSource, target: Target, source_ids: Set[str], live: LiveAccounts) -> None:
        self.source = source
        self.target = target
        self.source_ids = source_ids
        self.live = live
        self.notes: list[RouteNote] = []

    def translate(self, entry: HermesRoute) -> KeyTranslation | None:
        """The entry's key here, or ``None`` (noted) when it gets none."""
        if entry.problem is not None or entry.session_id is None:
            self._note(entry, RouteAction.SKIPPED, entry.problem or "its entry names no session")
            return None
        session = self.source.session(entry.session_id)
        sources = key_sources(session, entry.origin) if session is not None else [s for s in (entry.origin,) if s]
        scope = (entry.origin.scope_id if entry.origin else None) or (session.scope_id if session else None)
        translated = translate_key(entry.key, sources, scope_id=scope, live=self.live)
        if translated.outcome is KeyOutcome.REFUSED:
            self._note(entry, RouteAction.REFUSED, translated.reason)
        elif translated.outcome is KeyOutcome.UNMAPPED:
            self._note(entry, RouteAction.UNMAPPED, translated.reason)
        elif translated.outcome is KeyOutcome.UNREADABLE:
            self._note(entry, RouteAction.SKIPPED, f"the key cannot be translated: {translated.reason}")
        return translated if translated.key is not None else None

    def _note(self, entry: HermesRoute, action: RouteAction, reason: str, new_key: str | None = None) -> None:
        self.notes.append(
            RouteNote(key=entry.key, session_id=entry.session_id, action=action, new_key=new_key, reason=reason)
        )

    def winners(self, entries: list[HermesRoute]) -> dict[str, tuple[HermesRoute, KeyTranslation]]:
        """One entry per key here, the newest; the others are noted as superseded."""
        winners: dict[str, tuple[HermesRoute, KeyTranslation]] = {}
        for entry in entries:
            translated = self.translate(entry)
            if translated is None or translated.key is None:
                continue
            previous = winners.get(translated.key)
            if previous is None:
                winners[translated.key] = (entry, translated)
                continue
            older, newer = sorted((previous, (entry, translated)), key=lambda pair: _rank(pair[0]))
            reason = f"a newer entry ({newer[0].found_in}) gives the same key"
            self._note(older[0], RouteAction.SUPERSEDED, reason, new_key=translated.key)
            winners[translated.key] = newer
        return winners

    def route(self, key: str, entry: HermesRoute, translated: KeyTranslation) -> None:
        """Route ``key`` to the entry's session unless something here stands in the way; note the outcome."""
        session_id = entry.session_id or ""
        action, reason = _ROUTED.get(translated.outcome, RouteAction.ADDED), translated.reason
        if self.target.ledger(session_id) is None or self.target.session_ended(session_id) is None:
            action = RouteAction.SKIPPED
            reason = (
                f"its session {session_id} was not imported (see the skipped sessions)"
                if session_id in self.source_ids
                else f"its session {session_id} is not in the source database"
            )
        else:
            current = self.target.route(key)
            if current == session_id:
                action, reason = RouteAction.PRESENT, "the key already reaches this session here"
            elif current is not None and not self.target.session_ended(current):
                action, reason = RouteAction.CONFLICT, f"the key already reaches live session {current} here"
            else:
                if current is not None:
                    action, reason = RouteAction.REPLACED, f"the key reached {current}, which has ended here"
                self.target.set_route(key, session_id, entry.updated_at)
        self._note(entry, action, reason, new_key=key)


def import_routes(
    source: HermesSource, target: Target, source_ids: Set[str], live: LiveAccounts
) -> tuple[list[RouteNote], list[str], int]:
    """Import the source's routing entries; return the notes, warnings and how many entries the source has.

    ``source_ids`` are the ids of every session of the source (to tell "not imported" from "not there"); ``live``
    is what the live adapters key by.
    """
    entries, warnings = source.routes()
    routes = _Routes(source, target, source_ids, live)
    winners = routes.winners(entries)
    with target.transaction():
        for key, (entry, translated) in winners.items():
            routes.route(key, entry, translated)
    return routes.notes, warnings, len(entries)
