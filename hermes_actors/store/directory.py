"""The session directory of a store (:class:`Directory`): the sessions, routes and resolution tables, the lineage
walks over them, and the methods of :class:`~hermes_actors.store.interface.SessionDirectory`, one line each over
them. :class:`~hermes_actors.store.sql_store.SqlStore`, which both stores are, builds on it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from hermes_actors.ids import SessionKind, new_session_id
from hermes_actors.routing import SessionSource
from hermes_actors.store import lineage, lineage_list
from hermes_actors.store.attachments import Attachments
from hermes_actors.store.records import EndReason, LineagePage, SessionFilter, SessionRecord, TipFilter
from hermes_actors.store.resolution import SessionResolution
from hermes_actors.store.routes import Routes
from hermes_actors.store.sessions import Sessions
from hermes_actors.store.sql import SqlDb
from hermes_actors.titles import sanitize_title

__all__ = ["Directory"]


class Directory:
    """Sessions, titles, lineages and routes over ``sql`` (implements :class:`~.interface.SessionDirectory`);
    deleting a session takes its ``attachments`` along."""

    def __init__(self, sql: SqlDb, clock: Callable[[], float], attachments: Attachments) -> None:
        self.sql = sql
        self._clock = clock
        self.sessions = Sessions(sql, clock, attachments)
        self.routes = Routes(sql, clock, self.sessions)
        self.resolution = SessionResolution(sql, self.sessions)

    # -- sessions (see Sessions) --------------------------------------------------------------------------------

    def create_session(
        self,
        source: SessionSource | str,
        *,
        session_id: str | None = None,
        kind: SessionKind = SessionKind.GATEWAY,
        routing_key: str | None = None,
        model: str | None = None,
        title: str | None = None,
        system_prompt: str | None = None,
        parent_session_id: str | None = None,
        started_at: float | None = None,
        agent: str | None = None,
    ) -> SessionRecord:
        """Insert a live session and return it. ``source`` is a :class:`SessionSource` or a platform name.

        Raises :class:`TitleInUseError` when another session holds ``title`` (after sanitising).
        """
        origin = source if isinstance(source, SessionSource) else SessionSource(platform=source)
        now = self._clock() if started_at is None else started_at
        record = SessionRecord(
            id=session_id or new_session_id(kind),
            source=origin.platform,
            started_at=now,
            last_active_at=now,
            user_id=origin.user_id_alt or origin.user_id,
            user_name=origin.user_name,
            chat_id=origin.chat_id,
            chat_type=origin.chat_type,
            chat_name=origin.chat_name,
            thread_id=origin.thread_id,
            scope_id=origin.scope_id,
            account_id=origin.account_id,
            routing_key=routing_key,
            model=model,
            title=sanitize_title(title),
            system_prompt=system_prompt,
            parent_session_id=parent_session_id,
            agent=agent,
        )
        return self.sessions.create(record)

    def insert_session(self, record: SessionRecord) -> None:
        """Insert ``record`` exactly as it is (times, end, counters), for an import: its title must be free."""
        self.sessions.insert(record)

    def find_session(self, session_id: str) -> SessionRecord | None:
        """Return the session with exactly this id, or ``None``."""
        return self.sessions.find(session_id)

    def get_session(self, session_id: str) -> SessionRecord:
        """Return the session with exactly this id; raise :class:`SessionNotFoundError` if there is none."""
        return self.sessions.get(session_id)

    def find_sessions(self, session_ids: Sequence[str]) -> list[SessionRecord]:
        """Return the sessions with these ids in the order given; an id no session has is left out."""
        return self.sessions.find_many(session_ids)

    def end_session(self, session_id: str, reason: EndReason | str, *, at: float | None = None) -> SessionRecord:
        """End a live session with ``reason``; a session that already ended keeps its first reason."""
        return self.sessions.end(session_id, reason, at=at)

    def reopen_session(self, session_id: str) -> SessionRecord:
        """Make an ended session live again (``/resume`` of an ended session)."""
        return self.sessions.reopen(session_id)

    def set_principal(self, session_id: str, *, source: str, scope_id: str | None, account_id: str | None) -> None:
        """Set the platform, workspace and bot account ``session_id`` belongs to."""
        self.sessions.set_principal(session_id, source=source, scope_id=scope_id, account_id=account_id)

    def delete_session(self, session_id: str) -> bool:
        """Delete a session, its messages, attachments and routes; whether it existed."""
        return self.sessions.delete(session_id)

    def list_sessions(
        self,
        *,
        source: str | None = None,
        ended: bool | None = None,
        limit: int | None = 20,
        order: Literal["last_active", "started"] = "last_active",
        visible: SessionFilter | None = None,
        offset: int = 0,
    ) -> list[SessionRecord]:
        """Return sessions, most recently active (or started) first (see :meth:`Sessions.recent`)."""
        return self.sessions.recent(
            source=source, ended=ended, limit=limit, order=order, visible=visible, offset=offset
        )

    def title_holder(self, title: str) -> str | None:
        """Return the id of the session holding exactly ``title`` (no sanitising), or ``None``."""
        return self.sessions.title_holder(title)

    def set_title(self, session_id: str, title: str | None) -> str | None:
        """Sanitise and set the title (``None`` or blank clears it); return what was stored."""
        return self.sessions.set_title(session_id, title)

    def lineage_titles(self, base: str) -> list[str]:
        """Return ``base`` and every title that starts with ``"<base> #"`` that a session holds."""
        return self.sessions.lineage_titles(base)

    # -- resolution and lineages (see SessionResolution, lineage and lineage_list) -------------------------------

    def next_lineage_title(self, title: str) -> str:
        """Return the title a compression child of a session titled ``title`` should take (``"t #N"``)."""
        return self.resolution.next_lineage_title(title)

    def find_by_title(self, title: str, *, visible: SessionFilter | None = None) -> SessionRecord | None:
        """Return the session titled ``title``, or the newest segment of its lineage holding a numbered variant."""
        return self.resolution.find_by_title(title, visible=visible)

    def resolve_session(
        self, reference: str, *, visible: SessionFilter | None = None, unique: bool = False
    ) -> SessionRecord:
        """Find the session a user typed: exact id, then unique id prefix, then title."""
        return self.resolution.resolve_session(reference, visible=visible, unique=unique)

    def lineage_root(self, session_id: str) -> str:
        """Return the first session of the compression lineage ``session_id`` belongs to."""
        return lineage.root_on(self.sql, session_id)

    def lineage_tip(self, session_id: str) -> str:
        """Return the newest session continuing ``session_id`` through compressions (itself when none does)."""
        return lineage.tip_on(self.sql, session_id)

    def lineage_chain(self, session_id: str) -> list[str]:
        """Return the lineage through ``session_id``, root first and tip last."""
        return lineage.chain_on(self.sql, session_id)

    def list_lineages(
        self,
        *,
        source: str | None = None,
        ended: bool | None = None,
        limit: int | None = 20,
        visible: SessionFilter | None = None,
        preview_chars: int = lineage_list.DEFAULT_PREVIEW_CHARS,
        tips: Sequence[str] | None = None,
        offset: int = 0,
        tip: TipFilter | None = None,
    ) -> LineagePage:
        """Return one row per conversation (compression lineage), most recently active first, and how many there
        are in all (see :func:`.lineage_list.list_lineages`)."""
        return lineage_list.list_lineages(
            self.sql,
            source=source,
            ended=ended,
            limit=limit,
            visible=visible,
            preview_chars=preview_chars,
            tips=tips,
            offset=offset,
            tip=tip,
        )

    # -- routing directory (see Routes) --------------------------------------------------------------------------

    def get_route(self, routing_key: str) -> str | None:
        """Return the session id ``routing_key`` points at, or ``None``."""
        return self.routes.get(routing_key)

    def set_route(self, routing_key: str, session_id: str, *, at: float | None = None) -> None:
        """Point ``routing_key`` at ``session_id`` (creating or replacing the entry), dated ``at`` or now."""
        self.routes.set(routing_key, session_id, at=at)

    def unbind_route(self, routing_key: str) -> bool:
        """Remove the entry for ``routing_key``; return whether there was one."""
        return self.routes.unbind(routing_key)

    def unbind_session(self, session_id: str) -> list[str]:
        """Remove every route to ``session_id``; return the keys that pointed at it."""
        return self.routes.unbind_session(session_id)

    def routes_to(self, session_id: str) -> list[str]:
        """Return every routing key pointing at ``session_id``."""
        return self.routes.to(session_id)

    def repoint_routes(self, from_session_id: str, to_session_id: str) -> int:
        """Move every route of ``from_session_id`` to ``to_session_id`` (compression); return how many moved."""
        return self.routes.repoint(from_session_id, to_session_id)
