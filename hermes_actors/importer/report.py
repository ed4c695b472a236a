"""What an import did (or, in a dry run, would do): counts, and every decision a person may want to check.

Frozen Structs, so the report encodes to JSON as it is (``hermesctl import-hermes --json``).
"""

from __future__ import annotations

import enum

import msgspec

__all__ = [
    "MIGRATED_ROUTES",
    "ImportReport",
    "MessageNote",
    "RouteAction",
    "RouteNote",
    "SessionNote",
    "TitleNote",
    "ValueNote",
]


class RouteAction(enum.StrEnum):
    """What became of one routing entry of the source."""

    ADDED = "added"  # routed here under the same key (or the same fields, escaped our way)
    MOVED = "moved"  # routed under the key the live adapter builds (its account, workspace or platform name)
    KEPT_FOR_CLAIM = "kept_for_claim"  # a DM of unknown workspace, routed without one until a workspace claims it
    REPLACED = "replaced"  # the key reached a session that has ended here; it now reaches the imported one
    PRESENT = "present"  # the key already reaches that session here (an earlier import)
    REFUSED = "refused"  # a channel or group of unknown workspace: not routed, its session is reachable by id
    UNMAPPED = "unmapped"  # no account of its platform to key it under (none configured, or several): not routed
    CONFLICT = "conflict"  # the key reaches another live session here, which keeps it
    SUPERSEDED = "superseded"  # a newer entry of the source gives the same key
    SKIPPED = "skipped"  # unusable: malformed entry, untranslatable key, or its session was not imported


MIGRATED_ROUTES = frozenset({RouteAction.ADDED, RouteAction.MOVED, RouteAction.KEPT_FOR_CLAIM, RouteAction.REPLACED})


class SessionNote(msgspec.Struct, frozen=True, kw_only=True):
    """A session of the source and what was decided about it."""

    session_id: str
    reason: str


class MessageNote(msgspec.Struct, frozen=True, kw_only=True):
    """A message of the source (by its id there) that was skipped or stored differently."""

    source_message_id: int
    session_id: str
    reason: str


class TitleNote(msgspec.Struct, frozen=True, kw_only=True):
    """A title stored differently from the source's."""

    session_id: str
    source_title: str
    title: str | None
    reason: str


class ValueNote(msgspec.Struct, frozen=True, kw_only=True):
    """A text value that was not UTF-8; its original bytes are kept in ``meta`` under ``meta_key``."""

    table: str
    row: str
    column: str
    meta_key: str | None


class RouteNote(msgspec.Struct, frozen=True, kw_only=True):
    """One routing entry of the source: its key there, the key here (if routed) and what was done."""

    key: str
    session_id: str | None
    action: RouteAction
    new_key: str | None = None
    reason: str = ""


class ImportReport(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of :func:`hermes_actors.importer.import_hermes`."""

    source: str
    schema_version: int
    dry_run: bool
    sessions_in_source: int = 0
    sessions_imported: int = 0
    sessions_updated: int = 0  # imported earlier; new messages or an end since then were added
    sessions_unchanged: int = 0  # imported earlier, nothing new
    principals_updated: int = 0  # imported earlier; given the account, workspace or platform name they lacked
    sessions_skipped: int = 0
    messages_imported: int = 0  # into the live transcripts
    compacted_imported: int = 0  # rows compacted away there, kept in '<id>-compacted' sessions here
    messages_skipped: int = 0
    routes_in_source: int = 0
    routes_migrated: int = 0
    skipped_sessions: list[SessionNote] = msgspec.field(default_factory=list)
    skipped_messages: dict[str, int] = msgspec.field(default_factory=dict)  # reason -> count
    message_notes: list[MessageNote] = msgspec.field(default_factory=list)
    titles: list[TitleNote] = msgspec.field(default_factory=list)
    parent_links_dropped: list[SessionNote] = msgspec.field(default_factory=list)
    # Sessions without the account their live adapter keys by: their users can neither continue nor /resume them.
    unmapped_sessions: list[SessionNote] = msgspec.field(default_factory=list)
    end_reasons: dict[str, str] = msgspec.field(default_factory=dict)  # source end reason -> ours, when they differ
    routes: list[RouteNote] = msgspec.field(default_factory=list)
    repaired_values: list[ValueNote] = msgspec.field(default_factory=list)
    not_carried: dict[str, int] = msgspec.field(default_factory=dict)  # "table.column" -> rows with a value
    warnings: list[str] = msgspec.field(default_factory=list)

    @property
    def changed(self) -> bool:
        """Whether the import writes (or would write) anything."""
        return bool(self.sessions_imported or self.sessions_updated or self.routes_migrated or self.principals_updated)

    def route_counts(self) -> dict[RouteAction, int]:
        """How many routing entries ended in each action, in the enum's order, zeros left out."""
        counts = dict.fromkeys(RouteAction, 0)
        for note in self.routes:
            counts[note.action] += 1
        return {action: n for action, n in counts.items() if n}
