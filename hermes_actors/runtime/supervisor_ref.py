"""A typed handle on the running supervisor: what the edge, the timers and the recovery send it."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pykka

from hermes_actors.runtime.protocol import (
    AdminChange,
    GetStatistics,
    Rebind,
    SessionFor,
    SupervisorStatistics,
    SupervisorTell,
)
from hermes_actors.runtime.services import SessionServices
from hermes_actors.runtime.supervisor import SupervisorActor

__all__ = ["Supervisor"]


class Supervisor:
    """A typed handle on a running :class:`SupervisorActor`: tells, and asks that wait up to ``timeout`` seconds."""

    __slots__ = ("_ref", "_timeout")

    def __init__(self, ref: pykka.ActorRef[SupervisorActor], timeout: float) -> None:
        self._ref = ref
        self._timeout = timeout

    @classmethod
    def start(cls, services: SessionServices, **hooks: Any) -> Supervisor:
        """Start the actor (``hooks``: ``on_turn``, ``on_activity``, ``on_end``) and return its handle."""
        return cls(SupervisorActor.start(services, **hooks), services.config.ask_timeout_s)

    def tell(self, message: SupervisorTell) -> None:
        """Send ``message`` without waiting."""
        self._ref.tell(message)

    def session_for(self, routing_key: str) -> str | None:
        """Return the session ``routing_key`` reaches now."""
        answer: str | None = self._ref.ask(SessionFor(routing_key=routing_key), block=True, timeout=self._timeout)
        return answer

    def statistics(self) -> SupervisorStatistics:
        """Return the supervisor's snapshot."""
        answer: SupervisorStatistics = self._ref.ask(GetStatistics(), block=True, timeout=self._timeout)
        return answer

    def rebind(self, routing_key: str, session_id: str) -> None:
        """Point ``routing_key`` at ``session_id`` and wait until the route has committed."""
        committed: Future[None] = self._ref.ask(
            Rebind(routing_key=routing_key, session_id=session_id), block=True, timeout=self._timeout
        )
        committed.result(timeout=self._timeout)

    def admin(self, change: AdminChange) -> None:
        """Queue an operator's change as a control turn of its session; raise the supervisor's refusal (the session
        is ending). The change's future resolves once the session's actor has applied it."""
        self._ref.ask(change, block=True, timeout=self._timeout)

    def stop(self, timeout: float, *, queued: Callable[[], object] | None = None) -> None:
        """Stop the supervisor and its session actors (within ``timeout`` seconds, else ``pykka.Timeout``).
        ``queued`` runs once the stop is queued behind what the supervisor was told so far: a turn that ends from
        then on starts no other."""
        stopping = self._ref.stop(block=False)
        if queued is not None:
            queued()
        stopping.get(timeout=timeout)
