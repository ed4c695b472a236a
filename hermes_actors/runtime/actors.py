"""The base class of the runtime's pykka actors: a thread per actor, with a C queue for its inbox.

pykka's ``ThreadingActor`` gives every actor a ``queue.Queue``, which is written in Python: each ``put`` and
``get`` takes a ``threading.Condition`` and a blocked ``get`` allocates a waiter lock. An actor's inbox needs
only ``put``, ``get`` and ``empty`` (pykka's ``ActorInbox`` protocol), which ``queue.SimpleQueue`` provides in C,
unbounded and FIFO, as the Python queue was. pykka documents ``_create_actor_inbox`` as the method an actor type
overrides to choose its inbox; pyproject.toml keeps pykka below 5 for it. Alternating runs of
``bench/throughput.py --only aggregate`` against the stock inbox gave 3,002/3,407/3,065 turns/s against
2,474/2,245/2,404, and 304–344 µs of CPU per turn against 423–465 (bench/README.md).
"""

from __future__ import annotations

import queue
from typing import TYPE_CHECKING, Any

import pykka

if TYPE_CHECKING:
    from pykka._actor import ActorInbox

__all__ = ["RuntimeActor"]


class RuntimeActor(pykka.ThreadingActor):
    """A ``pykka.ThreadingActor`` whose inbox is a ``queue.SimpleQueue``."""

    @staticmethod
    def _create_actor_inbox() -> ActorInbox:
        inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        return inbox
