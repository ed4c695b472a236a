"""What the supervisor does with a message for a session, by the session's state and the message's busy policy.

A session that runs no turn and has nothing queued takes any message as its next turn. One that is busy treats a
message by its :class:`~hermes_actors.messages.BusyPolicy` (the request's own, else ``busy:`` for its platform and
chat type, :meth:`~hermes_actors.config.BusyConfig.policy_of`):

- ``queue``: queued, its own turn in order (over ``runtime.pending_soft_limit`` queued messages merge, as ever);
- ``collect``: queued, and the messages that arrived during a turn become one next turn
  (:meth:`~hermes_actors.runtime.live.LiveSession.next_turn`);
- ``interrupt``: the running turn is stopped (:meth:`~hermes_actors.runtime.live.LiveSession.interrupt`) and the
  next turn answers everything since, the interrupted turn's messages too;
- ``reject``: answered now that the session is busy (:attr:`~hermes_actors.messages.OutboundError.SESSION_BUSY`, with
  ``busy.retry_after_s``); its row is refused, nothing else happens;
- ``steer``: offered to the running turn (:mod:`hermes_actors.runtime.steering`) when nothing else waits; what the
  turn does not take waits for the next turn as ``collect`` does.

``/stop`` stops the running turn and is answered in order; over ``runtime.pending_hard_limit`` queued messages a new
one is refused whatever its policy. Every queued or steered message stays a pending inbox row until a turn commits
it, so a timeout, ``/stop``, a reload, a restart or a crash loses none.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping

from hermes_actors.messages import BusyPolicy, OutboundError
from hermes_actors.runtime.directory import SupervisorDirectory
from hermes_actors.runtime.live import LiveSession
from hermes_actors.runtime.log_fields import platform_extra
from hermes_actors.runtime.protocol import Delivery
from hermes_actors.runtime.services import SessionServices
from hermes_actors.runtime.steering import steerable
from hermes_actors.store import InboxState

__all__ = ["GATHERING", "Arrivals", "busy_text"]

_log = logging.getLogger(__name__)

GATHERING = frozenset({BusyPolicy.COLLECT, BusyPolicy.INTERRUPT, BusyPolicy.STEER})
"""The policies whose messages, queued during a turn, become one next turn."""


def busy_text(retry_after_s: int) -> str:
    """What the sender of a message refused by the busy policy ``reject`` is told."""
    return (
        "This conversation is busy answering an earlier message; this one was not run. "
        f"Send it again when the reply has come (in about {retry_after_s} s)."
    )


class Arrivals:
    """Queues or answers the messages that reach a session (on the supervisor's thread; see the module docstring).
    ``counts`` are the supervisor's counters (``rejected`` is counted here)."""

    __slots__ = ("_counts", "_port", "_services")

    def __init__(self, services: SessionServices, port: SupervisorDirectory, counts: MutableMapping[str, int]) -> None:
        self._services = services
        self._port = port
        self._counts = counts

    def collects(self, delivery: Delivery) -> bool:
        """Whether ``delivery``, queued during a turn, is gathered with the others into one next turn."""
        return self._services.busy.policy_of(delivery.message) in GATHERING

    def arrive(self, session_id: str, state: LiveSession, delivery: Delivery, *, stop: bool = False) -> bool:
        """Queue ``delivery`` (``stop``: a ``/stop``) in ``state``, or answer or hand it to the running turn now;
        return whether something was queued (the supervisor then dispatches)."""
        if stop:  # invalidate the running turn now, answer in order
            state.token.cancel()
            state.queue.append(delivery)
            return True
        queued = len(state.queue)
        if queued >= self._services.config.pending_hard_limit:
            self._refuse(
                delivery,
                f"Too many messages are waiting in this conversation ({queued}); this one was not run. "
                "Wait for the replies, then send it again.",
            )
            return False
        if not (state.busy or state.queue):
            state.queue.append(delivery)
            return True
        policy = self._services.busy.policy_of(delivery.message)
        if policy is BusyPolicy.REJECT:
            retry = self._services.busy.retry_after_s
            self._refuse(delivery, busy_text(retry), session_id, error=OutboundError.SESSION_BUSY, retry_after_s=retry)
            return False
        if policy is BusyPolicy.INTERRUPT:
            state.interrupt()
            _log.info(
                "session %s: a newer message interrupts its turn",
                session_id,
                extra=platform_extra(session_id, (delivery,)),
            )
        elif policy is BusyPolicy.STEER and not state.queue and steerable(delivery) and state.steering.offer(delivery):
            _log.info(
                "session %s: a message goes into its running turn",
                session_id,
                extra=platform_extra(session_id, (delivery,)),
            )
            return False
        state.queue.append(delivery)
        return True

    def _refuse(
        self,
        delivery: Delivery,
        text: str,
        session_id: str | None = None,
        *,
        error: OutboundError | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        self._counts["rejected"] += 1
        self._port.reply_now(
            delivery, text, session_id=session_id, state=InboxState.REJECTED, error=error, retry_after_s=retry_after_s
        )
