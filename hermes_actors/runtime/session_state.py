"""What one session's turns keep between messages, and its only owner: :class:`SessionState`.

The session's row as last committed, its cached transcript, the prefix frozen at its start, its lease, whether its
row exists yet (and the title its first commit gives it), the automatic title job and the history length at which a
summary did not gain. The turn steps (:mod:`~hermes_actors.runtime.exchange`,
:mod:`~hermes_actors.runtime.compression`, :mod:`~hermes_actors.runtime.controls`) read it and change it only
through its methods, each named after what happened (a commit was durable, the title changed, the lease ended), and
nothing here refers back to them. Whatever a turn keeps across messages belongs here: a turn paused on tool calls
that wait for a person's decision is its request (``paused``, from ``store.approvals``), which the decision's turn
continues from (:mod:`~hermes_actors.runtime.approvals`).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from hermes_actors.agents.approvals import approval_settings
from hermes_actors.agents.base import context_window_of, model_of
from hermes_actors.agents.history import ModelHistory
from hermes_actors.agents.tools import agent_tools, session_search_tool
from hermes_actors.agents.turn import ApprovalDecision, ApprovalGate
from hermes_actors.lifecycle.auto_titles import AutoTitle
from hermes_actors.principal import visible_sessions
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.agent_calls import AgentCalls
from hermes_actors.runtime.prefix import FrozenPrefix, fresh_prefix, stored_prefix
from hermes_actors.runtime.protocol import Delivery
from hermes_actors.runtime.records import CreatedRow, NewSession, appended, create_session_row, source_of
from hermes_actors.runtime.services import SessionServices
from hermes_actors.runtime.session_lease import SessionLease
from hermes_actors.store import MessageRecord, NewMessage, SessionRecord, StoreInterface
from hermes_actors.store.approvals import ApprovalRow
from hermes_actors.store.term_guard import FencedWrite

__all__ = ["SessionState"]


class SessionState:
    """The state of one session's turns (see the module docstring), used by one thread.

    ``create_with`` is a session that does not exist yet: its first commit creates the session row (with ``title``,
    when one was asked for) and the route. Its agent is chosen once, here, and so is the model's context window.
    """

    def __init__(
        self,
        session_id: str,
        services: SessionServices,
        *,
        create_with: NewSession | None = None,
        title: str | None = None,
    ) -> None:
        self.session_id = session_id
        self.services = services
        self._create_with = create_with
        self._pending_title = title
        self._lease = SessionLease(session_id, services)
        self._record: SessionRecord | None = None
        self._history: list[MessageRecord] = []
        self.model_history = ModelHistory(services.config.model_message_cap_chars)  # what the model is sent
        self._auto_title = AutoTitle(services, session_id)
        self._no_gain_at: int | None = None  # history length at which a summary did not make the prompt smaller
        with services.readers.reader() as store:  # the transcript is read once the lease is taken (acquire_lease)
            if create_with is None:
                self._record = store.get_session(session_id)
                self._origin = source_of(self._record)
                self.named_agent = services.agents.for_record(self._record)
            else:
                self._origin = create_with.source
                self.named_agent = services.agents.for_new(create_with.source, create_with.agent)
            scope = services.sessions.search_scope_for(self._origin.platform)
            visible = visible_sessions(self._origin, scope)
            self._tools = [session_search_tool(services.readers.reader, session_id, visible=visible, scope=scope)]
            self._tools += services.session_tools(session_id, self._origin)  # built in (the schedule tool)
            self._builtin = len(self._tools)  # what a fresh prefix freezes: these, then the agent's own
            # The request for approval a paused turn waits on (the decision continues it), if any.
            self._paused: ApprovalRow | None = store.approvals.open_in(session_id) if create_with is None else None
            # What goes before the conversation: frozen at the start (stored by the first commit), or as stored.
            stored = stored_prefix(self._record) if self._record is not None else None
            self._prefix = stored or self.fresh_prefix(store, self._record.system_prompt if self._record else None)
        self._prefix_unsaved = stored is None and create_with is None  # a session from before schema 6
        self._tools += agent_tools(self.named_agent.agent)  # its MCP tools as last listed (run those frozen)
        self.offered = self._prefix.offered(self._tools)
        self.agent_calls = AgentCalls(services, session_id)
        named = self.named_agent
        self.approval_settings = approval_settings(named.agent)  # which calls wait for a person, and how long
        # The agent and the config do not change while the actor lives: the window is asked once.
        self.window = context_window_of(named.agent, named.context_window or services.config.context_window)

    def fresh_prefix(self, store: StoreInterface, prompt: str | None = None) -> FrozenPrefix:
        """What a session of this origin starts with now (:func:`~hermes_actors.runtime.prefix.fresh_prefix`)."""
        return fresh_prefix(store, self.named_agent.agent, self._origin, self._tools[: self._builtin], prompt=prompt)

    @property
    def platform(self) -> str:
        """The platform the session was opened on."""
        return self._origin.platform

    @property
    def history(self) -> Sequence[MessageRecord]:
        """The cached transcript."""
        return self._history

    @property
    def prefix(self) -> FrozenPrefix:
        """The system message and tool list every model call of this session sends (frozen at its start)."""
        return self._prefix

    @property
    def record(self) -> SessionRecord | None:
        """The session's row as last committed; ``None`` before its first commit."""
        return self._record

    @property
    def is_new(self) -> bool:
        """Whether the session's row does not exist yet (its first commit creates it)."""
        return self._create_with is not None

    @property
    def pending_title(self) -> str | None:
        """The title the first commit gives the session."""
        return self._pending_title

    def origin(self, deliveries: Sequence[Delivery]) -> tuple[SessionSource | None, str | None]:
        """Where a reply to ``deliveries`` goes, and the message it answers (without deliveries: the origin)."""
        if deliveries:
            return deliveries[0].message.source, deliveries[0].message.message_id
        return (source_of(self._record) if self._record else None), None

    # -- the lease -----------------------------------------------------------------------------------------------

    @property
    def lease_held(self) -> bool:
        """Whether this process holds the session's lease now."""
        return self._lease.held

    def acquire_lease(self) -> str | None:
        """Take the session's lease (:meth:`SessionLease.acquire`); under a new lease the transcript is read again:
        another process may have written turns since it was read."""
        holder = self._lease.acquire()
        if holder is None:
            self.reload()
        return holder

    def fence(self, store: StoreInterface, then: Sequence[FencedWrite] = ()) -> None:
        """Inside a commit: raise :class:`LeaseLostError` unless this process still holds the lease it took; then
        ``then``, the commit's first writes under it (in the check's own statement where the store can)."""
        if self._create_with is None:
            self._lease.fence(store, then)
        else:  # a new session: no lease to check yet
            for write in then:
                write.alone()

    def lease_ended(self) -> None:
        """The lease was released in the commit that just ended or continued the session, or was taken over: the
        next turn takes it again and reads the transcript anew."""
        self._lease.forget()

    def release_lease(self) -> None:
        """Give the lease up without waiting for the commit (the actor is stopping)."""
        self._lease.release()

    # -- what the store has ------------------------------------------------------------------------------------

    def reload(self) -> None:
        """Read the session and its transcript as the store has them now."""
        with self.services.readers.reader() as store:
            self._record = store.get_session(self.session_id)
            self._history = store.load_transcript(self.session_id)
            self._paused = store.approvals.open_in(self.session_id)
        stored = stored_prefix(self._record)
        if stored is not None and stored != self._prefix:  # another process froze it (a session from before 6)
            self._prefix, self._prefix_unsaved, self.offered = stored, False, stored.offered(self._tools)

    @property
    def starts_rows(self) -> bool:
        """Whether the next commit's :meth:`start_rows` writes anything (the session's row, or its prefix)."""
        return self._create_with is not None or self._prefix_unsaved

    def start_rows(self, store: StoreInterface) -> CreatedRow | None:
        """Inside a turn's commit: create the session's row, route and lease (its first commit; the result is
        :meth:`committed`), or store its prefix when it has none stored yet. Changes nothing of this object: the
        commit may be rolled back and run again."""
        if self._create_with is not None:
            return create_session_row(
                store,
                self.session_id,
                self._create_with,
                title=self._pending_title,
                prefix=self._prefix,
                model=model_of(self.named_agent.agent),
                agent=self.named_agent.name,
                lease_owner=self.services.lease_owner,
                lease_ttl_s=self.services.config.lease_ttl_s,
            )
        if self._prefix_unsaved:
            store.freeze_prefix(self.session_id, system_prompt=self._prefix.system_prompt, tools=self._prefix.tools)
        return None

    def committed(self, created: CreatedRow | None, ids: Sequence[int], new: Sequence[NewMessage], now: float) -> None:
        """A turn's commit is durable: it stored ``new`` under ``ids`` at ``now`` (and, being the first, ``created``
        the session's row and, unless another process holds it, its lease)."""
        self._prefix_unsaved = False
        self._lease.confirm()
        if created is not None:
            self._lease.adopt(created.epoch)
            self._record = created.record
            self._create_with = None
            self._pending_title = None
        self._history.extend(appended(self.session_id, ids, new, now))

    def cut(self, at: int) -> None:
        """A turn's commit cut the transcript's messages from position ``at`` on (:mod:`.rewind`); call before
        :meth:`committed` adds what it stored."""
        del self._history[at:]

    @property
    def paused(self) -> ApprovalRow | None:
        """The request for approval the session's last turn paused on, until a turn continues from it."""
        return self._paused

    def approval_committed(self, asked: ApprovalRow | None, *, resumed: bool) -> None:
        """A turn's commit continued from a decision (``resumed``) and/or paused on a new request (``asked``)."""
        if asked is not None or resumed:
            self._paused = asked

    def approval_gate(self, decisions: Sequence[ApprovalDecision] = ()) -> ApprovalGate:
        """What a turn's agent knows of approvals: the tools that wait for one, and the ``decisions`` it continues
        from."""
        return ApprovalGate(patterns=tuple(self.approval_settings.tools), decisions=tuple(decisions))

    # -- titles ------------------------------------------------------------------------------------------------

    def shown_title(self) -> str | None:
        """The title ``/title`` shows: the record's, or the one its first commit gives it; while an automatic title
        job runs, the store's (the job's write commits before its future reports it)."""
        if self._record is None:
            return self._pending_title
        if self._record.title is None and self._auto_title.in_flight:
            with self.services.readers.reader() as store:
                return store.get_session(self.session_id).title
        return self._record.title

    def apply_background_title(self) -> None:
        """Take the title an automatic title job stored since the last turn into the record."""
        self._record = self._auto_title.applied(self._record)

    def after_exchange(self, *, added: int, user_text: str, reply_text: str | None) -> None:
        """A turn committed ``added`` messages: start the automatic title job if it was the first exchange."""
        self._auto_title.after_exchange(
            self._record, self._history, added=added, user_text=user_text, reply_text=reply_text
        )

    def choose_title(self, title: str) -> None:
        """The session's first commit gives it ``title``."""
        self._pending_title = title

    def retitled(self, title: str | None, *, by_hand: bool = False) -> None:
        """The session's title is now ``title``; ``by_hand``: an operator set or cleared it, so an automatic title
        computed before must not come back."""
        if self._record is not None:
            self._record = msgspec.structs.replace(self._record, title=title)
        if by_hand:
            self._auto_title = AutoTitle(self.services, self.session_id)

    # -- compression -------------------------------------------------------------------------------------------

    @property
    def summary_may_gain(self) -> bool:
        """Whether a summary may make the prompt smaller: none was found not to since the history last grew."""
        return self._no_gain_at != len(self._history)

    def summary_gained_nothing(self) -> None:
        """A summary of the history as it is now would not make the prompt smaller."""
        self._no_gain_at = len(self._history)
