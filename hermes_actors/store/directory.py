"""The session directory of a store (:class:`Directory`): the sessions, routes and resolution tables, the lineage
walks over them, and the methods of :class:`~hermes_actors.store.interface.SessionDirectory` over them (most a
:class:`~hermes_actors.store.delegate.delegate` of a table's method). :class:`~hermes_actors.store.sql_store.SqlStore`,
which both stores are, builds on it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hermes_actors.ids import SessionKind, new_session_id
from hermes_actors.routing import SessionSource
from hermes_actors.store import lineage, lineage_list
from hermes_actors.store.attachments import Attachments
from hermes_actors.store.delegate import delegate
from hermes_actors.store.records import LineagePage, SessionFilter, SessionRecord, TipFilter
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
        tools: str | None = None,
    ) -> SessionRecord:
        """Insert a live session and return it. ``source`` is a :class:`SessionSource` or a platform name;
        ``system_prompt`` and ``tools`` are its frozen prefix (as :meth:`freeze_prefix` stores it).

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
            tools=tools,
        )
        return self.sessions.create(record)

    insert_session = delegate("sessions", Sessions.insert)
    find_session = delegate("sessions", Sessions.find)
    session_owner = delegate("sessions", Sessions.owner)
    get_session = delegate("sessions", Sessions.get)
    find_sessions = delegate("sessions", Sessions.find_many)
    end_session = delegate("sessions", Sessions.end)
    reopen_session = delegate("sessions", Sessions.reopen)
    set_principal = delegate("sessions", Sessions.set_principal)
    delete_session = delegate("sessions", Sessions.delete)
    list_sessions = delegate("sessions", Sessions.recent)
    title_holder = delegate("sessions", Sessions.title_holder)
    set_title = delegate("sessions", Sessions.set_title)
    claim_title = delegate("sessions", Sessions.claim_title)
    lineage_titles = delegate("sessions", Sessions.lineage_titles)

    # -- resolution and lineages (see SessionResolution, lineage and lineage_list) -------------------------------

    next_lineage_title = delegate("resolution", SessionResolution.next_lineage_title)
    find_by_title = delegate("resolution", SessionResolution.find_by_title)
    resolve_session = delegate("resolution", SessionResolution.resolve_session)

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

    get_route = delegate("routes", Routes.get)
    set_route = delegate("routes", Routes.set)
    unbind_route = delegate("routes", Routes.unbind)
    unbind_session = delegate("routes", Routes.unbind_session)
    routes_to = delegate("routes", Routes.to)
    repoint_routes = delegate("routes", Routes.repoint)
