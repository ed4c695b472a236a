"""The store as the rest of hermes-actors sees it: a ``Protocol`` per concern, and :class:`StoreInterface` joining them.

:class:`~hermes_actors.store.Store` (APSW/SQLite) satisfies every protocol here structurally; a second backend
implements the same methods and runs through the same contract tests (``tests/store``, one fixture parameter per
implementation). The records exchanged are the Structs of :mod:`hermes_actors.store.records`.

Every method that writes runs in one transaction, or joins the caller's :meth:`StoreInterface.transaction`. Errors
are :class:`~hermes_actors.errors.StoreError` and its subclasses; ``StoreError.fault`` says whether the database
was full, read-only or busy, so no caller needs the backend's own exception types.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from hermes_actors.ids import SessionKind
from hermes_actors.routing import SessionSource
from hermes_actors.store.approvals import Approvals
from hermes_actors.store.dead_letters import DeadLetters
from hermes_actors.store.deliveries import Deliveries
from hermes_actors.store.jobs import Jobs
from hermes_actors.store.maintenance_interface import Maintenance
from hermes_actors.store.records import (
    EndReason,
    FtsResult,
    LineagePage,
    MessageRecord,
    MessageRow,
    NewMessage,
    SessionFilter,
    SessionOwnerRow,
    SessionRecord,
    StoreStats,
    TipFilter,
)
from hermes_actors.store.sql import SqlDb
from hermes_actors.store.table_interface import (
    AttachmentIndex,
    CursorTable,
    HomeChannelTable,
    InboxQueue,
    LeaseTable,
    MemoryTable,
    OutboxQueue,
    ResponseTable,
    TimerTable,
)

if TYPE_CHECKING:
    from hermes_actors.store.fts import Order
    from hermes_actors.store.search_reads import SearchReads
    from hermes_actors.store.transcript import AppendWrite

__all__ = [
    "AttachmentIndex",
    "CursorTable",
    "HomeChannelTable",
    "InboxQueue",
    "LeaseTable",
    "Maintenance",
    "MemoryTable",
    "OutboxQueue",
    "ResponseTable",
    "SessionDirectory",
    "StoreInterface",
    "TimerTable",
    "Transcripts",
]


@runtime_checkable
class SessionDirectory(Protocol):
    """Sessions, their titles and lineages, and the routing directory (routing key -> session id)."""

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
        """Insert a live session and return it (:class:`TitleInUseError` when its title is taken); ``agent`` names
        the configured agent that answers it for its life (``None``: the default agent); ``system_prompt`` and
        ``tools`` are its frozen prefix, as ``freeze_prefix`` stores it."""
        ...

    def insert_session(self, record: SessionRecord) -> None:
        """Insert a record as it is (an import: original times, end and counters)."""
        ...

    def find_session(self, session_id: str) -> SessionRecord | None:
        """The session with exactly this id, or ``None``."""
        ...

    def session_owner(self, session_id: str, routing_key: str | None = None) -> SessionOwnerRow | None:
        """Whose session ``session_id`` is, and (``routing_key``) the session that key leads to now; ``None`` when
        there is no such session."""
        ...

    def get_session(self, session_id: str) -> SessionRecord:
        """The session with exactly this id (:class:`SessionNotFoundError` when there is none)."""
        ...

    def find_sessions(self, session_ids: Sequence[str]) -> list[SessionRecord]:
        """The sessions with these ids, in the order given (unknown ids left out)."""
        ...

    def end_session(self, session_id: str, reason: EndReason | str, *, at: float | None = None) -> SessionRecord:
        """End a live session; an ended one keeps its first reason."""
        ...

    def reopen_session(self, session_id: str) -> SessionRecord:
        """Make an ended session live again."""
        ...

    def set_principal(self, session_id: str, *, source: str, scope_id: str | None, account_id: str | None) -> None:
        """Set the platform, workspace and bot account a session belongs to (an imported session, given the ones
        its live adapter uses)."""
        ...

    def delete_session(self, session_id: str) -> bool:
        """Delete a session with its messages, attachments and routes; whether it existed."""
        ...

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
        """Sessions (each segment of a lineage on its own), most recently active (or started) first, the first
        ``offset`` skipped."""
        ...

    def list_lineages(
        self,
        *,
        source: str | None = None,
        ended: bool | None = None,
        limit: int | None = 20,
        visible: SessionFilter | None = None,
        preview_chars: int = ...,
        tips: Sequence[str] | None = None,
        offset: int = 0,
        tip: TipFilter | None = None,
    ) -> LineagePage:
        """One row per conversation (compression lineage, shown by its tip, with its totals and preview), most
        recently active first (the first ``offset`` skipped), and how many there are in all; ``ended`` applies to
        the tip, ``tips`` keeps the lineages whose tips have these ids."""
        ...

    def title_holder(self, title: str) -> str | None:
        """The id of the session holding exactly ``title``, or ``None``."""
        ...

    def set_title(self, session_id: str, title: str | None) -> str | None:
        """Sanitise and set (or clear) the title; the title stored."""
        ...

    def claim_title(self, session_id: str, title: str) -> str | None:
        """Title an untitled session with a title no session holds, in one statement; the title stored, or ``None``
        (the session is gone or titled, or the title is taken)."""
        ...

    def lineage_titles(self, base: str) -> list[str]:
        """``base`` and every ``"<base> #N"`` title a session holds."""
        ...

    def next_lineage_title(self, title: str) -> str:
        """The title a compression child of a session titled ``title`` takes."""
        ...

    def find_by_title(self, title: str, *, visible: SessionFilter | None = None) -> SessionRecord | None:
        """The session titled ``title``, or the newest segment continuing it through compressions that holds a
        numbered variant (``"<title> #N"``); a variant outside that lineage is never reached."""
        ...

    def resolve_session(
        self, reference: str, *, visible: SessionFilter | None = None, unique: bool = False
    ) -> SessionRecord:
        """The session a user typed: exact id, unique id prefix, then title (``unique``: only an exact title)."""
        ...

    def lineage_root(self, session_id: str) -> str:
        """The first session of the compression lineage ``session_id`` belongs to."""
        ...

    def lineage_tip(self, session_id: str) -> str:
        """The newest session continuing ``session_id`` through compressions."""
        ...

    def lineage_chain(self, session_id: str) -> list[str]:
        """The lineage through ``session_id``, root first and tip last."""
        ...

    def get_route(self, routing_key: str) -> str | None:
        """The session id ``routing_key`` points at, or ``None``."""
        ...

    def set_route(self, routing_key: str, session_id: str, *, at: float | None = None) -> None:
        """Point ``routing_key`` at ``session_id``."""
        ...

    def unbind_route(self, routing_key: str) -> bool:
        """Remove one route; whether there was one."""
        ...

    def unbind_session(self, session_id: str) -> list[str]:
        """Remove every route to ``session_id``; the keys removed."""
        ...

    def routes_to(self, session_id: str) -> list[str]:
        """Every routing key pointing at ``session_id``."""
        ...

    def repoint_routes(self, from_session_id: str, to_session_id: str) -> int:
        """Move every route of one session to another; how many moved."""
        ...


@runtime_checkable
class Transcripts(Protocol):
    """The messages of sessions: appending, loading, full-text search and totals."""

    def search_reads(self) -> SearchReads:
        """The bounded reads ``session_search`` makes (:mod:`hermes_actors.store.search_reads`)."""
        ...

    def append_messages(self, session_id: str, messages: Sequence[NewMessage], *, at: float | None = None) -> list[int]:
        """Append to a live session in one transaction, updating its counters; the new message ids."""
        ...

    def appending_messages(
        self, session_id: str, messages: Sequence[NewMessage], *, at: float | None = None
    ) -> AppendWrite:
        """:meth:`append_messages` as a write for a session lease's fence to carry (``fence(then=...)``); its ids
        afterwards (:attr:`AppendWrite.ids`)."""
        ...

    def freeze_prefix(self, session_id: str, *, system_prompt: str | None, tools: str) -> None:
        """Store the exact system message (``None``: none is sent) and the tool list (JSON) the session's turns go
        out with."""
        ...

    def insert_messages(self, session_id: str, rows: Sequence[MessageRow]) -> None:
        """Append rows as they are (an import), counters untouched."""
        ...

    def add_counts(
        self,
        session_id: str,
        *,
        messages: int,
        tool_calls: int,
        last_active_at: float,
        tokens: tuple[int, int] | None = None,
    ) -> None:
        """Count rows written by :meth:`insert_messages` on their session."""
        ...

    def last_message_id(self, session_id: str) -> int:
        """The highest message id of the session (0: none)."""
        ...

    def load_transcript(self, session_id: str) -> list[MessageRecord]:
        """The session's messages in order."""
        ...

    def fts_query(
        self,
        query: str,
        *,
        limit: int = 20,
        roles: Sequence[str] | None = None,
        session_id: str | None = None,
        order: Order = "relevance",
    ) -> FtsResult:
        """A full-text query over messages; a malformed query is an answer, never an exception."""
        ...

    def stats(self) -> StoreStats:
        """Session and message totals, per-source counts, size on disk."""
        ...


