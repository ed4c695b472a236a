"""The title an imported session gets here: the source's, sanitised, and made unique among ours.

The reference system's titles may hold what ours refuse (control, zero-width and bidi characters, more than
:data:`~hermes_actors.titles.MAX_TITLE_LENGTH` characters) or a title one of our sessions holds already. Each change
is noted for the report, so nothing is altered silently.
"""

from __future__ import annotations

from hermes_actors.errors import TitleError
from hermes_actors.importer.report import TitleNote
from hermes_actors.importer.source import HermesSession
from hermes_actors.importer.target import Target
from hermes_actors.titles import MAX_TITLE_LENGTH, sanitize_title

__all__ = ["import_title"]


def import_title(session: HermesSession, target: Target, notes: list[TitleNote]) -> str | None:
    """The title ``session`` is imported with (``None`` when it has none left), appending a note to ``notes`` for
    each change: sanitised, shortened, emptied, or numbered because another session holds it."""
    wanted = session.title
    if wanted is None:
        return None
    try:
        clean = sanitize_title(wanted)
        reason = "sanitised: control, zero-width and bidi characters removed, white space collapsed"
    except TitleError:
        clean = sanitize_title(wanted[:MAX_TITLE_LENGTH])
        reason = f"shortened to {MAX_TITLE_LENGTH} characters"
    if clean is None:
        notes.append(
            TitleNote(session_id=session.id, source_title=wanted, title=None, reason="nothing left after sanitising")
        )
        return None
    if clean != wanted:
        notes.append(TitleNote(session_id=session.id, source_title=wanted, title=clean, reason=reason))
    holder = target.title_holder(clean)
    if holder is None or holder == session.id:
        return clean
    suffixed = target.free_distinct_title(clean)
    notes.append(
        TitleNote(
            session_id=session.id,
            source_title=wanted,
            title=suffixed,
            reason=f"Title '{clean}' is already in use by session {holder}",
        )
    )
    return suffixed
