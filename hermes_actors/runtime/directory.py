"""The supervisor's side of the lifecycle's :class:`~hermes_actors.lifecycle.directory.Directory` port.

:class:`SupervisorDirectory` answers the lifecycle commands from the supervisor's routes and live sessions, and
queues their work through the supervisor; it runs on the supervisor's thread. Replies of its own are submitted to
the writer and go to the outbox once their row has committed (the writer's ``then``): it never waits for a commit.
When the store refuses that commit (a full disk), the sender is told so at once, without a row. Each message answered
here is counted by how it ended, once its answer committed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Future

import msgspec

from hermes_actors.errors import StoreError
from hermes_actors.messages import OutboundDocument, OutboundError
from hermes_actors.routing import SessionSource
from hermes_actors.runtime.live import LiveSession
from hermes_actors.runtime.protocol import Control, Delivery
from hermes_actors.runtime.routes import Routes, submit_logged
from hermes_actors.runtime.services import SessionServices, queue_reply, reply_for
from hermes_actors.store import InboxState, StoreInterface
from hermes_actors.store.writer import StoreWriter

__all__ = ["SupervisorDirectory"]

_log = logging.getLogger(__name__)


class SupervisorDirectory:
    """Implements the lifecycle's ``Directory`` port over the supervisor's state (see the module docstring)."""

    __slots__ = ("_cancel_running", "_live", "_metrics", "_outbox", "_queue_control", "_routes", "_writer")

    def __init__(
        self,
        routes: Routes,
        live: Mapping[str, LiveSession],
        *,
        services: SessionServices,
        queue_control: Callable[[str, Control, Delivery | None], None],
        cancel_running: Callable[[str | None], None],
    ) -> None:
        self._routes = routes
        self._live = live
        self._writer: StoreWriter = services.writer
        self._outbox = services.outbox
        self._metrics = services.metrics
        self._queue_control = queue_control
        self._cancel_running = cancel_running

    def existing(self, routing_key: str) -> str | None:
        """Return the live session ``routing_key`` leads to, without creating one."""
        return self._routes.existing(routing_key)

    def is_ending(self, session_id: str) -> bool:
        """Return whether ``session_id``'s end is queued but not committed yet."""
        return self._routes.is_ending(session_id)

    def is_active(self, session_id: str) -> bool:
        """Return whether ``session_id`` has a turn running or queued."""
        state = self._live.get(session_id)
        return state is not None and (state.busy or bool(state.queue))

    def awaits_creation(self, session_id: str) -> bool:
        """Return whether ``session_id`` is assigned but its first turn (which creates its row) has not run."""
        state = self._live.get(session_id)
        return state is not None and state.create_with is not None

    def reply_now(
        self,
        delivery: Delivery,
        text: str,
        *,
        session_id: str | None,
        state: InboxState = InboxState.DONE,
        document: OutboundDocument | None = None,
        error: OutboundError | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        """Complete ``delivery`` with a reply straight from the supervisor (nothing goes to a transcript); with
        ``error``, a notice (sent again no sooner than ``retry_after_s``, when it says)."""
        reply = reply_for(delivery.message.source, session_id, text, delivery.message.message_id)
        if document is not None:
            reply = msgspec.structs.replace(reply, document=document)
        if error is not None:
            retry = msgspec.UNSET if retry_after_s is None else retry_after_s
            reply = msgspec.structs.replace(reply, error=error, retry_after_s=retry)
        outbox, metrics = self._outbox, self._metrics
        outcome = "refused" if state is InboxState.REJECTED else "answered"

        def answer(store: StoreInterface) -> int:
            known = session_id if session_id is not None and store.find_session(session_id) else None
            store.inbox.complete(delivery.inbox_id, session_id=known, state=state)
            return queue_reply(store, reply)

        def then(outbox_id: int) -> None:
            metrics.messages_ended(outcome, 1 if delivery.inbox_id > 0 else 0)
            outbox.deliver(outbox_id, reply)

        written = submit_logged(self._writer, answer, then=then)
        written.add_done_callback(lambda done: self._tell_unanswered(delivery, session_id, done))

    def _tell_unanswered(self, delivery: Delivery, session_id: str | None, written: Future[int]) -> None:
        """Tell ``delivery``'s sender that the store refused its answer (its row stays pending: the next start
        runs it again); nothing when the answer committed."""
        error = None if written.cancelled() else written.exception()
        if not isinstance(error, StoreError):
            return
        first = delivery.message
        text = (
            f"Your message could not be answered: {error}. It is kept and will be answered when the gateway next "
            "starts."
        )
        notice = reply_for(first.source, session_id, text, first.message_id)
        try:
            self._outbox.notify(msgspec.structs.replace(notice, error=OutboundError.STORAGE_UNAVAILABLE))
        except Exception:
            _log.exception("the notice of an unanswered message could not be sent")

    def send_now(
        self,
        source: SessionSource,
        text: str,
        session_id: str | None,
        *,
        reply_to: str | None = None,
    ) -> None:
        """Send ``text`` to ``source``'s chat (a later report), answering inbound ``reply_to`` when given."""
        reply = reply_for(source, session_id, text, reply_to)
        outbox = self._outbox
        submit_logged(
            self._writer,
            lambda store: queue_reply(store, reply),
            then=lambda outbox_id: outbox.deliver(outbox_id, reply),
        )

    def queue_control(self, session_id: str, control: Control, delivery: Delivery | None) -> None:
        """Queue ``control`` as a turn of ``session_id``, answering ``delivery``."""
        self._queue_control(session_id, control, delivery)

    def cancel_running(self, session_id: str | None) -> None:
        """Invalidate the running turn of ``session_id`` (its late result is dropped)."""
        self._cancel_running(session_id)

    def begin_end(self, session_id: str) -> None:
        """Mark ``session_id`` as ending: its keys re-resolve to successors, which wait for the end to commit."""
        self._routes.begin_end(session_id)

    def rebind(self, routing_key: str, session_id: str) -> None:
        """Point ``routing_key`` at ``session_id`` (stored, and cached at once)."""
        self._routes.store(routing_key, session_id)

    def unbind(self, routing_key: str, session_id: str) -> None:
        """Delete ``routing_key``'s route, which led to ``session_id``."""
        self._routes.unbind(routing_key, session_id)
