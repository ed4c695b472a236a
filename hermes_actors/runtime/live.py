"""What the supervisor keeps of one session: its actor, its queue of work, and whether it may run now.

A :class:`LiveSession` exists while the session has an actor or a queue waiting for one; the supervisor hands its
actor one turn at a time (:meth:`LiveSession.next_turn`) and puts back a turn that saved nothing
(:meth:`LiveSession.put_back`), pausing the session after each refused save (:meth:`LiveSession.pause_after_failure`).
Its running ordinary turn's cancel token and steering channel are the supervisor's signals to that turn
(:meth:`LiveSession.interrupt`, :mod:`hermes_actors.runtime.steering`).
:func:`idle_sessions` and :func:`evictable_sessions` choose which actors the supervisor passivates.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from itertools import islice
from typing import Any

import msgspec
import pykka

from hermes_actors.lifecycle.commands import parse_command
from hermes_actors.routing import KeyPolicy, build_session_key
from hermes_actors.runtime.protocol import Control, Delivery, RunTurn, SupervisorStatistics, TurnOutcome
from hermes_actors.runtime.records import NewSession
from hermes_actors.runtime.services import CancelToken
from hermes_actors.runtime.steering import SteerChannel

__all__ = ["ControlWork", "LiveSession", "Work", "evictable_sessions", "idle_sessions", "statistics_of"]

RETRY_BASE_S = 1.0  # the first wait after the store refused a turn; doubled after each failure in a row
RETRY_MAX_S = 30.0


class ControlWork(msgspec.Struct, frozen=True, kw_only=True):
    """A lifecycle step queued for the session's actor, answering ``delivery`` (``None``: a timer's reset)."""

    control: Control
    delivery: Delivery | None = None


Work = Delivery | ControlWork


class LiveSession:
    """What the supervisor knows of one session with an actor (or a queue waiting for one)."""

    __slots__ = (
        "busy",
        "carried",
        "create_with",
        "failures",
        "hold_until",
        "joined",
        "last_used",
        "paused_until",
        "queue",
        "ref",
        "steering",
        "stopping",
        "title",
        "token",
    )

    def __init__(self, create_with: NewSession | None, *, title: str | None = None) -> None:
        self.ref: pykka.ActorRef[Any] | None = None
        self.queue: deque[Work] = deque()
        self.busy = False
        self.stopping = False
        self.token = CancelToken()
        self.steering = SteerChannel()  # the running ordinary turn's: messages handed into it (busy policy steer)
        self.joined: set[int] = set()  # inbox rows that join the next turn (a newer message interrupted the last)
        self.carried: tuple[str, ...] = ()  # message ids of interrupted turns the next ordinary turn answers too
        self.last_used = 0.0
        self.create_with = create_with
        self.title = title
        self.hold_until: str | None = None  # a session whose end must commit before this one runs
        self.failures = 0  # turns in a row the store refused to save
        self.paused_until: float | None = None  # after a refused save: no turn before this time (then in order)

    def drop_deliveries(self, term: int) -> int:
        """Cluster mode: drop the queued deliveries handed over under shard term ``term`` or an earlier one (a turn
        of that term was refused: their rows stay pending and come again, in order, under the next term); how many.
        """
        kept = [w for w in self.queue if not (isinstance(w, Delivery) and w.term <= term)]
        dropped = len(self.queue) - len(kept)
        self.queue = deque(kept)
        return dropped

    @property
    def in_use(self) -> bool:
        """Whether a turn runs or waits, or the session's row (and route) is not created yet."""
        return self.busy or bool(self.queue) or self.create_with is not None or self.hold_until is not None

    def next_turn(
        self, soft_limit: int, policy: KeyPolicy, collects: Callable[[Delivery], bool] = lambda _: False
    ) -> RunTurn:
        """Take the next turn off the queue (not empty): a control step, a ``/stop`` answer, once ``soft_limit``
        messages wait (rapid-fire text) the head and the messages after it of the same routing key (by ``policy``)
        up to a command or another key's message, or one message. A message that ``collects`` (its busy policy
        gathers what arrived during a turn) or that an interrupt joined takes the messages after it that do too.
        A merged turn has one reply, so it never merges two chats' messages (a DM and a group resumed into one
        session each get theirs)."""
        head = self.queue[0]
        if isinstance(head, ControlWork):
            self.queue.popleft()
            deliveries = (head.delivery,) if head.delivery is not None else ()
            return RunTurn(deliveries=deliveries, token=CancelToken(), control=head.control)
        if parse_command(head.message.text) is not None:  # /stop, queued behind the turn it stopped
            self.queue.popleft()
            return RunTurn(deliveries=(head,), token=CancelToken(), reply_override="Stopped.")
        self.token, self.steering = CancelToken(), SteerChannel()
        carried, self.carried = self.carried, ()
        merged: list[Delivery] = [self.queue.popleft()]  # type: ignore[list-item]
        rapid = len(self.queue) + 1 >= soft_limit
        if self.queue and (rapid or self._joins(head, collects)):  # the key only when something may join
            key = build_session_key(head.message.source, policy)
            while (
                self.queue
                and _mergeable(self.queue[0], key, policy)
                and (rapid or self._joins(self.queue[0], collects))
            ):
                merged.append(self.queue.popleft())  # type: ignore[arg-type]
        if self.joined:
            self.joined.difference_update(d.inbox_id for d in merged)
        return RunTurn(deliveries=tuple(merged), token=self.token, steering=self.steering, also_answers=carried)

    def _joins(self, work: Work, collects: Callable[[Delivery], bool]) -> bool:
        """Whether ``work`` is a message gathered with the others into one turn (collected, or joined)."""
        return isinstance(work, Delivery) and (work.inbox_id in self.joined or collects(work))

    def interrupt(self) -> None:
        """A newer message interrupts: stop the running ordinary turn, and let every queued message join the next
        turn, which answers everything since."""
        self.token.cancel(interrupted=True)
        self.joined.update(w.inbox_id for w in self.queue if isinstance(w, Delivery))

    def turn_ended(self, outcome: TurnOutcome | None) -> None:
        """The running turn (or step) finished with ``outcome`` (``None``: it saved nothing): the messages handed
        into it that it did not commit go back to the head of the queue, in order, and an interrupted turn's
        messages are answered by the next ordinary turn."""
        self.busy = False
        left = self.steering.returned(outcome.inbox_ids if outcome is not None else ())
        self.queue.extendleft(reversed(left))
        if outcome is not None:
            self.carried += outcome.interrupted

    def put_back(self, turn: RunTurn) -> None:
        """Put ``turn``'s work back at the head of the queue, in order: it runs again before anything after it
        (and answers the interrupted messages it was to answer)."""
        items: list[Work]
        if turn.control is not None:
            items = [ControlWork(control=turn.control, delivery=turn.deliveries[0] if turn.deliveries else None)]
        else:
            items = list(turn.deliveries)
            self.carried = turn.also_answers + self.carried
        self.queue.extendleft(reversed(items))

    def pause_after_failure(self, now: float) -> float:
        """Count a turn the store refused to save and pause the session: ``RETRY_BASE_S`` after the first failure
        in a row, doubling up to ``RETRY_MAX_S``. Return the pause."""
        self.failures += 1
        pause: float = min(RETRY_MAX_S, RETRY_BASE_S * 2.0 ** (self.failures - 1))
        self.paused_until = now + pause
        return pause

    @property
    def idle(self) -> bool:
        """Whether the session has an actor with no turn running or queued, and not stopping."""
        return self.ref is not None and not self.busy and not self.stopping and not self.queue


