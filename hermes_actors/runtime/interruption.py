"""What a turn stopped by a newer message (busy policy ``interrupt``) keeps of its agent's answer.

With ``busy.interrupted_output: partial`` every ordinary turn records the text its agent streams
(:class:`PartialText`, which passes every event on to the turn's watchers; an agent that streams only when someone
watches, as the OpenAI agent does, then streams every turn). A turn interrupted before its answer was complete
stores that text as an assistant message marked partial (:func:`partial_message`), so the model's next call sees
how far it had come; with ``discard`` (the default) the transcript keeps only the user's message, as after ``/stop``.
A turn someone watches records it either way: a failed agent's reply carries what it had written
(:attr:`~hermes_actors.messages.OutboundMessage.partial`).
"""

from __future__ import annotations

import threading

from hermes_actors.agents.turn import ToolStatus, TurnEvents
from hermes_actors.store import NewMessage, Role

__all__ = ["PARTIAL_MARK", "PartialText", "partial_message"]

PARTIAL_MARK = "[partial answer: interrupted by a newer message]"
"""What ends the content of an interrupted answer kept in the transcript."""


class PartialText:
    """A turn's events, recording the text its agent streams; every event goes on to ``watchers`` too (the turn's
    :class:`~hermes_actors.runtime.turn_watch.TurnWatch` view, or ``None``). ``keep``: the text is wanted even when
    nobody watches (an interrupted turn keeps it), so the agent is given these events then too. Thread-safe."""

    __slots__ = ("_lock", "_parts", "keep", "watchers")

    def __init__(self, *, keep: bool = False) -> None:
        self._lock = threading.Lock()
        self._parts: list[str] = []
        self.keep = keep
        self.watchers: TurnEvents | None = None

    def written(self) -> str:
        """The text streamed so far."""
        with self._lock:
            return "".join(self._parts)

    def started(self, session_id: str) -> None:
        if self.watchers is not None:
            self.watchers.started(session_id)

    def stopped(self) -> None:
        if self.watchers is not None:
            self.watchers.stopped()

    def text(self, delta: str) -> None:
        with self._lock:
            self._parts.append(delta)
        if self.watchers is not None:
            self.watchers.text(delta)

    def tool(self, name: str, call_id: str, status: ToolStatus, detail: str = "") -> None:
        if self.watchers is not None:
            self.watchers.tool(name, call_id, status, detail)


def partial_message(text: str, now: float) -> NewMessage | None:
    """The assistant message an interrupted turn stores for the ``text`` it had streamed (``None`` for none)."""
    if not text.strip():
        return None
    return NewMessage(role=Role.ASSISTANT, content=f"{text}\n\n{PARTIAL_MARK}", created_at=now)
