"""The supervisor's lifecycle commands: ``/new``, ``/reset``, ``/resume``, ``/title``, ``/compress``,
``/sessions``, ``/sethome``, ``/handoff`` and resets by timer.

A mixin of :class:`~hermes_actors.runtime.supervisor.SupervisorActor`, kept apart so the directory and its actors stay
readable: the methods run on the supervisor's thread and use its state. Commands that change where a routing key
leads take effect here at once; work on a session's transcript goes to its actor as a control turn.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from hermes_actors.errors import HermesError
from hermes_actors.lifecycle.commands import (
    Command,
    CommandName,
    choose_resume_target,
    list_resumable,
    list_sessions_text,
    resume_listing_text,
    title_holder_text,
)
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.protocol import Compress, Delivery, EndSession, Handoff, SetTitle, queue_reply, reply_for
from hermes_actors.store import EndReason
from hermes_actors.store.records import HomeChannel

if TYPE_CHECKING:
    from hermes_actors.config import RuntimeConfig
    from hermes_actors.runtime.protocol import Control, SessionServices
    from hermes_actors.runtime.supervisor import EndDue, HandoffResult, _Live
    from hermes_actors.store.readers import ReaderPool
    from hermes_actors.store.writer import StoreWriter


__all__ = ["LifecycleCommands"]


class _ReplyNow(Protocol):
    def __call__(self, delivery: Delivery, text: str, *, session_id: str | None, state: str = "done") -> None: ...


class LifecycleCommands:
    """Slash commands and timer resets, mixed into the supervisor (which provides the members declared here)."""

    _config: RuntimeConfig
    _readers: ReaderPool
    _writer: StoreWriter
    _services: SessionServices
    _live: Mapping[str, _Live]
    _routes: dict[str, str]
    _keys: dict[str, set[str]]
    _ending: set[str]
    _existing: Callable[[str], str | None]
    _reply_now: _ReplyNow
    _queue_control: Callable[[str, Control, Delivery | None], None]
    _cancel_running: Callable[[str | None], None]
    _begin_end: Callable[[str], None]
    _rebind: Callable[[str, str], None]

    def _init_lifecycle(self) -> None:
        self._pending_titles: dict[str, str] = {}  # routing key -> title for its next session
        self._resume_lists: dict[str, list[str]] = {}  # routing key -> ids shown by its last bare /resume
        # session -> (origin of the /handoff, home key, what that key led to before, target platform)
        self._handoffs: dict[str, tuple[SessionSource, str, str | None, str]] = {}

    # -- commands ----------------------------------------------------------------------------------------------

    def _command(self, routing_key: str, delivery: Delivery, command: Command) -> None:
        try:
            match command.name:
                case CommandName.NEW | CommandName.RESET:
                    self._reset(routing_key, delivery, command)
                case CommandName.RESUME:
                    self._resume(routing_key, delivery, command.argument)
                case CommandName.TITLE:
                    self._title(routing_key, delivery, command.argument)
                case CommandName.COMPRESS:
                    session_id = self._existing(routing_key)
                    if session_id is None:
                        self._reply_now(delivery, "Nothing to compress: no conversation yet.", session_id=None)
                    else:
                        self._queue_control(session_id, Compress(), delivery)
                case CommandName.SESSIONS:
                    self._sessions(delivery, command.argument)
                case CommandName.SETHOME:
                    self._sethome(delivery)
                case CommandName.HANDOFF:
                    self._handoff(routing_key, delivery, command.argument)
                case CommandName.STOP:  # handled in _deliver
                    raise AssertionError("unreachable")
        except HermesError as exc:
            self._reply_now(delivery, f"{command.name.value}: {exc}", session_id=self._existing(routing_key))

    def _reset(self, routing_key: str, delivery: Delivery, command: Command) -> None:
        reason = EndReason.NEW_SESSION if command.name is CommandName.NEW else EndReason.SESSION_RESET
        title = command.argument or None
        note = ""
        if title is not None:
            with self._readers.reader() as store:
                holder = store.find_by_title(title)
            if holder is not None and holder.title == title.strip():
                why = title_holder_text(delivery.message.source, title, holder)
                note = f" The t{why[1:]}, so it was not applied."
            else:
                self._pending_titles[routing_key] = title
                note = f" Its title will be '{title}'."
        old = self._existing(routing_key)
        self._resume_lists.pop(routing_key, None)  # conversation-scoped: a numbered list belongs to the old one
        reply = "Started a new session." + note
        if old is None:
            self._reply_now(delivery, reply, session_id=None)
            return
        self._cancel_running(old)  # a late result of the running turn is dropped
        self._begin_end(old)
        self._queue_control(old, EndSession(reason=reason, reply=reply), delivery)

    def _end_by_timer(self, message: EndDue) -> None:
        session_id = message.session_id
        if session_id in self._ending:
            return
        state = self._live.get(session_id)
        if state is not None and (state.busy or state.queue):
            return  # active again: the timer is moved by that activity
        if state is None or state.create_with is None:
            with self._readers.reader() as store:
                record = store.find_session(session_id)
                holder = store.leases.holder(session_id)
            if record is None or not record.is_live:
                return  # ended (or pruned) meanwhile
            if holder is not None and holder != self._services.lease_owner and self._services.owner_alive(holder):
                return  # another live process runs this session's turns: a reset is for the lease holder to do
        self._begin_end(session_id)
        self._queue_control(
            session_id, EndSession(reason=message.reason, reply=message.notice, save_memories=True), None
        )

    def _resume(self, routing_key: str, delivery: Delivery, argument: str) -> None:
        source = delivery.message.source
        current = self._existing(routing_key)
        any_user = self._config.resume_any_user
        with self._readers.reader() as store:
            if not argument:
                offered = list_resumable(store, source, any_user=any_user)
                self._resume_lists[routing_key] = [s.id for s in offered]
                self._reply_now(delivery, resume_listing_text(offered), session_id=current)
                return
            listed = self._resume_lists.get(routing_key, [])
            choice = choose_resume_target(store, source, argument, listed, any_user=any_user)
        tip = choice.target
        if tip is None:
            self._reply_now(delivery, choice.refusal or "Nothing to resume.", session_id=current)
            return
        if tip.id in self._ending:
            self._reply_now(delivery, f"Session {tip.id} is ending; start a new one with /new.", session_id=current)
            return
        if not tip.is_live:
            self._writer.call(lambda store: store.reopen_session(tip.id))
        self._rebind(routing_key, tip.id)
        self._reply_now(delivery, f"Resumed {tip.title or tip.id}.", session_id=tip.id)

    def _title(self, routing_key: str, delivery: Delivery, argument: str) -> None:
        session_id = self._existing(routing_key)
        if session_id is None:
            if not argument:
                self._reply_now(delivery, "No conversation yet; /title <text> names the next one.", session_id=None)
                return
            with self._readers.reader() as store:
                holder = store.find_by_title(argument)
            if holder is not None and holder.title == argument.strip():
                why = title_holder_text(delivery.message.source, argument, holder)
                self._reply_now(delivery, f"{why}.", session_id=None)
                return
            self._pending_titles[routing_key] = argument
            self._reply_now(
                delivery, f"The title will be set to '{argument}' when the session starts.", session_id=None
            )
            return
        self._queue_control(session_id, SetTitle(text=argument or None), delivery)

    def _sessions(self, delivery: Delivery, query: str) -> None:
        with self._readers.reader() as store:
            text = list_sessions_text(store, delivery.message.source, query, any_user=self._config.resume_any_user)
        self._reply_now(delivery, text, session_id=None)

    def _handoff(self, routing_key: str, delivery: Delivery, platform: str) -> None:
        session_id = self._existing(routing_key)
        if not platform:
            self._reply_now(delivery, "Usage: /handoff <platform>, e.g. /handoff telegram.", session_id=session_id)
            return
        if session_id is None:
            self._reply_now(delivery, "Nothing to hand off yet: send a message first.", session_id=None)
            return
        state = self._live.get(session_id)
        if state is not None and (state.busy or state.queue):
            self._reply_now(
                delivery, "A reply is still being written; hand off once it has arrived.", session_id=session_id
            )
            return
        self._handoffs[session_id] = (delivery.message.source, "", None, platform)
        self._queue_control(session_id, Handoff(platform=platform), delivery)

    def _handoff_result(self, message: HandoffResult) -> None:
        record = self._handoffs.pop(message.session_id, None)
        if record is None:
            return
        origin, key, previous, platform = record
        if message.error is None:
            self._send_now(origin, f"Handed off to {platform}; the conversation continues there.", message.session_id)
            return
        if key:
            if previous is not None:
                self._rebind(key, previous)
            else:
                self._writer.call(lambda store: store.unbind_route(key))
                if self._routes.get(key) == message.session_id:
                    del self._routes[key]
                self._keys.get(message.session_id, set()).discard(key)
        self._send_now(
            origin,
            f"Handoff to {platform} failed: {message.error}. The conversation stays here; try again later.",
            message.session_id,
        )

    def _send_now(self, source: SessionSource, text: str, session_id: str | None) -> None:
        """Send a message to ``source``'s chat that answers no inbound message (a later report)."""
        reply = reply_for(source, session_id, text)
        self._services.outbox.deliver(self._writer.call(lambda store: queue_reply(store, reply)), reply)

    def _sethome(self, delivery: Delivery) -> None:
        source = delivery.message.source
        if source.chat_id is None:
            self._reply_now(delivery, "This chat has no id on its platform, so it cannot be home.", session_id=None)
            return
        home = HomeChannel(
            platform=source.platform,
            account_id=source.account_id or "",
            chat_id=source.chat_id,
            thread_id=source.thread_id,
            chat_type=source.chat_type,
            scope_id=source.scope_id,
            set_by=source.participant_id,
        )
        self._writer.call(lambda store: store.homes.set(home))
        self._reply_now(delivery, f"This chat is now the home channel for {source.platform}.", session_id=None)
