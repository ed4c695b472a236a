"""The lifecycle commands: ``/new``, ``/reset``, ``/resume``, ``/title``, ``/compress``, ``/sessions``,
``/sethome``, ``/handoff``, ``/save``, ``/approve`` and ``/deny`` (:mod:`~hermes_actors.lifecycle.approvals`),
resets by timer and an operator's rename or end (``hermesctl sessions`` via hermesd).

:class:`LifecycleCommands` is held by the supervisor and runs on its thread. It sees the runtime only through the
:class:`~hermes_actors.lifecycle.directory.Directory` port the supervisor implements: commands that change where a
routing key leads take effect there at once; work on a session's transcript goes to its actor as a control turn.
It never waits for a commit: what it writes itself (a reopened session, a home channel) is submitted to the
writer, whose commits keep their order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING

import msgspec

from hermes_actors.errors import HermesError, SessionClosedError
from hermes_actors.lifecycle.approvals import decide
from hermes_actors.lifecycle.commands import (
    Command,
    CommandName,
    choose_resume_target,
    list_resumable,
    list_sessions_text,
    next_title_refusal,
    parse_command,
    reachable,
    resume_listing_text,
)
from hermes_actors.lifecycle.directory import Directory
from hermes_actors.lifecycle.save import NOTHING_TO_SAVE, ReadTranscript, save_reply
from hermes_actors.lifecycle.work import (
    AdminChange,
    Compress,
    Delivery,
    EndDue,
    EndSession,
    Handoff,
    HandoffResult,
    PendingHandoff,
    SetTitle,
)
from hermes_actors.store import EndReason, StoreInterface
from hermes_actors.store.records import HomeChannel

if TYPE_CHECKING:
    from hermes_actors.config import RuntimeConfig
    from hermes_actors.store.readers import ReaderPool
    from hermes_actors.store.writer import StoreWriter


__all__ = ["HANDED_OFF", "NOT_YOURS_TO_TITLE", "LifecycleCommands", "handed_off_to", "handoff_done_text"]

HANDED_OFF = "Handed off to"  # the first words of the reply to a /handoff that was done
NOT_YOURS_TO_TITLE = "Only the person who started this conversation can see or change its title here."

_log = logging.getLogger(__name__)


class LifecycleCommands:
    """Slash commands and timer resets; the supervisor holds one and hands it the commands it parses."""

    def __init__(
        self,
        directory: Directory,
        *,
        config: RuntimeConfig,
        readers: ReaderPool,
        writer: StoreWriter,
        lease_owner: str,
        owner_alive: Callable[[str], bool],
        read_transcript: ReadTranscript | None = None,
    ) -> None:
        self._directory = directory
        self._config = config
        self._readers = readers
        self._writer = writer
        self._lease_owner = lease_owner
        self._owner_alive = owner_alive
        self._read_transcript = read_transcript  # /save's read of a lineage (the runtime's); None: no /save
        self._pending_titles: dict[str, str] = {}  # routing key -> title for its next session
        self._resume_lists: dict[str, list[str]] = {}  # routing key -> ids shown by its last bare /resume
        self._handoffs: dict[str, PendingHandoff] = {}  # session id -> its handoff in progress

    def take_pending_title(self, routing_key: str) -> str | None:
        """Return (and forget) the title ``/title`` or ``/new <title>`` chose for ``routing_key``'s next session."""
        return self._pending_titles.pop(routing_key, None)

    def handoff_bound(self, session_id: str, key: str, previous: str | None) -> None:
        """The handoff turn of ``session_id`` pointed ``key`` (which led to ``previous``) at it."""
        pending = self._handoffs.get(session_id)
        if pending is not None:
            self._handoffs[session_id] = msgspec.structs.replace(pending, key=key, previous=previous)

    # -- commands ----------------------------------------------------------------------------------------------

    def run(self, routing_key: str, delivery: Delivery, command: Command) -> None:
        try:
            match command.name:
                case CommandName.NEW | CommandName.RESET:
                    self._reset(routing_key, delivery, command)
                case CommandName.RESUME:
                    self._resume(routing_key, delivery, command.argument)
                case CommandName.TITLE:
                    self._title(routing_key, delivery, command.argument)
                case CommandName.COMPRESS:
                    session_id = self._directory.existing(routing_key)
                    if session_id is None:
                        self._directory.reply_now(
                            delivery, "Nothing to compress: no conversation yet.", session_id=None
                        )
                    else:
                        self._directory.queue_control(session_id, Compress(), delivery)
                case CommandName.SESSIONS:
                    self._sessions(delivery, command.argument)
                case CommandName.SETHOME:
                    self._sethome(delivery)
                case CommandName.HANDOFF:
                    self._handoff(routing_key, delivery, command.argument)
                case CommandName.SAVE:
                    self._save(routing_key, delivery)
                case CommandName.APPROVE | CommandName.DENY:
                    with self._readers.reader() as store:
                        decide(self._directory, store, delivery, command, self._submit)
                case CommandName.STOP:  # handled in _deliver
                    raise AssertionError("unreachable")
        except HermesError as exc:
            self._directory.reply_now(
                delivery, f"{command.name.value}: {exc}", session_id=self._directory.existing(routing_key)
            )

    def _reset(self, routing_key: str, delivery: Delivery, command: Command) -> None:
        reason = EndReason.NEW_SESSION if command.name is CommandName.NEW else EndReason.SESSION_RESET
        title = command.argument or None
        note = ""
        if title is not None:
            with self._readers.reader() as store:
                refusal = next_title_refusal(store, delivery.message.source, title)
            if refusal is not None:
                note = f" {refusal}."
            else:
                self._pending_titles[routing_key] = title
                note = f" Its title will be '{title}'."
        old = self._directory.existing(routing_key)
        self._resume_lists.pop(routing_key, None)  # conversation-scoped: a numbered list belongs to the old one
        reply = "Started a new session." + note
        if old is None:
            self._directory.reply_now(delivery, reply, session_id=None)
            return
        self._directory.cancel_running(old)  # a late result of the running turn is dropped
        self._directory.begin_end(old)
        save = self._config.saves_memories_on(command.name.value)  # "new" or "reset"
        self._directory.queue_control(old, EndSession(reason=reason, reply=reply, save_memories=save), delivery)

    def end_by_timer(self, message: EndDue) -> None:
        session_id = message.session_id
        directory = self._directory
        if directory.is_ending(session_id):
            return
        if directory.is_active(session_id):
            return  # active again: the timer is moved by that activity
        if not directory.awaits_creation(session_id):
            with self._readers.reader() as store:
                record = store.find_session(session_id)
                holder = store.leases.holder(session_id)
            if record is None or not record.is_live:
                return  # ended (or pruned) meanwhile
            if holder is not None and holder != self._lease_owner and self._owner_alive(holder):
                return  # another live process runs this session's turns: a reset is for the lease holder to do
        self._directory.begin_end(session_id)
        save = self._config.saves_memories_on(message.reason.value)  # "idle" or "daily"
        self._directory.queue_control(
            session_id, EndSession(reason=message.reason, reply=message.notice, save_memories=save), None
        )

    def admin(self, change: AdminChange) -> None:
        """An operator's rename or end: a control turn of the session's actor (activated for it when it has none),
        in order with its turns, so the actor's title and state change with the store's. An end works as ``/new``'s
        does: the running turn is cancelled and the session's keys lead to a fresh session from now on."""
        session_id = change.session_id
        if self._directory.is_ending(session_id):
            raise SessionClosedError(f"session {session_id} is ending already; nothing was changed")
        if isinstance(change.control, EndSession):
            self._directory.cancel_running(session_id)
            self._directory.begin_end(session_id)
        self._directory.queue_control(session_id, change.control, None)

    def _resume(self, routing_key: str, delivery: Delivery, argument: str) -> None:
        source = delivery.message.source
        current = self._directory.existing(routing_key)
        any_user = self._config.resume_any_user
        with self._readers.reader() as store:
            if not argument:
                offered = list_resumable(store, source, any_user=any_user)
                self._resume_lists[routing_key] = [s.id for s in offered]
                self._directory.reply_now(delivery, resume_listing_text(offered), session_id=current)
                return
            listed = self._resume_lists.get(routing_key, [])
            choice = choose_resume_target(store, source, argument, listed, any_user=any_user)
        tip = choice.target
        if tip is None:
            self._directory.reply_now(delivery, choice.refusal or "Nothing to resume.", session_id=current)
            return
        if self._directory.is_ending(tip.id):
            self._directory.reply_now(
                delivery, f"Session {tip.id} is ending; start a new one with /new.", session_id=current
            )
            return
        if not tip.is_live:
            self._submit(lambda store: store.reopen_session(tip.id))
        self._directory.rebind(routing_key, tip.id)
        if current is not None and current != tip.id:
            self._end_left_behind(current, routing_key)
        self._directory.reply_now(delivery, f"Resumed {tip.title or tip.id}.", session_id=tip.id)

    def _end_left_behind(self, session_id: str, moved_key: str) -> None:
        """``/resume`` moved ``moved_key`` away from ``session_id``: end it (``session_switch``) unless another key
        still leads to it (a handoff's home chat, a terminal bound to it) or its row does not exist yet. Its running
        turn, if any, finishes first; ``/resume`` brings it back."""
        if self._directory.awaits_creation(session_id):
            return
        with self._readers.reader() as store:
            record = store.find_session(session_id)
            others = [key for key in store.routes_to(session_id) if key != moved_key]  # the move is not stored yet
        if record is None or not record.is_live or others:
            return
        self._directory.begin_end(session_id)
        self._directory.queue_control(session_id, EndSession(reason=EndReason.SESSION_SWITCH), None)

    def _title(self, routing_key: str, delivery: Delivery, argument: str) -> None:
        session_id = self._directory.existing(routing_key)
        if session_id is None:
            if not argument:
                self._directory.reply_now(
                    delivery, "No conversation yet; /title <text> names the next one.", session_id=None
                )
                return
            with self._readers.reader() as store:
                refusal = next_title_refusal(store, delivery.message.source, argument)
            if refusal is not None:
                self._directory.reply_now(delivery, f"{refusal}.", session_id=None)
                return
            self._pending_titles[routing_key] = argument
            self._directory.reply_now(
                delivery, f"The title will be set to '{argument}' when the session starts.", session_id=None
            )
            return
        with self._readers.reader() as store:
            record = store.find_session(session_id)
        if record is not None and not reachable(delivery.message.source, any_user=self._config.resume_any_user).matches(
            record
        ):
            # A shared chat (a handed-off thread) reaches its owner's session: only that principal titles it.
            self._directory.reply_now(delivery, NOT_YOURS_TO_TITLE, session_id=session_id)
            return
        self._directory.queue_control(session_id, SetTitle(text=argument or None), delivery)

    def _save(self, routing_key: str, delivery: Delivery) -> None:
        session_id = self._directory.existing(routing_key)
        if session_id is None or self._directory.awaits_creation(session_id) or self._read_transcript is None:
            self._directory.reply_now(delivery, NOTHING_TO_SAVE, session_id=session_id)
            return
        visible = reachable(delivery.message.source, any_user=self._config.resume_any_user)
        with self._readers.reader() as store:
            if not visible.matches(store.get_session(session_id)):  # a shared chat leading to another's session
                reply = None
            else:
                reply = save_reply(store, session_id, self._read_transcript)
        if reply is None:
            text = "Only the person who started this conversation can save it here."
            self._directory.reply_now(delivery, text, session_id=session_id)
            return
        self._directory.reply_now(delivery, reply.text, session_id=session_id, document=reply.document)

    def _sessions(self, delivery: Delivery, query: str) -> None:
        with self._readers.reader() as store:
            text = list_sessions_text(store, delivery.message.source, query, any_user=self._config.resume_any_user)
        self._directory.reply_now(delivery, text, session_id=None)

    def _handoff(self, routing_key: str, delivery: Delivery, platform: str) -> None:
        session_id = self._directory.existing(routing_key)
        if not platform:
            self._directory.reply_now(
                delivery, "Usage: /handoff <platform>, e.g. /handoff telegram.", session_id=session_id
            )
            return
        if session_id is None:
            self._directory.reply_now(delivery, "Nothing to hand off yet: send a message first.", session_id=None)
            return
        if self._directory.is_active(session_id):
            self._directory.reply_now(
                delivery, "A reply is still being written; hand off once it has arrived.", session_id=session_id
            )
            return
        self._handoffs[session_id] = PendingHandoff(
            origin=delivery.message.source, platform=platform, message_id=delivery.message.message_id
        )
        self._directory.queue_control(session_id, Handoff(platform=platform), delivery)

    def handoff_result(self, message: HandoffResult) -> None:
        pending = self._handoffs.pop(message.session_id, None)
        if pending is None:
            return
        origin, key, previous, platform = pending.origin, pending.key, pending.previous, pending.platform
        if message.error is None:
            with self._readers.reader() as store:
                record = store.find_session(message.session_id)
            name = (record.title if record is not None else None) or message.session_id
            self._directory.send_now(
                origin,
                handoff_done_text(platform, message, origin.platform, name),
                message.session_id,
                reply_to=pending.message_id,
            )
            return
        if key:
            if previous is not None:
                self._directory.rebind(key, previous)
            else:
                self._directory.unbind(key, message.session_id)
        self._directory.send_now(
            origin,
            f"Handoff to {platform} failed: {message.error}. The conversation stays here; try again later.",
            message.session_id,
            reply_to=pending.message_id,
        )

    def _sethome(self, delivery: Delivery) -> None:
        source = delivery.message.source
        if source.chat_id is None:
            self._directory.reply_now(
                delivery, "This chat has no id on its platform, so it cannot be home.", session_id=None
            )
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
        self._submit(lambda store: store.homes.set(home))
        self._directory.reply_now(
            delivery, f"This chat is now the home channel for {source.platform}.", session_id=None
        )

    def _submit(self, work: Callable[[StoreInterface], object]) -> None:
        """Queue a write without waiting for it; a failure is logged (the command's reply has gone already)."""
        self._writer.submit(work).add_done_callback(_log_failure)


