"""The session actor: the mailbox of one session's :class:`~hermes_actors.runtime.turns.SessionTurns`, run on a
thread of a shared pool while it has a turn to run (:class:`~hermes_actors.runtime.actors.PooledActor`: an idle
session holds no thread).

The supervisor is its only sender: one :class:`~hermes_actors.runtime.protocol.RunTurn` at a time, answered by
:class:`~hermes_actors.runtime.protocol.TurnFinished`; when it stops (passivated, evicted, ended or crashed) it tells
the supervisor :class:`~hermes_actors.runtime.protocol.SessionStopped`. Its log lines carry the session's fields
(:mod:`hermes_actors.runtime.log_fields`), and each turn is counted in the runtime's metrics.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import msgspec
import pykka

from hermes_actors.errors import LeaseLostError, ShardLostError, ShutdownError, StaleTurnError, StoreError
from hermes_actors.runtime.actors import ActorPool, PooledActor
from hermes_actors.runtime.admin import settle_unanswered
from hermes_actors.runtime.dead_letters import fail_turn
from hermes_actors.runtime.log_fields import bind_session
from hermes_actors.runtime.protocol import RunTurn, SessionMessage, SessionStopped, TurnFinished, TurnOutcome
from hermes_actors.runtime.records import answered, looked_up_again
from hermes_actors.runtime.services import OutboxSink, reply_for
from hermes_actors.runtime.turns import SessionTurns

__all__ = ["SessionActor", "tell_unsaved"]

_log = logging.getLogger(__name__)


def outcome_of(outcome: TurnOutcome | None, failed: str) -> str:
    """The ``outcome`` label of a finished turn; ``failed`` says how a turn without an outcome ended."""
    if outcome is None:
        return failed
    return "cancelled" if outcome.cancelled else "failed" if outcome.failed is not None else "ok"


def message_outcome(outcome: TurnOutcome) -> str:
    """How the messages a turn completed ended (``hermes_messages_total{outcome}``)."""
    if outcome.cancelled and not outcome.interrupted:  # an interrupted turn's messages: the next turn answers
        return "stopped"
    return "refused" if outcome.failed is not None else "answered"


def tell_unsaved(outbox: OutboxSink, session_id: str, request: RunTurn, error: str) -> None:
    """Tell the senders of ``request`` that their message could not be saved (not stored: the store is what
    failed); the supervisor runs the turn again later."""
    for delivery in request.deliveries[:1]:
        first = delivery.message
        text = (
            f"Your message could not be saved: {error}. It is kept and will be answered as soon as the gateway "
            "can write again; nothing needs to be sent again."
        )
        notice = reply_for(first.source, session_id, text, first.message_id, answers=answered(request.deliveries))
        try:
            outbox.notify(msgspec.structs.replace(notice, error="storage_unavailable"))
        except Exception:
            _log.exception("session %s: the notice of an unsaved turn could not be sent", session_id)


class SessionActor(PooledActor):
    """The mailbox of one session, run on a thread of the session actors' pool while it has a turn to run; the
    supervisor is its only sender."""

    pool = ActorPool("SessionActor")

    def __init__(
        self, turns: Callable[[], SessionTurns], supervisor: pykka.ActorRef[Any], session_id: str = ""
    ) -> None:
        super().__init__()
        self._make_turns = turns
        self._turns: SessionTurns | None = None
        self._supervisor = supervisor
        self._session_id = session_id

    def on_start(self) -> None:
        self._open()

    def _open(self) -> str | None:
        """Build the session's turns (they read the session from the store); why that failed, if it did. A store
        that cannot be read now is no crash: the turn given to this actor waits and runs again, as an unsaved
        one does, instead of dying with the actor."""
        try:
            self._turns = self._make_turns()
        except StoreError as exc:
            _log.error("session %s: its actor could not read the session (%s); it tries again", self._session_id, exc)
            return str(exc)
        self._session_id = self._turns.session_id
        bind_session(self._session_id, self._turns.platform)  # in the actor's own context: its lines only
        return None

    def on_receive(self, message: SessionMessage) -> None:
        """Run one turn and tell the supervisor it finished. A turn's failure never escapes (one that can succeed
        later runs again; one that failed unexpectedly dead-letters its messages:
        :func:`~hermes_actors.runtime.dead_letters.fail_turn`); anything but a :class:`RunTurn` is a bug: raised,
        so an ask gets it back and a tell reaches :meth:`on_failure`, which reports the actor stopped."""
        match message:
            case RunTurn():
                if self._turns is None and (failed := self._open()) is not None:
                    self._tell_supervisor(TurnFinished(session_id=self._session_id, retry=message, error=failed))
                    return
                assert self._turns is not None
                # The turn's replies leave once the supervisor has been told it finished (OutboxRouter.held).
                with self._turns.services.outbox.held():
                    self._run(message)
            case _:
                raise TypeError(f"SessionActor got an unknown message {message!r}")

    def _run(self, message: RunTurn) -> None:
        """One turn, and the report that it finished (a failure never escapes: see :meth:`on_receive`)."""
        assert self._turns is not None
        outcome: TurnOutcome | None = None
        retry: RunTurn | None = None
        error: str | None = None
        abandon: int | None = None  # the shard term whose deliveries are dropped (cluster mode: shard lost)
        kind = "error"  # how the turn ended, for the metrics, when it gave no outcome
        started = time.perf_counter()
        try:
            outcome = self._turns.run(message)
            if outcome.cancelled and not outcome.interrupted:  # stored unanswered: its watchers hear so now
                stopped = [*message.also_answers, *(d.message.message_id for d in message.deliveries)]
                self._turns.services.watch.stopped(stopped)  # the interrupted turns' messages it answered too
        except LeaseLostError as exc:
            _log.warning("session %s: %s", self._session_id, exc)
            self._turns.lost_lease()
            retry, kind = message, "lease_lost"
        except ShardLostError as exc:
            _log.info("session %s: %s", self._session_id, exc)
            kind = "stale"
            abandon = max((d.term for d in message.deliveries), default=0)
        except StaleTurnError as exc:
            _log.info("session %s: %s", self._session_id, exc)
            kind = "stale"
            retry = self._unanswered(message)
        except StoreError as exc:
            # A full or read-only disk, a refused commit: nothing of the turn was saved. The caller hears so
            # now; the turn runs again (before any later message of this session) once the store takes it.
            _log.error("session %s: the turn could not be saved: %s", self._session_id, exc)
            error, retry, kind = str(exc), message, "unsaved"
            tell_unsaved(self._turns.services.outbox, self._session_id, message, error)
        except ShutdownError as exc:
            # Not a /stop: the process stops. Nothing of the turn was saved or sent; its inbox rows stay pending, and
            # the next start runs it again.
            _log.info("session %s: %s", self._session_id, exc)
            kind = "abandoned"
        except Exception as exc:
            _log.exception("session %s: turn failed; its messages are dead-lettered", self._session_id)
            fail_turn(self._turns.services, self._session_id, message, repr(exc))
        finally:
            if retry is None:
                settle_unanswered(self._turns.services, self._session_id, message)
            platform = message.deliveries[0].message.source.platform if message.deliveries else self._turns.platform
            seconds = time.perf_counter() - started
            metrics = self._turns.services.metrics
            metrics.turn_finished(platform, outcome_of(outcome, kind), seconds)
            if outcome is not None:
                metrics.messages_ended(message_outcome(outcome), sum(1 for i in outcome.inbox_ids if i > 0))
            finished = TurnFinished(
                session_id=self._session_id,
                outcome=outcome,
                retry=looked_up_again(retry) if retry is not None else None,
                error=error,
                abandon_term=abandon,
            )
            self._tell_supervisor(finished)

    def _unanswered(self, message: RunTurn) -> RunTurn | None:
        """After a turn refused because another turn answered some of its messages: the others, to run again first
        from the transcript read anew (the lease is taken again), or ``None`` when none is left (or it was a
        lifecycle step). Were they dropped, their rows would stay pending with no one to hand them over again."""
        assert self._turns is not None
        ids = [d.inbox_id for d in message.deliveries if d.inbox_id > 0]
        if message.control is not None or not ids:
            return None
        try:
            with self._turns.services.readers.reader() as store:
                pending = store.inbox.pending_among(ids)
        except Exception:
            _log.exception("session %s: reading which messages are still pending failed", self._session_id)
            return None
        if not pending:
            return None
        self._turns.lost_lease()
        return msgspec.structs.replace(
            message, deliveries=tuple(d for d in message.deliveries if d.inbox_id in pending)
        )

    def _tell_supervisor(self, message: TurnFinished | SessionStopped) -> None:
        with contextlib.suppress(pykka.ActorDeadError):  # the runtime is shutting down; nothing waits for it
            self._supervisor.tell(message)

    def on_stop(self) -> None:
        _log.info("session %s: actor stopped (passivated, evicted or its session ended)", self._session_id)
        if self._turns is not None:
            try:
                self._turns.release_lease()
            except Exception as exc:  # the writer may already be closed at shutdown; the lease then expires
                _log.info("session %s: lease not released (%s); it will expire", self._session_id, exc)
        self._tell_supervisor(SessionStopped(session_id=self._session_id, actor_urn=self.actor_urn))

    def on_failure(self, exception_type: Any, exception_value: Any, traceback: Any) -> None:
        _log.error("session %s actor crashed: %s", self._session_id, exception_value)
        self._tell_supervisor(SessionStopped(session_id=self._session_id, actor_urn=self.actor_urn))
