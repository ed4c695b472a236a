"""One import run: sessions parents first, in batches of whole sessions, then the routing table.

Each batch of sessions (about ``batch_messages`` source rows) commits in one transaction together with its
ledger entries, so a run that is killed leaves whole sessions behind and the next run carries on after them.
Routes go last, once every session they may reach exists.

What goes where:

- A source row with ``active = 1`` is part of its session's live transcript, here as there, in id order.
- Rows compacted away there (``active = 0, compacted = 1``) are what the reference system still searches but no
  longer shows the model. They go to a session of their own, ``<id>-compacted`` (:mod:`.compacted`).
- Rewound rows (``active = 0, compacted = 0``) were taken back by the user; the reference system neither shows
  nor searches them, and they are not imported (the report counts them).
- A row whose role is none of ours (``developer`` is read as ``system``) is skipped and listed.
- A session belongs to the principal its live adapter keys the chat by (:mod:`.principals`), so its user can
  continue it and ``/resume`` it; one imported by an earlier run takes what it lacked.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path

import msgspec

from hermes_actors.importer.compacted import COMPACTED_SUFFIX, add_compacted
from hermes_actors.importer.principals import Principals
from hermes_actors.importer.report import (
    MIGRATED_ROUTES,
    ImportReport,
    MessageNote,
    RouteNote,
    SessionNote,
    TitleNote,
    ValueNote,
)
from hermes_actors.importer.routes import import_routes
from hermes_actors.importer.rows import (
    END_REASONS,
    ROLES,
    batches,
    message_row,
    parents_first,
    routing_key,
    tool_call_count,
)
from hermes_actors.importer.source import HermesMessage, HermesSession, HermesSource, SessionStub
from hermes_actors.importer.target import Ledger, MessageRow, Target
from hermes_actors.importer.tenancy import REFERENCE_RULES, LiveAccounts
from hermes_actors.importer.titles import import_title
from hermes_actors.store import EndReason, SessionRecord, StoreInterface
from hermes_actors.store.content import hermes_content

__all__ = ["COMPACTED_SUFFIX", "DEFAULT_BATCH_MESSAGES", "Progress", "import_hermes"]

DEFAULT_BATCH_MESSAGES = 5000

Progress = Callable[[int, int], None]
"""Called after each session with (source rows done, source rows in all)."""

_REWOUND = "rewound in the source (it neither shows nor searches them)"


class _Import:
    """The state of one run: the source, the target and the report being gathered."""

    def __init__(self, source: HermesSource, target: Target, live: LiveAccounts) -> None:
        self.source = source
        self.target = target
        self.live = live
        self.stubs = source.session_stubs()
        self.source_ids = {stub.id for stub in self.stubs}
        self.sessions_imported = 0
        self.sessions_updated = 0
        self.sessions_unchanged = 0
        self.principals = Principals(target, live)
        self.messages_imported = 0
        self.compacted_imported = 0
        self.messages_skipped = 0
        self.skipped_sessions: list[SessionNote] = []
        self.skipped_messages: dict[str, int] = {}
        self.message_notes: list[MessageNote] = []
        self.titles: list[TitleNote] = []
        self.parent_links_dropped: list[SessionNote] = []
        self.end_reasons: dict[str, str] = {}
        self.routes: list[RouteNote] = []
        self.repaired: list[ValueNote] = []
        self.warnings: list[str] = []
        self.cut_parents: set[str] = set()

    # -- sessions ----------------------------------------------------------------------------------------------

    def import_sessions(self, progress: Progress | None, batch_messages: int) -> None:
        order, self.cut_parents = parents_first(self.stubs)
        rows = self.source.message_counts()
        total = sum(rows.get(stub.id, 0) for stub in order)
        done = 0
        if progress is not None:
            progress(0, total)
        for batch in batches(order, rows, batch_messages):
            try:
                with self.target.transaction():
                    for stub in batch:
                        self._session(stub)
                        done += rows.get(stub.id, 0)
                        if progress is not None:
                            progress(done, total)
            finally:
                self.target.release()

    def _skip_session(self, session_id: str, reason: str) -> None:
        self.skipped_sessions.append(SessionNote(session_id=session_id, reason=reason))

    def _session(self, stub: SessionStub) -> None:
        if not stub.readable_id:
            self._skip_session(stub.id, "its id is not valid UTF-8, so no reference to it could be kept")
            return
        ledger = self.target.ledger(stub.id)
        exists = self.target.session_ended(stub.id) is not None
        if ledger is None and exists:
            self._skip_session(stub.id, "a session with this id already exists here and was not imported")
            return
        if ledger is not None and not exists:
            self._skip_session(stub.id, "it was imported earlier and deleted here since; it is not imported again")
            return
        session = self.source.session(stub.id)
        if session is None:
            self._skip_session(stub.id, "its row could not be read back from the source")
            return
        if ledger is None:
            self._new_session(session)
        else:
            refusal = self.principals.adopt(session) if ledger.part == "transcript" else None
            if refusal is None:
                self._update_session(session, ledger)
            else:
                self._skip_session(session.id, refusal)

    def _classify(
        self, session_id: str, messages: Iterable[HermesMessage]
    ) -> tuple[list[MessageRow], list[MessageRow]]:
        """Split rows into (live rows, compacted rows), counting and noting what is skipped."""
        live: list[MessageRow] = []
        compacted: list[MessageRow] = []
        for message in messages:
            role = ROLES.get(message.role)
            if not message.active and not message.compacted:
                self._skip_message(_REWOUND)
                continue
            if role is None:
                reason = f"its role {message.role!r} is none of system, user, assistant, tool"
                self._skip_message(
                    reason, MessageNote(source_message_id=message.id, session_id=session_id, reason=reason)
                )
                continue
            row = message_row(message, role)
            if row[1] is not None and hermes_content(row[1]) != message.content:
                self.message_notes.append(
                    MessageNote(
                        source_message_id=message.id,
                        session_id=session_id,
                        reason="its plain content looks like a rendering followed by a structured value; "
                        "hermes_content() cannot tell it from one",
                    )
                )
            for repair in message.repairs:
                self._keep_raw(repair.table, repair.row, repair.column, repair.raw)
            (live if message.active else compacted).append(row)
        return live, compacted

    def _skip_message(self, reason: str, note: MessageNote | None = None) -> None:
        self.skipped_messages[reason] = self.skipped_messages.get(reason, 0) + 1
        self.messages_skipped += 1
        if note is not None:
            self.message_notes.append(note)

    def _keep_raw(self, table: str, row: str, column: str, raw: bytes) -> None:
        meta_key = self.target.keep_raw(f"{table}:{row}:{column}", raw)
        self.repaired.append(ValueNote(table=table, row=row, column=column, meta_key=meta_key))

    def _new_session(self, session: HermesSession) -> None:
        messages = list(self.source.messages(session.id))
        live, compacted = self._classify(session.id, messages)
        last_active = max([session.started_at, *(row[6] for row in live)])
        ended_at, end_reason = self._end(session, last_active)
        record = msgspec.structs.replace(
            self.principals.record(session),
            last_active_at=last_active,
            routing_key=routing_key(session, self.live),
            title=import_title(session, self.target, self.titles),
            parent_session_id=self._parent(session),
            ended_at=ended_at,
            end_reason=end_reason,
            message_count=len(live),
            tool_call_count=sum(tool_call_count(row[2]) for row in live),
            input_tokens=session.input_tokens,
            output_tokens=session.output_tokens,
        )
        self.target.insert_session(record)
        tail = self.target.append(session.id, live)
        for repair in session.repairs:
            self._keep_raw(repair.table, repair.row, repair.column, repair.raw)
        if compacted:
            self._add_compacted(record, compacted)
        self.target.set_ledger(
            session.id,
            Ledger(
                source_session_id=session.id,
                part="transcript",
                last_source_message_id=max((m.id for m in messages), default=0),
                last_message_id=tail,
                source_end_reason=session.end_reason,
                imported_at=self.target.now(),
            ),
        )
        self.sessions_imported += 1
        self.messages_imported += len(live)

    def _update_session(self, session: HermesSession, ledger: Ledger) -> None:
        messages = list(self.source.messages(session.id, after_id=ledger.last_source_message_id))
        source_ended = session.ended_at is not None or session.end_reason is not None
        must_end = source_ended and not self.target.session_ended(session.id)
        if not messages and not must_end:
            self.sessions_unchanged += 1
            return
        holder = self.target.hold(session.id)
        if holder is not None:
            self._skip_session(
                session.id,
                f"it is open here (a live session's lease is held by {holder}), so what the source added since was "
                "not imported; run the import again once the session is idle",
            )
            return
        if messages and self.target.local_tail(session.id) != ledger.last_message_id:
            self._skip_session(
                session.id,
                f"it has new messages both here and in the source since it was imported; the source's "
                f"{len(messages)} new rows were not imported, so the two transcripts do not interleave",
            )
            return
        live, compacted = self._classify(session.id, messages)
        tail = self.target.append(session.id, live)
        last_active = max([session.started_at, *(row[6] for row in live)])
        self.target.add_to_session(
            session.id,
            messages=len(live),
            tool_calls=sum(tool_call_count(row[2]) for row in live),
            last_active_at=last_active,
            tokens=(session.input_tokens, session.output_tokens),
        )
        if must_end:
            ended_at, reason = self._end(session, last_active)
            self.target.end_session(session.id, ended_at or last_active, reason or EndReason.IMPORTED.value)
        if compacted:
            self._add_compacted(self.principals.as_stored(session), compacted)
        self.target.set_ledger(
            session.id,
            msgspec.structs.replace(
                ledger,
                last_source_message_id=max([ledger.last_source_message_id, *(m.id for m in messages)]),
                last_message_id=tail,
                source_end_reason=session.end_reason,
            ),
        )
        self.sessions_updated += 1
        self.messages_imported += len(live)

    def _add_compacted(self, owner: SessionRecord, rows: list[MessageRow]) -> None:
        """Put rows the source compacted away into ``<owner>-compacted`` (:func:`.compacted.add_compacted`)."""
        refusal = add_compacted(self.target, owner, rows)
        if refusal is None:
            self.compacted_imported += len(rows)
            return
        for _ in rows:
            self._skip_message(refusal)

    def _end(self, session: HermesSession, last_active: float) -> tuple[float | None, str | None]:
        if session.ended_at is None and session.end_reason is None:
            return None, None
        ours = END_REASONS.get(session.end_reason or "", EndReason.IMPORTED)
        if ours.value != session.end_reason:
            self.end_reasons[session.end_reason or "(none)"] = ours.value
        return (session.ended_at if session.ended_at is not None else last_active), ours.value

    def _parent(self, session: HermesSession) -> str | None:
        parent = session.parent_session_id
        if parent is None:
            return None
        if session.id in self.cut_parents:
            reason = f"its parent {parent} is its own descendant (a cycle); the link was dropped"
        elif self.target.ledger(parent) is not None and self.target.session_ended(parent) is not None:
            return parent
        elif parent in self.source_ids:
            reason = f"its parent {parent} was not imported (see the skipped sessions); the link was dropped"
        else:
            reason = f"its parent {parent} is not in the source database; the link was dropped"
        self.parent_links_dropped.append(SessionNote(session_id=session.id, reason=reason))
        return None

    def import_routes(self) -> int:
        """Import the routing table (after every session); return how many entries the source has."""
        notes, warnings, entries = import_routes(self.source, self.target, self.source_ids, self.live)
        self.routes.extend(notes)
        self.warnings.extend(warnings)
        return entries

    # -- the report --------------------------------------------------------------------------------------------

    def report(self, *, dry_run: bool, routes_in_source: int) -> ImportReport:
        return ImportReport(
            source=str(self.source.path),
            schema_version=self.source.version,
            dry_run=dry_run,
            sessions_in_source=len(self.stubs),
            sessions_skipped=len(self.skipped_sessions),
            routes_in_source=routes_in_source,
            routes_migrated=sum(note.action in MIGRATED_ROUTES for note in self.routes),
            skipped_sessions=self.skipped_sessions,
            skipped_messages=self.skipped_messages,
            message_notes=self.message_notes,
            titles=self.titles,
            parent_links_dropped=self.parent_links_dropped,
            end_reasons=self.end_reasons,
            routes=self.routes,
            repaired_values=self.repaired,
            not_carried=self.source.uncarried_values(),
            warnings=self.warnings,
            sessions_imported=self.sessions_imported,
            sessions_updated=self.sessions_updated,
            sessions_unchanged=self.sessions_unchanged,
            principals_updated=self.principals.updated,
            unmapped_sessions=self.principals.unmapped,
            messages_imported=self.messages_imported,
            compacted_imported=self.compacted_imported,
            messages_skipped=self.messages_skipped,
        )


def import_hermes(
    source_path: str | Path,
    store: StoreInterface | None,
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
    batch_messages: int = DEFAULT_BATCH_MESSAGES,
    clock: Callable[[], float] = time.time,
    live: LiveAccounts = REFERENCE_RULES,
) -> ImportReport:
    """Import the reference system's ``state.db`` at ``source_path`` into ``store``; return what was done.

    Keys and sessions take the platform name, account and workspace the live adapters of ``live`` use (by
    default, knowing none: the reference's keys, Slack's moved to their workspace). The source is read-only and
    read as one snapshot. Sessions commit in batches of about ``batch_messages`` source rows, so a killed run
    can be run again and completes; a second run imports nothing twice. With
    ``dry_run`` nothing is written and ``store`` may be ``None`` (an empty target) or read-only. Raises
    :class:`.SourceDatabaseError` for a missing, unreadable or foreign file or another schema version.
    """
    target = Target(store, dry_run=dry_run, clock=clock)
    with HermesSource.open(source_path) as source:
        run = _Import(source, target, live)
        run.import_sessions(progress, max(1, batch_messages))
        routes_in_source = run.import_routes()
        return run.report(dry_run=dry_run, routes_in_source=routes_in_source)