def handoff_done_text(platform: str, result: HandoffResult, came_from: str, name: str) -> str:
    """The reply to ``/handoff``: where the conversation went and how to pick it up again where it came from."""
    where = f"chat {result.chat_id}" if result.chat_id else "its home channel"
    if result.thread_id:
        where += f", thread {result.thread_id}"
    if came_from == "api_server":
        back = f"To continue it here, send the header X-Hermes-Session-Id: {result.session_id}"
    else:
        back = f"To pick it up here again, send /resume {name}"
    return f"{HANDED_OFF} {platform} ({where}): the conversation continues there. {back}."


def handed_off_to(message_text: str, reply_text: str) -> str | None:
    """The platform a ``/handoff`` moved the conversation to, when ``reply_text`` answers the message
    ``message_text`` and reports a done handoff; else ``None``. A command never reaches the agent, so only the
    lifecycle answers it: the reply's first words tell a done handoff from a refusal or a failure."""
    command = parse_command(message_text)
    if command is None or command.name is not CommandName.HANDOFF or not command.argument:
        return None
    return command.argument if reply_text.startswith(f"{HANDED_OFF} {command.argument} (") else None


def _log_failure(done: Future[object]) -> None:
    if not done.cancelled() and (exc := done.exception()) is not None:
        _log.error("a lifecycle write failed: %s", exc)
