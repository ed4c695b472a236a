"""The principal an imported session belongs to here: the platform, workspace and bot account its live adapter keys
the chat by (:func:`~hermes_actors.importer.tenancy.tenancy`), so its user can continue it and ``/resume`` it.

A new session is written with it; a session an earlier run imported takes what it lacked (our platform name for the
reference's, a workspace, an account), under its lease, and what it has is never changed (a workspace may have
claimed it since). A session without an account to take is noted: no adapter here reaches it.
"""

from __future__ import annotations

import msgspec

from hermes_actors.importer.report import SessionNote
from hermes_actors.importer.rows import bare_record
from hermes_actors.importer.source import HermesSession
from hermes_actors.importer.target import Target
from hermes_actors.importer.tenancy import LiveAccounts, Tenancy, tenancy
from hermes_actors.store import SessionRecord

__all__ = ["Principals"]


class Principals:
    """The principals of one run's sessions, over ``target``, as the adapters of ``live`` key their chats."""

    def __init__(self, target: Target, live: LiveAccounts) -> None:
        self.target = target
        self.live = live
        self.unmapped: list[SessionNote] = []
        self.updated = 0

    def where(self, session: HermesSession) -> Tenancy:
        """Where ``session``'s chat is keyed here; a session without an account to take is noted."""
        chat_type = session.chat_type or (session.origin.chat_type if session.origin is not None else None)
        where = tenancy(self.live, session.source, chat_type, session.scope_id)
        if where.unmapped is not None:
            self.unmapped.append(SessionNote(session_id=session.id, reason=where.unmapped))
        return where

    def record(self, session: HermesSession) -> SessionRecord:
        """:func:`~hermes_actors.importer.rows.bare_record` of a new ``session``, with its principal."""
        where = self.where(session)
        return msgspec.structs.replace(
            bare_record(session), source=where.platform, scope_id=where.scope_id, account_id=where.account_id
        )

    def as_stored(self, session: HermesSession) -> SessionRecord:
        """:func:`~hermes_actors.importer.rows.bare_record` of ``session`` with the principal it has here."""
        source, scope_id, account_id = self.target.principal(session.id) or (session.source, None, None)
        return msgspec.structs.replace(bare_record(session), source=source, scope_id=scope_id, account_id=account_id)

    def adopt(self, session: HermesSession) -> str | None:
        """Give ``session`` (imported earlier) what it lacks of its principal; return why it could not (a live
        process holds the session: the import leaves it alone this time), else ``None``."""
        current = self.target.principal(session.id)
        where = self.where(session)
        if current is None:
            return None
        source, scope_id, account_id = current
        wanted = (
            where.platform if source == session.source else source,
            scope_id or where.scope_id,
            account_id or where.account_id,
        )
        if wanted == current:
            return None
        holder = self.target.hold(session.id)
        if holder is not None:
            return (
                f"it is open here (a live session's lease is held by {holder}), so neither the account and workspace "
                "its adapter uses nor what the source added since were given to it; run the import again once the "
                "session is idle"
            )
        self.target.set_principal(session.id, wanted)
        self.updated += 1
        return None
