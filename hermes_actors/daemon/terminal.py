"""Terminal conversations (source ``cli``): one turn per line, answered in place.

Both the daemon (for ``hermesctl chat`` over the control socket) and ``hermesctl chat`` itself (in-process, when no
daemon runs) use :class:`TerminalChannel`, so a terminal session behaves the same either way: the message goes
through the durable inbox, the session's actor runs the turn, and the reply comes back through the outbox to the
waiting terminal.

A terminal session ends with ``user_exit`` when its user closes the chat (:func:`end_at_exit`), and continuing an
ended session reopens it (:func:`reopen_to_resume`), as the reference system does. Both write the store directly:
the chat that owned the session has finished with it. A chat that falls back to running in-process after its
daemon stopped may repeat a line the daemon had already taken; :meth:`TerminalChannel.expect_early` and
:meth:`TerminalChannel.chat` make sure it is neither run twice nor waited for in vain.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import time
from pathlib import Path

from hermes_actors.daemon.control import Bind, BindReply, Chat, ChatReply, ChatText, ChatTool, ControlError, Emit
from hermes_actors.errors import SessionBusyError, SessionNotFoundError
from hermes_actors.lifecycle.handlers import handed_off_to
from hermes_actors.messages import InboundMessage, OutboundError, OutboundMessage
from hermes_actors.routing import SessionSource, build_session_key
from hermes_actors.runtime.admin import admin_lease
from hermes_actors.runtime.gateway import Gateway
from hermes_actors.runtime.leases import new_lease_owner
from hermes_actors.store import EndReason, Store  # Store: to open the home's SQLite file by its path
from hermes_actors.turn_events import ToolStatus
from hermes_actors.waiters import ReplyWaiters

__all__ = ["PLATFORM", "TerminalChannel", "end_at_exit", "is_terminal_session", "reopen_to_resume"]

PLATFORM = "cli"

_log = logging.getLogger(__name__)


class TerminalChannel:
    """Runs terminal turns on a gateway; its :attr:`waiters` must be among the gateway's senders."""

    def __init__(self) -> None:
        self.waiters = ReplyWaiters(PLATFORM)
        self._gateway: Gateway | None = None
        self._early: dict[str, concurrent.futures.Future[OutboundMessage]] = {}

    def expect_early(self, message_id: str) -> None:
        """Wait for the reply to ``message_id`` from before :meth:`attach`: a line a stopped daemon had taken may
        be answered by the gateway's recovery as soon as it starts."""
        self._early[message_id] = self.waiters.expect(message_id)

    def attach(self, gateway: Gateway) -> None:
        """Use ``gateway`` (built with :attr:`waiters` as a sender)."""
        self._gateway = gateway

    @property
    def gateway(self) -> Gateway:
        if self._gateway is None:
            raise RuntimeError("TerminalChannel.attach(gateway) was not called")
        return self._gateway

    @staticmethod
    def source(chat_id: str, user_id: str, user_name: str | None = None) -> SessionSource:
        """The session source of terminal ``chat_id``."""
        return SessionSource(platform=PLATFORM, chat_type="dm", chat_id=chat_id, user_id=user_id, user_name=user_name)

    def chat(self, request: Chat, emit: Emit | None = None) -> ChatReply:
        """Run ``request`` as a turn and wait for its reply. With ``emit``, the turn's text and tool calls go to it
        as they happen (on this thread); either way a turn stopped before it answered (``/stop`` from another
        connection or thread) returns a ``stopped`` reply instead of waiting in vain."""
        source = self.source(request.chat_id, request.user_id, request.user_name)
        inbound = InboundMessage(source=source, text=request.text, message_id=request.message_id)
        future = self._early.pop(request.message_id, None) or self.waiters.expect(request.message_id)
        watcher = _Watcher()
        future.add_done_callback(lambda _: watcher.events.put(_REPLIED))
        self.gateway.watch.watch(request.message_id, watcher)
        try:
            accepted = self.gateway.accept(inbound)
            if accepted.duplicate and not future.done() and not self._pending(request.message_id):
                raise ControlError(
                    "this line had reached hermesd, which answered it before it stopped; it was not sent again, and "
                    f"its reply is in the session of {accepted.routing_key} ('hermesctl sessions list --source cli')"
                )
            if watcher.wait(request.timeout_s, emit) is _STOPPED:
                return ChatReply(
                    session_id=watcher.session_id,
                    text="(turn stopped; your message is kept, without an answer)",
                    stopped=True,
                )
            reply = future.result(timeout=0)
        except concurrent.futures.TimeoutError:
            key = build_session_key(source, self.gateway.config.key_policy)
            raise ControlError(
                f"no reply within {request.timeout_s:.0f} s; the turn goes on and its reply will be stored in the "
                f"session of {key} ('hermesctl sessions list --source cli')"
            ) from None
        finally:
            self.gateway.watch.unwatch(request.message_id)
            self.waiters.forget(request.message_id)
        handed_off = handed_off_to(request.text, reply.text)
        ended = reply.session_id if reply.error == OutboundError.SESSION_ENDED else None
        return ChatReply(session_id=reply.session_id, text=reply.text, handed_off=handed_off, ended=ended)

    def _pending(self, message_id: str) -> bool:
        """Whether the inbox holds ``message_id`` unanswered (recovery runs it and its reply comes)."""
        with self.gateway.read() as store:
            return any(r.platform == PLATFORM and r.platform_message_id == message_id for r in store.inbox.pending())

    def bind(self, request: Bind) -> BindReply:
        """Point terminal ``chat_id`` at an existing session."""
        with self.gateway.read() as store:
            if store.find_session(request.session_id) is None:
                raise SessionNotFoundError(
                    f"no session {request.session_id!r}; list them with 'hermesctl sessions list'"
                )
        key = build_session_key(self.source(request.chat_id, request.user_id), self.gateway.config.key_policy)
        self.gateway.rebind(key, request.session_id)
        return BindReply(routing_key=key)