def idle_sessions(live: Mapping[str, LiveSession], cutoff: float) -> list[str]:
    """The sessions in ``live`` (ordered least recently used first) whose actor is idle and unused since ``cutoff``."""
    found = []
    for session_id, state in live.items():
        if state.last_used > cutoff:
            break  # ordered by last use: the rest are more recent
        if state.idle:
            found.append(session_id)
    return found


def evictable_sessions(live: Mapping[str, LiveSession], excess: int) -> list[str]:
    """Up to ``excess`` sessions in ``live`` whose idle actors may go to bring the count under the cap, least
    recently used first. Under the cap (``excess <= 0``, every activation but the ones over it) nothing is
    looked at: the supervisor calls this on each activation, and a scan of every live session cost it about
    0.1 µs per session each time (0.5 ms at 5,000)."""
    if excess <= 0:
        return []
    return list(islice((session_id for session_id, state in live.items() if state.idle), excess))


def statistics_of(
    sessions: Iterable[LiveSession], actors: int, routes_cached: int, counts: Mapping[str, int]
) -> SupervisorStatistics:
    """The supervisor's snapshot: its live ``sessions``, ``actors`` running, cached routes and event ``counts``."""
    states = list(sessions)
    return SupervisorStatistics(
        live_actors=actors,
        stopping_actors=sum(1 for s in states if s.stopping),
        running=sum(1 for s in states if s.busy),
        queued_messages=sum(len(s.queue) for s in states),
        routes_cached=routes_cached,
        activations=counts["activations"],
        passivations=counts["passivations"],
        evictions=counts["evictions"],
        turns=counts["turns"],
        rejected=counts["rejected"],
        ended=counts.get("ended", 0),
    )


def _mergeable(work: Work, key: str, policy: KeyPolicy) -> bool:
    """Whether ``work`` is a message of routing key ``key`` that is not a command."""
    if not isinstance(work, Delivery) or parse_command(work.message.text) is not None:
        return False
    return build_session_key(work.message.source, policy) == key
