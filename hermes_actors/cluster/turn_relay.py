"""A running turn's events, from the shard host that runs it to the replica whose client watches it.

The host side, :class:`EventRelay`: :meth:`HostRuntime.pull <hermes_actors.cluster.host.runtime.HostRuntime.pull>`
registers ``relay.events(message_id)`` as the watcher of every message of a relayed platform (the API server)
before handing it to the supervisor, so the agent streams (it streams only while someone watches) and each event
goes into a queue. A thread of the relay's own sends the queue as ``NOTIFY``s
(:class:`~hermes_actors.store.pg.turn_relay.EventPublisher`): the agent's thread never waits for the database,
adjacent text deltas of one message are sent as one, and text longer than a notification holds is split.

A message whose sender reads only the outcome (``InboundMessage.streams`` false: a chat completion without a stream)
is watched by ``relay.stops(message_id)`` instead: nothing is sent while its turn runs (no notification, no wake-up
of every listener of the database), only a stop (``/stop``, ``/new``, a reset), with the session, which the replica
answers at once. Its reply comes as ever from the outbox, carrying what a failed agent had written.

The replica side is :class:`~hermes_actors.cluster.replica.api_replies.ApiReplies`, which decodes them with
:func:`decode_event` and replays them on the watchers its requests registered.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from typing import Literal

import msgspec

from hermes_actors.store.pg.turn_relay import MAX_PAYLOAD, EventPublisher
from hermes_actors.turn_events import ToolStatus, TurnEvents

__all__ = ["DETAIL_LIMIT", "EventRelay", "RelayedEvent", "decode_event"]

_log = logging.getLogger(__name__)

TEXT_CHUNK = 1000
"""The most characters of text one notification carries (escaped, a character takes at most 6 bytes of JSON)."""
DETAIL_LIMIT = 1000
"""The most characters of a tool call's arguments or result relayed; longer ones end with an ellipsis."""


class RelayedEvent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One event on the wire: ``m`` the inbound message id, ``q`` the relay's sequence number (no two payloads of
    one transaction are identical, which ``NOTIFY`` would merge), ``k`` the kind: ``s`` started (``s`` the session),
    ``t`` text (``t``), ``x`` a tool call (``n`` name, ``c`` call id, ``st`` status, ``d`` detail), ``p`` stopped."""

    m: str
    q: int
    k: Literal["s", "t", "x", "p"]
    s: str = ""
    t: str = ""
    n: str = ""
    c: str = ""
    st: str = ""
    d: str = ""


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(RelayedEvent)


def decode_event(payload: str) -> RelayedEvent | None:
    """The event in ``payload``, or ``None`` for one that does not decode (logged)."""
    try:
        return _decoder.decode(payload)
    except msgspec.DecodeError:
        _log.warning("a relayed turn event does not decode; ignored: %.200s", payload)
        return None


class _Stops:
    """The :class:`TurnEvents` of a turn whose client reads only its outcome: a stop is relayed (with the session,
    which the client's answer names), nothing else."""

    def __init__(self, relay: EventRelay, message_id: str) -> None:
        self._relay = relay
        self._message_id = message_id
        self._session_id = ""

    def started(self, session_id: str) -> None:
        self._session_id = session_id

    def stopped(self) -> None:
        if self._session_id:
            self._relay.put(self._message_id, "s", s=self._session_id)
        self._relay.put(self._message_id, "p")

    def text(self, delta: str) -> None:
        """Not relayed: a failed agent's text comes with its reply."""

    def tool(self, name: str, call_id: str, status: ToolStatus, detail: str = "") -> None:
        """Not relayed: the client reads only the outcome."""


class _Events:
    """The :class:`TurnEvents` the host's turn reports to: each event into the relay's queue."""

    def __init__(self, relay: EventRelay, message_id: str) -> None:
        self._relay = relay
        self._message_id = message_id

    def started(self, session_id: str) -> None:
        self._relay.put(self._message_id, "s", s=session_id)

    def stopped(self) -> None:
        self._relay.put(self._message_id, "p")

    def text(self, delta: str) -> None:
        if delta:
            self._relay.put(self._message_id, "t", t=delta)

    def tool(self, name: str, call_id: str, status: ToolStatus, detail: str = "") -> None:
        if len(detail) > DETAIL_LIMIT:
            detail = detail[: DETAIL_LIMIT - 1] + "…"
        self._relay.put(self._message_id, "x", n=name, c=call_id, st=str(status), d=detail)


_Item = tuple[str, str, dict[str, str]]  # message id, kind, fields


class EventRelay:
    """Sends the events of watched turns as notifications, from a thread of its own; :meth:`close` ends it."""

    def __init__(self, dsn: str, *, batch: int = 64) -> None:
        self._publisher = EventPublisher(dsn)
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._sequence = itertools.count()
        self._batch = batch
        self._thread = threading.Thread(target=self._run, name="turn-relay", daemon=True)
        self._thread.start()

    def events(self, message_id: str) -> TurnEvents:
        """What the turn answering ``message_id`` reports to: every event relayed as it comes."""
        return _Events(self, message_id)

    def stops(self, message_id: str) -> TurnEvents:
        """What the turn answering ``message_id`` reports to when its client reads only the outcome: its stop."""
        return _Stops(self, message_id)

    def put(self, message_id: str, kind: str, **fields: str) -> None:
        """Queue one event (called on the agent's thread; returns at once)."""
        self._queue.put((message_id, kind, fields))

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            items = [first]
            while len(items) < self._batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._send(items)
                    return
                items.append(item)
            self._send(items)

    def _send(self, items: list[_Item]) -> None:
        payloads = []
        for event in self._events(items):
            payload = _encoder.encode(event).decode()
            if len(payload.encode("utf-8")) > MAX_PAYLOAD:  # a huge message id: the watcher misses this event
                _log.warning("a turn event of message %.80s is too long to relay; dropped", event.m)
                continue
            payloads.append(payload)
        try:
            self._publisher.publish(payloads)
        except Exception:  # a lost event costs a client its live view, never the reply (read from the outbox)
            _log.exception("relaying %d turn events failed; their watchers get the reply without them", len(items))

    def _events(self, items: list[_Item]) -> list[RelayedEvent]:
        merged: list[_Item] = []
        for message_id, kind, fields in items:
            last = merged[-1] if merged else None
            if kind == "t" and last is not None and last[0] == message_id and last[1] == "t":
                merged[-1] = (message_id, "t", {"t": last[2]["t"] + fields["t"]})
            else:
                merged.append((message_id, kind, fields))
        events: list[RelayedEvent] = []
        for message_id, kind, fields in merged:
            if kind == "t":
                text = fields["t"]
                for start in range(0, len(text), TEXT_CHUNK):
                    piece = text[start : start + TEXT_CHUNK]
                    events.append(RelayedEvent(m=message_id, q=next(self._sequence), k="t", t=piece))
            else:
                events.append(RelayedEvent(m=message_id, q=next(self._sequence), k=kind, **fields))  # type: ignore[arg-type]
        return events

    def close(self) -> None:
        """Send what is queued, then stop the thread and close the connection."""
        self._queue.put(None)
        self._thread.join(timeout=5)
        self._publisher.close()
