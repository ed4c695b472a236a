"""What a running turn reports to whoever watches it live: the :class:`TurnEvents` port an entry point hands the
runtime (``Inbox.watch_turn``), which the runtime hands the agent (``TurnInput.events``)."""

from __future__ import annotations

from typing import Protocol

__all__ = ["ToolStatus", "TurnEvents"]

ToolStatus = str
"""``running`` when a tool call starts, ``completed`` when its result is in."""


class TurnEvents(Protocol):
    """Where an agent reports a turn as it happens, for a client watching it live (an API request that streams).

    Called from the agent's thread; each call must return at once. What is reported here is only a view: the
    reply the agent returns is what the turn stores, so what an agent streams through :meth:`text` is the start of
    its reply's text, and a tool call it reports (``running`` as it starts, ``completed`` with its result) is
    stored as a tool message of the reply. Nothing is reported after the agent's call returns.
    """

    def started(self, session_id: str) -> None:
        """The turn has begun in ``session_id``: its agent is being called (until now it waited in its session's
        queue). Called by the runtime, not by agents."""
        ...

    def stopped(self) -> None:
        """The turn was invalidated (``/stop``, ``/new``, a reset or an operator's end of its session) before its
        agent answered, and its message is now stored without an answer: no reply comes, and nothing more of it is
        reported. Called by the runtime, not by agents."""
        ...

    def text(self, delta: str) -> None:
        """The next piece of the reply's text, as the model produced it."""
        ...

    def tool(self, name: str, call_id: str, status: ToolStatus, detail: str = "") -> None:
        """A tool call started (``running``; ``detail`` is its arguments, JSON) or finished (``completed``;
        ``detail`` is its result)."""
        ...