_REPLIED = object()  # the reply came
_STOPPED = object()  # the turn was stopped before it answered: no reply comes


class _Watcher:
    """A terminal turn's :class:`~hermes_actors.turn_events.TurnEvents`: each event into a queue that the chat's
    thread drains (the agent's thread never waits on a terminal), ended by the reply or the turn's stop."""

    def __init__(self) -> None:
        self.events: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.session_id: str | None = None

    def started(self, session_id: str) -> None:
        self.session_id = session_id

    def stopped(self) -> None:
        self.events.put(_STOPPED)

    def text(self, delta: str) -> None:
        self.events.put(ChatText(delta=delta))

    def tool(self, name: str, call_id: str, status: ToolStatus, detail: str = "") -> None:
        self.events.put(ChatTool(name=name, call_id=call_id, status=status))

    def wait(self, timeout_s: float, emit: Emit | None) -> object:
        """Hand events to ``emit`` until the reply comes (:data:`_REPLIED`) or the turn stops (:data:`_STOPPED`);
        raise :class:`concurrent.futures.TimeoutError` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            try:
                item = self.events.get(timeout=max(left, 0.0)) if left > 0 else self.events.get_nowait()
            except queue.Empty:
                raise concurrent.futures.TimeoutError from None
            if item is _REPLIED or item is _STOPPED:
                return item
            if emit is not None and isinstance(item, ChatText | ChatTool):
                emit(item)


def reopen_to_resume(database: Path, session_id: str) -> bool:
    """Make ``session_id`` live again if it has ended, before a terminal chat continues it; return whether it had."""
    with Store.open(database) as store:
        if store.get_session(session_id).is_live:
            return False
        store.reopen_session(session_id)
        return True


def is_terminal_session(database: Path, session_id: str) -> bool:
    """Whether ``session_id`` is a live session of the terminal (not one of another platform resumed here)."""
    with Store.open(database, readonly=True) as store:
        record = store.find_session(session_id)
    return record is not None and record.is_live and record.source == PLATFORM


def end_at_exit(database: Path, session_id: str) -> bool:
    """End the terminal session ``session_id`` with ``user_exit`` (its user closed the chat), under its lease;
    return whether this ended it. A session of another platform that the chat resumed is left as it is (it lives on
    there), and so is one another live process holds (a second chat on it, mid-turn): that process owns it now."""
    with Store.open(database) as store:
        record = store.find_session(session_id)
        if record is None or not record.is_live or record.source != PLATFORM:
            return False
        try:
            with admin_lease(store, session_id, new_lease_owner()):
                store.end_session(session_id, EndReason.USER_EXIT)
        except SessionBusyError as exc:
            _log.info("left session %s live at exit: %s", session_id, exc)
            return False
        return True
