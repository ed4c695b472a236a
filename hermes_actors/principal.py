"""Who is asking: the principal of a message, and which sessions it may see.

A :class:`Principal` is (platform, scope_id, account_id, participant), derived from a
:class:`~hermes_actors.routing.SessionSource` here and nowhere else. A session belongs to the principal that opened
it; commands, the agent's ``session_search`` tool, memories and the API compare all four parts, and answer for
another principal's session exactly as for a missing one. The operator (``hermesctl``) sees everything.
"""

from __future__ import annotations

import msgspec

from hermes_actors.config import SearchScope
from hermes_actors.routing import SessionSource, format_platform_segment
from hermes_actors.store.records import SessionFilter, SessionRecord

__all__ = ["Principal", "SearchScope", "visible_sessions"]


def _absent(value: str | None) -> str | None:
    return value or None


class Principal(msgspec.Struct, frozen=True):
    """The party a message speaks for. Empty strings count as absent, as in routing."""

    platform: str
    scope_id: str | None
    account_id: str | None
    participant: str | None

    @classmethod
    def of(cls, source: SessionSource) -> Principal:
        """The principal of a message from ``source`` (the participant is ``user_id_alt`` or ``user_id``)."""
        return cls(
            source.platform, _absent(source.scope_id), _absent(source.account_id), _absent(source.participant_id)
        )

    @classmethod
    def of_record(cls, record: SessionRecord) -> Principal:
        """The principal that opened ``record`` (the store keeps the participant as ``user_id``)."""
        return cls(record.source, _absent(record.scope_id), _absent(record.account_id), _absent(record.user_id))

    def owns(self, record: SessionRecord) -> bool:
        """Whether ``record`` belongs to this principal."""
        return Principal.of_record(record) == self

    def sessions(self) -> SessionFilter:
        """The store filter of this principal's sessions."""
        return SessionFilter(
            source=self.platform, scope_id=self.scope_id, account_id=self.account_id, user_id=self.participant
        )

    def tenant(self) -> SessionFilter:
        """The store filter of every session of this principal's tenant (platform, scope and bot account)."""
        return SessionFilter(source=self.platform, scope_id=self.scope_id, account_id=self.account_id)

    @property
    def memory_key(self) -> str | None:
        """The key memories about this principal are kept under, or ``None`` without a participant.

        ``<platform>[.<scope>][~<account>]:<participant>``: without scope and account it is the
        ``<platform>:<participant>`` key earlier releases wrote.
        """
        if self.participant is None:
            return None
        return f"{format_platform_segment(self.platform, self.scope_id, self.account_id)}:{self.participant}"


def visible_sessions(source: SessionSource, scope: SearchScope) -> SessionFilter:
    """The sessions a message from ``source`` may search under ``scope``."""
    principal = Principal.of(source)
    match scope:
        case SearchScope.USER:
            return principal.sessions()
        case SearchScope.CHAT:
            return principal.tenant().also(chat_id=source.chat_id)
        case SearchScope.TENANT:
            return principal.tenant()
        case SearchScope.ALL:
            return SessionFilter()
