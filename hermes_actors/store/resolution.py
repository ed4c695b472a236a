"""How a session is found by what a user typed: an exact id, a unique id prefix, then a title, which is also found
along its compression lineage (the part of :class:`~hermes_actors.store.interface.SessionDirectory` built on the
``sessions`` table, :class:`~hermes_actors.store.sessions.Sessions`, and the lineage walks of :mod:`.lineage`).
"""

from __future__ import annotations

from hermes_actors.errors import AmbiguousSessionError, SessionNotFoundError
from hermes_actors.store.lineage import chain_on
from hermes_actors.store.records import SessionFilter, SessionRecord
from hermes_actors.store.sessions import Sessions
from hermes_actors.store.sql import SqlDb
from hermes_actors.titles import lineage_base, lineage_number, next_lineage_title, sanitize_title

__all__ = ["SessionResolution"]

_PREFIX_CANDIDATES = 11


class SessionResolution:
    """Ids, id prefixes and titles resolved over the ``sessions`` table."""

    __slots__ = ("_db", "_sessions")

    def __init__(self, db: SqlDb, sessions: Sessions) -> None:
        self._db = db
        self._sessions = sessions

    def next_lineage_title(self, title: str) -> str:
        """Return the title a compression child of a session titled ``title`` should take (``"t #N"``)."""
        return next_lineage_title(title, self._sessions.lineage_titles(lineage_base(title)))

    def find_by_title(self, title: str, *, visible: SessionFilter | None = None) -> SessionRecord | None:
        """Return the session titled ``title``, or the newest segment of its lineage holding a numbered variant.

        The session holding exactly ``title`` is found first; of the sessions continuing it through compressions,
        the newest whose title is ``"<title> #N"`` is returned, so a conversation is found by its first title
        however often it was compressed. A ``"<title> #N"`` that is not in that lineage (a user's own title, an
        import) is never reached from ``title``, and without a holder of ``title`` nothing is found. With
        ``visible``, only sessions that pass it count: another principal's title is not found.
        """
        clean = sanitize_title(title)
        holder = self._sessions.title_holder(clean) if clean is not None else None
        record = self._sessions.find(holder) if holder is not None else None
        if record is None or (visible is not None and not visible.matches(record)):
            return None
        chain = chain_on(self._db, record.id)
        later = self._sessions.find_many(chain[chain.index(record.id) + 1 :])
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
        exact = self._sessions.find(text)
        if exact is not None and (visible is None or visible.matches(exact)):
            return exact
        prefixed = self._sessions.ids_with_prefix(text, visible or SessionFilter(), _PREFIX_CANDIDATES)
        if len(prefixed) == 1:
            return self._sessions.get(prefixed[0])
        if prefixed:
            raise AmbiguousSessionError(text, prefixed)
        titled = None if unique else self.find_by_title(text, visible=visible)
        return titled if titled is not None else self._exact_title(text, visible)

    def _exact_title(self, text: str, visible: SessionFilter | None) -> SessionRecord:
        """The session holding exactly the title ``text``; else refuse, naming the sessions of its variants."""
        clean = sanitize_title(text)
        holder = self._sessions.title_holder(clean) if clean is not None else None
        record = self._sessions.find(holder) if holder is not None else None
        if record is not None and (visible is None or visible.matches(record)):
            return record
        variants = (
            [] if clean is None else [t for t in self._sessions.lineage_titles(clean) if lineage_base(t) == clean]
        )
        candidates = []
        for title in sorted(variants, key=lineage_number):
            found = self._sessions.title_holder(title)
            session = self._sessions.find(found) if found is not None else None
            if session is not None and (visible is None or visible.matches(session)):
                candidates.append(f"{session.id} ('{title}')")
        if candidates:
            raise AmbiguousSessionError(text, candidates, hint="no session has exactly that title; name one by id")
        raise SessionNotFoundError(
            f"no session matches {text!r} by id, id prefix or title; list them with 'hermesctl sessions list'"
        )
