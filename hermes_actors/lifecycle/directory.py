"""The port the lifecycle commands see the runtime through: the supervisor's routing directory and session queues.

The lifecycle layer sits below the runtime, so it defines what it needs, and the runtime implements it
(:class:`~hermes_actors.runtime.directory.SupervisorDirectory`). Every method runs on the supervisor's thread and
returns at once: none waits for a commit.
"""

from __future__ import annotations

from typing import Protocol

from hermes_actors.lifecycle.work import Control, Delivery
from hermes_actors.messages import OutboundDocument
from hermes_actors.routing import SessionSource
from hermes_actors.store import InboxState

__all__ = ["Directory"]


class Directory(Protocol):
    """What the lifecycle commands need of the supervisor's routing directory and session queues."""

    def existing(self, routing_key: str) -> str | None:
        """Return the live session ``routing_key`` leads to, without creating one."""
        ...

    def is_ending(self, session_id: str) -> bool:
        """Return whether ``session_id``'s end is queued but not committed yet."""
        ...

    def is_active(self, session_id: str) -> bool:
        """Return whether ``session_id`` has a turn running or queued."""
        ...

    def awaits_creation(self, session_id: str) -> bool:
        """Return whether ``session_id`` is assigned but its first turn (which creates its row) has not run."""
        ...

    def reply_now(
        self,
        delivery: Delivery,
        text: str,
        *,
        session_id: str | None,
        state: InboxState = InboxState.DONE,
        document: OutboundDocument | None = None,
    ) -> None:
        """Complete ``delivery`` with ``text`` (and ``document``, a file for a sender that takes files) from the
        directory itself (nothing goes to a transcript)."""
        ...

    def send_now(
        self,
        source: SessionSource,
        text: str,
        session_id: str | None,
        *,
        reply_to: str | None = None,
    ) -> None:
        """Send ``text`` to ``source``'s chat (a later report), answering inbound ``reply_to`` when given."""
        ...

    def queue_control(self, session_id: str, control: Control, delivery: Delivery | None) -> None:
        """Queue ``control`` as a turn of ``session_id``, answering ``delivery``."""
        ...

    def cancel_running(self, session_id: str | None) -> None:
        """Invalidate the running turn of ``session_id`` (its late result is dropped)."""
        ...

    def begin_end(self, session_id: str) -> None:
        """Mark ``session_id`` as ending: its keys re-resolve to successors, which wait for the end to commit."""
        ...

    def rebind(self, routing_key: str, session_id: str) -> None:
        """Point ``routing_key`` at ``session_id`` (stored, and cached at once)."""
        ...

    def unbind(self, routing_key: str, session_id: str) -> None:
        """Delete ``routing_key``'s route, which led to ``session_id``."""
        ...