@runtime_checkable
class StoreInterface(SessionDirectory, Transcripts, Maintenance, Protocol):
    """The whole store: the protocols above, with the tables around the transcript as attributes."""

    @property
    def sql(self) -> SqlDb:
        """The database seam every table runs its statements through (set ``sql.trace`` to see them)."""
        ...

    @property
    def inbox(self) -> InboxQueue:
        """The inbound queue."""
        ...

    @property
    def outbox(self) -> OutboxQueue:
        """The outbound queue."""
        ...

    @property
    def leases(self) -> LeaseTable:
        """Session ownership across processes."""
        ...

    @property
    def timers(self) -> TimerTable:
        """Durable deadlines."""
        ...

    @property
    def kv(self) -> CursorTable:
        """Meta values and poll cursors."""
        ...

    @property
    def homes(self) -> HomeChannelTable:
        """Home channels."""
        ...

    @property
    def memories(self) -> MemoryTable:
        """Notes about users."""
        ...

    @property
    def attachments(self) -> AttachmentIndex:
        """Message attachments."""
        ...

    @property
    def responses(self) -> ResponseTable:
        """The API's stored responses."""
        ...

    @property
    def jobs(self) -> Jobs:
        """The scheduled jobs (one implementation over the database seam for both stores)."""
        ...

    @property
    def dead_letters(self) -> DeadLetters:
        """What could not be done and its replays (one implementation over the database seam for both stores)."""
        ...

    @property
    def deliveries(self) -> Deliveries:
        """The outbox's rows as they stand, for people (reads only)."""
        ...

    @property
    def approvals(self) -> Approvals:
        """Tool calls waiting for a person's decision (one implementation over the database seam for both stores)."""
        ...
