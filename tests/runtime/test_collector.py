"""The collector hermesd runs under: young collections rarer, what was alive on entry left out, all undone on exit."""

from __future__ import annotations

import gc
import weakref

from hermes_actors.runtime.collector import YOUNG_THRESHOLD, tune_collector


class _Node:
    """A cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_young_collections_are_rarer_inside_and_as_before_after() -> None:
    before = gc.get_threshold()
    with tune_collector() as thresholds:
        assert thresholds == gc.get_threshold() == (YOUNG_THRESHOLD, before[1], before[2])
    assert gc.get_threshold() == before


def test_a_cycle_alive_on_entry_is_left_alone_inside_and_collected_after() -> None:
    old = _Node()
    gone = weakref.ref(old)
    with tune_collector(young=5000):
        assert gc.get_freeze_count() > 0
        del old
        gc.collect()
        assert gone() is not None  # frozen: no collection walks it
        fresh = _Node()
        fresh_gone = weakref.ref(fresh)
        del fresh
        gc.collect()
        assert fresh_gone() is None  # what is made inside is collected as ever
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert gone() is None
