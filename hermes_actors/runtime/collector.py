"""Tune Python's cyclic garbage collector for a long-running gateway (hermesd runs inside :func:`tune_collector`).

CPython collects its youngest generation after every 700 net allocations of container objects, every tenth young
collection also the middle generation, and everything once the objects that survived since the last full
collection reach a quarter of the old ones. A turn allocates dozens of containers, and what survives it (the
history's new messages) lives as long as its session: with 1,000 live sessions (``bench/throughput.py --only
aggregate``: 30,000 turns) the collector ran about 1,100 young, 100 middle and 9 full collections, 1.4-2.4 s of
the process's CPU (45-80 µs a turn), with pauses of 130-550 ms in which no thread runs (the latency and outbox lag
tails). Almost nothing a turn allocates is part of a cycle: reference counting frees it.

Inside :func:`tune_collector` the youngest generation is collected every :data:`YOUNG_THRESHOLD` allocations (the
other thresholds stay), and what exists on entry (modules, configuration) is frozen (:func:`gc.freeze`): no
collection walks it again. The same run spent about 0.4 s in 50 young and 5 middle collections and none full,
its longest pause 60-70 ms. On exit (hermesd run in-process by a test) the collector is as it was.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["YOUNG_THRESHOLD", "tune_collector"]

YOUNG_THRESHOLD = 10_000
"""Net container allocations between two collections of the youngest generation (CPython's default: 700)."""


@contextlib.contextmanager
def tune_collector(young: int = YOUNG_THRESHOLD) -> Iterator[tuple[int, int, int]]:
    """Within the block, collect the youngest generation every ``young`` allocations and leave what is alive on
    entry out of every collection; yields the thresholds set. The previous thresholds return on exit, and what was
    frozen is collected again."""
    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(young, before[1], before[2])
    try:
        yield gc.get_threshold()
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
