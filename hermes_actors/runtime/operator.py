"""The :class:`~hermes_actors.operator_port.Operator` of a running gateway: what the API server's ``/api/sessions``
routes do to every session.

Reads borrow a reader; creations and forks are one write each on the store writer; a rename, end or delete goes
through :class:`~hermes_actors.runtime.session_admin.LiveAdmin`, the path ``hermesctl sessions`` takes through
``hermesd``, so a session's live actor applies it and a session another process holds is refused
(:class:`~hermes_actors.errors.SessionBusyError`).

A fork ends its parent (reason ``branched``) through the parent's actor first, as an operator's end does (a turn of
it still running is cancelled, as ``/new`` cancels one), so nothing is added to the parent while its messages are
copied, then creates the child with a copy of the messages, the parent's frozen system
message and tools, and the title ``"<title> (N)"`` (:func:`~hermes_actors.titles.distinct_title`: ``#N`` numbers
compression lineages only). Attachments are not copied: the child's messages keep their text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

import msgspec

from hermes_actors.agents.tools import session_search_tool
from hermes_actors.errors import SessionClosedError
from hermes_actors.operator_port import (
    Audience,
    ConversationFilter,
    ConversationPage,
    SearchPage,
    SessionExistsError,
    SessionMessages,
    SessionPage,
    SessionView,
    TranscriptView,
)
from hermes_actors.routing import SessionSource
from hermes_actors.runtime import operator_reads
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.operator_reads import message_view, session_view
from hermes_actors.runtime.session_admin import LiveAdmin
from hermes_actors.runtime.store_access import StoreAccess
from hermes_actors.store import EndReason, NewMessage, Role, SessionRecord, StoreInterface
from hermes_actors.store.records import LineageRow, MessageRecord
from hermes_actors.titles import distinct_title, sanitize_title

__all__ = ["OPERATOR_PLATFORM", "GatewayOperator", "SessionAdmin"]

T = TypeVar("T")

OPERATOR_PLATFORM = "api_server"  # the source of sessions an operator creates (they are the API's)
_NO_SESSION = ""  # the current session of a search made outside any: no stored session has this id
_MAX_FORK_NUMBER = 1000
_FORK_SUFFIX = re.compile(r"^(?P<base>.*\S) \([1-9]\d{0,8}\)$")  # a fork's " (N)", so a fork of one counts on


def _lineage_view(row: LineageRow) -> SessionView:
    view = session_view(row.tip, lineage=row.members, preview=row.preview, listed=True)
    return msgspec.structs.replace(view, message_count=row.message_count)


def _copy(message: MessageRecord) -> NewMessage:
    return NewMessage(
        role=Role(message.role),
        content=message.content,
        tool_calls=message.tool_calls,
        tool_name=message.tool_name,
        tool_call_id=message.tool_call_id,
        token_count=message.token_count,
        created_at=message.created_at,
    )


class SessionAdmin(Protocol):
    """How an operator's rename, end and delete reach a session (and its live actor, wherever it runs);
    :class:`~hermes_actors.runtime.session_admin.LiveAdmin` on one machine."""

    def check(self, session_id: str) -> SessionRecord: ...

    def rename(self, record: SessionRecord, title: str) -> str | None: ...

    def end(self, record: SessionRecord, reason: EndReason = EndReason.OPERATOR) -> bool: ...

    def delete(self, record: SessionRecord) -> tuple[bool, bool]: ...


class GatewayOperator:
    """Implements :class:`hermes_actors.operator_port.Operator` on ``gateway``; ``admin_key`` is the key an
    operator must present (``None``: the operator's routes are off). ``gateway`` may be any :class:`StoreAccess`
    given with its ``admin`` (cluster mode); a :class:`Gateway`'s is its :class:`LiveAdmin`."""

    def __init__(self, gateway: StoreAccess, admin_key: str | None, *, admin: SessionAdmin | None = None) -> None:
        self._gateway = gateway
        if admin is None:
            if not isinstance(gateway, Gateway):
                raise TypeError("an operator on a store other than a gateway's needs its SessionAdmin")
            admin = LiveAdmin(gateway, timeout_s=gateway.config.ask_timeout_s)
        self._admin = admin
        self._key = admin_key

    @property
    def admin_key(self) -> str | None:
        """The admin key (``daemon.admin_key``, ``$HERMES_ADMIN_KEY`` or the home's generated one)."""
        return self._key

    def list_sessions(self, *, limit: int, offset: int, source: str | None, include_children: bool) -> SessionPage:
        """One row per lineage shown by its tip (or every session), most recently active first."""
        with self._gateway.read() as store:
            if include_children:
                records = store.list_sessions(source=source, limit=limit, offset=offset)
                total = store.count_exports(source=source)
                views = [session_view(record, listed=True) for record in records]
            else:
                page = store.list_lineages(source=source, limit=limit, offset=offset)
                total, views = page.total, [_lineage_view(row) for row in page.rows]
        return SessionPage(sessions=views, total=total, limit=limit, offset=offset)

    def recent_ends(self, *, limit: int) -> list[SessionView]:
        """The sessions that ended most recently, newest end first (ended sessions are no longer active, so the
        most recently active of them hold the latest ends)."""
        with self._gateway.read() as store:
            records = store.list_sessions(ended=True, limit=limit * 2)
        records.sort(key=lambda record: record.ended_at or 0.0, reverse=True)
        return [session_view(record, listed=True) for record in records[:limit]]

    def create_session(self, *, session_id: str | None, title: str | None, system_prompt: str | None) -> SessionView:
        """A live API session without a route; ``system_prompt`` is frozen into it by its first turn."""
        cleaned = sanitize_title(title)  # a TitleError before anything is written

        def create(store: StoreInterface) -> SessionRecord:
            if session_id is not None and store.find_session(session_id) is not None:
                raise SessionExistsError(f"a session with id {session_id} exists already; pick another id")
            source = SessionSource(platform=OPERATOR_PLATFORM, chat_type="dm", user_id="operator")
            gateway = self._gateway  # the bindings' agent, recorded now: its first turn finds the row
            agent = gateway.agents.bound(source).name if isinstance(gateway, Gateway) else None
            return store.create_session(
                source, session_id=session_id, title=cleaned, system_prompt=system_prompt, agent=agent
            )

        return session_view(self._gateway.write(create))

    def get_session(self, session_id: str) -> SessionView:
        """The session with exactly this id."""
        with self._gateway.read() as store:
            return session_view(store.get_session(session_id))

    def rename(self, session_id: str, title: str | None) -> SessionView:
        """Set or clear the title through the session's actor."""
        sanitize_title(title)  # a title too long is refused before the actor is troubled
        self._admin.rename(self._admin.check(session_id), title or "")
        return self.get_session(session_id)

    def end(self, session_id: str) -> SessionView:
        """End the session as an operator through its actor."""
        self._admin.end(self._admin.check(session_id))
        return self.get_session(session_id)

    def delete(self, session_id: str) -> bool:
        """End (if live) and delete the session."""
        return self._admin.delete(self._admin.check(session_id))[1]

    def messages(self, session_id: str, *, lineage: bool) -> SessionMessages:
        """The lineage's messages root first (or only the tip's)."""
        with self._gateway.read() as store:
            store.get_session(session_id)  # SessionNotFoundError for an unknown id
            chain = store.lineage_chain(store.lineage_tip(session_id))
            shown = chain if lineage else chain[-1:]
            messages = [message_view(m) for member in shown for m in store.load_transcript(member)]
        return SessionMessages(session_id=chain[-1], lineage=shown, messages=messages)

    def fork(self, session_id: str) -> SessionView:
        """End the session ``branched`` and start a child with a copy of its messages."""
        parent = self._admin.check(session_id)
        self._admin.end(parent, EndReason.BRANCHED)

        def fork(store: StoreInterface) -> SessionRecord:
            record = store.get_session(session_id)
            title = self._fork_title(store, record.title)
            source = SessionSource(
                platform=record.source,
                scope_id=record.scope_id,
                account_id=record.account_id,
                chat_type=record.chat_type or "dm",
                chat_id=record.chat_id,
                thread_id=record.thread_id,
                user_id=record.user_id,
            )
            child = store.create_session(
                source,
                model=record.model,
                title=title,
                system_prompt=record.system_prompt,
                parent_session_id=record.id,
                agent=record.agent,  # a branch keeps the agent of the conversation it continues
            )
            if record.tools is not None:
                store.freeze_prefix(child.id, system_prompt=record.system_prompt, tools=record.tools)
            copied = [_copy(m) for m in store.load_transcript(record.id)]
            if copied:
                store.append_messages(child.id, copied)
            return store.get_session(child.id)

        return session_view(self._gateway.write(fork))

    @staticmethod
    def _fork_title(store: StoreInterface, title: str | None) -> str | None:
        """``"<base> (N)"`` with the first N from 2 that no session holds (``None`` for an untitled parent)."""
        if title is None:
            return None
        match = _FORK_SUFFIX.match(title)
        base = match["base"] if match else title
        for number in range(2, _MAX_FORK_NUMBER):
            candidate = distinct_title(base, number)
            if store.title_holder(candidate) is None:
                return candidate
        return None

    def chat_target(self, session_id: str) -> str:
        """The newest session of ``session_id``'s lineage, when it is live and no other process holds it."""
        with self._gateway.read() as store:
            store.get_session(session_id)
            tip_id = store.lineage_tip(session_id)
        tip = self._admin.check(tip_id)
        if not tip.is_live:
            raise SessionClosedError(
                f"session {tip.id} has ended ({tip.end_reason}); fork it (POST /api/sessions/{tip.id}/fork) or "
                "create a new session to talk on"
            )
        return tip.id

    def conversations(self, where: ConversationFilter, *, limit: int, offset: int) -> ConversationPage:
        """One row per lineage passing ``where``, most recently active tip first."""
        with self._gateway.read() as store:
            return operator_reads.conversations(store, where, limit=limit, offset=offset)

    def search(self, query: str, *, sort: str, limit: int) -> SearchPage:
        """``session_search`` discovery over every session."""
        with self._gateway.read() as store:
            return operator_reads.search(store, query, sort=sort, limit=limit)

    def session_search(self, arguments: Mapping[str, Any], *, audience: Audience | None) -> str:
        """The agent's ``session_search`` tool over what ``audience`` sees, for a caller outside any session (its
        discovery and browse skip no conversation)."""
        visible = operator_reads.audience_filter(audience)
        return session_search_tool(self._gateway.read, _NO_SESSION, visible=visible).run(dict(arguments))

    def session_search_parameters(self) -> dict[str, Any]:
        """The agent's ``session_search`` parameters."""
        return session_search_tool(self._gateway.read, _NO_SESSION).parameters

    def transcript(self, session_id: str) -> TranscriptView:
        """The whole lineage through ``session_id`` with its segments and files."""
        with self._gateway.read() as store:
            return operator_reads.transcript(store, session_id)

    def export_lineage(self, session_id: str) -> bytes:
        """The lineage through ``session_id`` as ``hermesctl sessions export`` lines."""
        with self._gateway.read() as store:
            return operator_reads.export_lineage(store, session_id)
