"""Messages handed into a running turn (busy policy ``steer``): the supervisor's signal to the turn, as the cancel
token is for ``/stop``.

Each ordinary turn gets a :class:`SteerChannel` from the supervisor's
:class:`~hermes_actors.runtime.live.LiveSession`. The turn opens it when its agent takes steering
(:func:`~hermes_actors.agents.base.takes_steering`); while it is open the supervisor may
:meth:`~SteerChannel.offer` a message that arrived, the agent :meth:`~SteerChannel.take` s the texts before its next
model call, and the turn :meth:`~SteerChannel.close` s it when the agent's call is over, learning which messages it
took. When the turn has finished, the supervisor takes back (:meth:`~SteerChannel.returned`) every message the turn
did not commit: taken too late, taken by a turn that failed or was stopped, or never taken. Those wait for the next
turn, collected into one, so no steered message is lost whatever the turn did; their inbox rows stay pending until a
turn commits them, so a crash loses none either.

:func:`steered_messages` puts the taken messages where the agent's reply says they were sent.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Sequence

import msgspec

from hermes_actors.agents.turn import AgentMessage
from hermes_actors.lifecycle.commands import parse_command
from hermes_actors.lifecycle.work import Delivery
from hermes_actors.store import NewMessage, Role

__all__ = ["SteerChannel", "steerable", "steered_messages"]

_log = logging.getLogger(__name__)


def steerable(delivery: Delivery) -> bool:
    """Whether ``delivery`` can go into a running turn: plain text (no files, no command, no client conversation,
    tools or tool results: those change what the turn is)."""
    message = delivery.message
    return (
        bool(message.text)
        and not message.attachments
        and message.context is msgspec.UNSET
        and message.client_tools is msgspec.UNSET
        and message.tool_results is msgspec.UNSET
        and parse_command(message.text) is None
    )


class SteerChannel:
    """The messages offered to one running turn and how far its agent took them. Thread-safe: the supervisor
    offers and takes back, the session's thread opens and closes, the agent's thread takes."""

    __slots__ = ("_closed", "_lock", "_offered", "_open", "_taken")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = False
        self._closed = False
        self._offered: list[Delivery] = []
        self._taken = 0

    def open(self) -> None:
        """The turn's agent takes steering and is about to be called: offers are accepted from now on."""
        with self._lock:
            self._open = not self._closed

    def offer(self, delivery: Delivery) -> bool:
        """Hand ``delivery`` to the running turn; ``False`` when the channel is not open (the agent takes no
        steering, or its call has not begun or is over)."""
        with self._lock:
            if not self._open:
                return False
            self._offered.append(delivery)
            return True

    def take(self) -> list[str]:
        """The texts offered since the last take, oldest first (the agent's thread, before a model call)."""
        with self._lock:
            if not self._open:
                return []
            fresh = self._offered[self._taken :]
            self._taken = len(self._offered)
        return [d.message.text for d in fresh]

    def close(self) -> tuple[Delivery, ...]:
        """The agent's call is over: accept and hand out nothing more; return the deliveries the agent took."""
        with self._lock:
            self._open = False
            self._closed = True
            return tuple(self._offered[: self._taken])

    def returned(self, committed: Collection[int]) -> tuple[Delivery, ...]:
        """The turn has finished and committed the inbox rows ``committed``: close the channel and return the
        offered deliveries it did not commit, in order (they wait for the next turn)."""
        with self._lock:
            self._open = False
            self._closed = True
            left = tuple(d for d in self._offered if d.inbox_id not in committed)
            self._offered.clear()
            return left


def steered_messages(messages: Sequence[AgentMessage], taken: Sequence[Delivery], now: float) -> list[NewMessage]:
    """What a turn stores of its agent's reply ``messages``, where the user messages the agent reports are the
    ``taken`` deliveries' texts, in order (stored with their platform message ids). A taken message the reply does
    not carry (an agent that did not report it) is stored before the reply's last message, so none is lost."""
    left = list(taken)
    stored: list[NewMessage] = []
    for message in messages:
        platform_id: str | None = None
        if message.role == Role.USER and left:
            platform_id = left.pop(0).message.message_id
        stored.append(
            NewMessage(
                role=message.role,
                content=message.content,
                tool_calls=message.tool_calls,
                tool_name=message.tool_name,
                tool_call_id=message.tool_call_id,
                token_count=message.token_count,  # the model's count; a user message has none of its own
                platform_message_id=platform_id,
                created_at=now,
            )
        )
    if left:
        _log.warning(
            "the agent took %d steered messages its reply does not carry; they are stored before it", len(left)
        )
        missing = [
            NewMessage(role=Role.USER, content=d.message.text, platform_message_id=d.message.message_id, created_at=now)
            for d in left
        ]
        stored[-1:-1] = missing
    return stored
