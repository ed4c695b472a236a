"""How a session is found by what a user typed, and the title rules around it: the part of
:class:`~hermes_actors.store.interface.SessionDirectory` that is the same on every store.

:class:`SessionResolution` is a base of both implementations' session classes
(:class:`~hermes_actors.store.sessions.SessionRows`, :class:`~hermes_actors.store.pg.sessions.PgSessionRows`): it
resolves ids, id prefixes and titles, walks a title along its compression lineage and refuses a title in use,
through the few lookups each store answers in its own SQL (:meth:`~SessionResolution.find_session`,
:meth:`~SessionResolution.find_sessions`, :meth:`~SessionResolution.title_holder`,
:meth:`~SessionResolution.lineage_titles`, :meth:`~SessionResolution._ids_with_prefix`,
:meth:`~SessionResolution._chain`), so the rules cannot drift apart between the stores.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

from hermes_actors.errors import AmbiguousSessionError, SessionNotFoundError, TitleInUseError
from hermes_actors.ids import SessionKind, new_session_id
from hermes_actors.routing import SessionSource
from hermes_actors.store.records import EndReason, SessionFilter, SessionRecord
from hermes_actors.titles import (
    check_chosen_title,
    lineage_base,
    lineage_number,
    next_lineage_title,
    sanitize_title,
)

__all__ = ["SessionResolution"]

_PREFIX_CANDIDATES = 11


class SessionResolution(abc.ABC):
    """Resolution and title rules over a store's own lookups (see the module docstring)."""

    @staticmethod
    def new_record(
        source: SessionSource | str,
        *,
        now: float,
        session_id: str | None,
        kind: SessionKind,
        routing_key: str | None,
        model: str | None,
        title: str | None,
        system_prompt: str | None,
        parent_session_id: str | None,
        agent: str | None = None,
    ) -> SessionRecord:
        """The row ``create_session`` inserts: a live session of ``source`` started ``now`` (a fresh id of
        ``kind`` unless ``session_id`` is given; the title sanitised)."""
        origin = source if isinstance(source, SessionSource) else SessionSource(platform=source)
        return SessionRecord(
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

    # -- the lookups each store implements ----------------------------------------------------------------------

    @abc.abstractmethod
    def find_session(self, session_id: str) -> SessionRecord | None:
        """The session with exactly this id, or ``None``."""
        ...

    @abc.abstractmethod
    def find_sessions(self, session_ids: Sequence[str]) -> list[SessionRecord]:
        """The sessions with these ids, in the order given (unknown ids left out)."""
        ...

    @abc.abstractmethod
    def title_holder(self, title: str) -> str | None:
        """The id of the session holding exactly ``title``, or ``None``."""
        ...

    @abc.abstractmethod
    def lineage_titles(self, base: str) -> list[str]:
        """``base`` and every ``"<base> #N"`` title a session holds."""
        ...

    @abc.abstractmethod
    def _ids_with_prefix(self, prefix: str, visible: SessionFilter, limit: int) -> list[str]:
        """Up to ``limit`` ids starting with ``prefix`` of sessions ``visible`` passes, in id order."""
        ...

    @abc.abstractmethod
    def _chain(self, session_id: str) -> list[str]:
        """The compression lineage through ``session_id``, root first."""
        ...

    # -- the rules ----------------------------------------------------------------------------------------------

    def get_session(self, session_id: str) -> SessionRecord:
        """Return the session with exactly this id; raise :class:`SessionNotFoundError` if there is none."""
        record = self.find_session(session_id)
        if record is None:
            raise SessionNotFoundError(f"no session has id {session_id!r}; list them with 'hermesctl sessions list'")
        return record

    def _check_title_free(self, title: str | None, session_id: str) -> None:
        if title is None:
            return
        holder = self.title_holder(title)
        if holder is not None and holder != session_id:
            raise TitleInUseError(title, holder)

    def _check_chosen_title(self, title: str | None, session_id: str) -> None:
        """Refuse ``title`` for ``session_id`` when it ends in a lineage's ``" #N"`` and is not the session's own
        lineage title: its title now, or the one its compression parent's title numbers it (:class:`TitleError`)."""
        if title is None or lineage_number(title) == 1:
            return
        record = self.find_session(session_id)
        own: list[str | None] = [] if record is None else [record.title]
        parent = self.find_session(record.parent_session_id) if record and record.parent_session_id else None
        if parent is not None and parent.title and parent.end_reason == EndReason.COMPRESSION.value:
            own.append(next_lineage_title(parent.title, ()))
        check_chosen_title(title, own=own)

    def next_lineage_title(self, title: str) -> str:
        """Return the title a compression child of a session titled ``title`` should take (``"t #N"``)."""
        return next_lineage_title(title, self.lineage_titles(lineage_base(title)))

    def find_by_title(self, title: str, *, visible: SessionFilter | None = None) -> SessionRecord | None:
        """Return the session titled ``title``, or the newest segment of its lineage holding a numbered variant.

        The session holding exactly ``title`` is found first; of the sessions continuing it through compressions,
        the newest whose title is ``"<title> #N"`` is returned, so a conversation is found by its first title
        however often it was compressed. A ``"<title> #N"`` that is not in that lineage (a user's own title, an
        import) is never reached from ``title``, and without a holder of ``title`` nothing is found. With
        ``visible``, only sessions that pass it count: another principal's title is not found.
        """
        clean = sanitize_title(title)
        holder = self.title_holder(clean) if clean is not None else None
        record = self.find_session(holder) if holder is not None else None
        if record is None or (visible is not None and not visible.matches(record)):
            return None
        chain = self._chain(record.id)
        later = self.find_sessions(chain[chain.index(record.id) + 1 :])
        for member in reversed(later):
            numbered = member.title is not None and lineage_number(member.title) > 1
            if numbered and lineage_base(member.title or "") == clean and (visible is None or visible.matches(member)):
                return member
        return record

    def resolve_session(
        self, reference: str, *, visible: SessionFilter | None = None, unique: bool = False
    ) -> SessionRecord:
        """Find the session a user typed: exact id, then unique id prefix, then title.

        Raises :class:`AmbiguousSessionError` (naming the candidates) for a prefix of several ids and
        :class:`SessionNotFoundError` when nothing matches. With ``visible``, sessions that do not pass it are
        not there at all: they match nothing and are never named as candidates. ``unique=True`` is for commands
        that change or destroy what they name: a title then names only the session holding exactly it, not the newest
        segment of its lineage (:meth:`find_by_title`). A title no session holds but numbered variants do
        (``"t #2"``, ...) is refused either way, with those sessions as candidates.
        """
        text = reference.strip()
        if not text:
            raise SessionNotFoundError("an empty session reference matches nothing; give an id, prefix or title")
        exact = self.find_session(text)
        if exact is not None and (visible is None or visible.matches(exact)):
            return exact
        prefixed = self._ids_with_prefix(text, visible or SessionFilter(), _PREFIX_CANDIDATES)
        if len(prefixed) == 1:
            return self.get_session(prefixed[0])
        if prefixed:
            raise AmbiguousSessionError(text, prefixed)
        titled = None if unique else self.find_by_title(text, visible=visible)
        return titled if titled is not None else self._exact_title(text, visible)

    def _exact_title(self, text: str, visible: SessionFilter | None) -> SessionRecord:
        """The session holding exactly the title ``text``; else refuse, naming the sessions of its variants."""
        clean = sanitize_title(text)
        holder = self.title_holder(clean) if clean is not None else None
        record = self.find_session(holder) if holder is not None else None
        if record is not None and (visible is None or visible.matches(record)):
            return record
        variants = [] if clean is None else [t for t in self.lineage_titles(clean) if lineage_base(t) == clean]
        candidates = []
        for title in sorted(variants, key=lineage_number):
            found = self.title_holder(title)
            session = self.find_session(found) if found is not None else None
            if session is not None and (visible is None or visible.matches(session)):
                candidates.append(f"{session.id} ('{title}')")
        if candidates:
            raise AmbiguousSessionError(text, candidates, hint="no session has exactly that title; name one by id")
        raise SessionNotFoundError(
            f"no session matches {text!r} by id, id prefix or title; list them with 'hermesctl sessions list'"
        )
